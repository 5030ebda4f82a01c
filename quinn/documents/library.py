"""The user's files: read one mail's attachments within the limits, keep each file once by content hash, and
cut its text into passages that conversation recall searches (memory/passages.py) under the owner's isolation.

Called only for an authenticated user's mail (the app's memory path, as conversation recall is): a stranger's
files are never read or kept. Where the bytes live, and why the database: migration 0013.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from quinn.config import DocumentsConfig
from quinn.documents.extract import Deadline, Extracted, Limits, display_name, extract
from quinn.mailbox.message import Attachment, InboundEmail
from quinn.memory.filters import normalise_user
from quinn.memory.models import iso, utcnow
from quinn.memory.passages import split_passages, stored_message, write_passages

if TYPE_CHECKING:
    from quinn.memory.store import MemoryStore

log = logging.getLogger(__name__)

# 300 tokens (at about 4 characters a token, search.estimate_tokens) with 50 of overlap: the lower end of issue
# 18's 300-800, because the default embedder reads 256 word pieces of a passage; words past them are still found
# by full-text search, and the overlap starts the next passage with them.
DOCUMENT_PASSAGE_CHARS = 1200
DOCUMENT_OVERLAP_CHARS = 200
STUCK_GRACE_S = 2.0  # past the deadline, a reader stuck inside one library call is given up on (its thread runs on)


async def take_documents(
    store: MemoryStore, config: DocumentsConfig, email: InboundEmail, user: str, session_id: str | None, *,
    searchable: bool,
) -> list[Extracted]:  # fmt: skip
    """The authenticated user's mail's attachments: read (in a worker thread, within the limits) and, when the
    mail joins conversation recall (``searchable``), kept and indexed. Returns them as read, for the reply
    prompt; a file that could not be read is one with its reason, never a failed mail."""
    files = email.attachments
    if not files:
        return []
    if not config.enabled:
        return [unread(a, i, "reading attached files is turned off here") for i, a in enumerate(files, start=1)]
    try:
        documents = await asyncio.wait_for(asyncio.to_thread(read_attachments, files, config),
                                           config.timeout_s + STUCK_GRACE_S)  # fmt: skip
    except TimeoutError:
        reason = f"reading the attached files took longer than the {config.timeout_s:g} s limit"
        documents = [unread(a, i, reason) for i, a in enumerate(files, start=1)]
    for document in documents:
        if document.error:
            log.info("mail %s: file %r (%s, %d bytes) not read: %s", email.message_id, document.name,
                     document.content_type, document.size, document.error)  # fmt: skip
    if searchable:  # else a memory command, or someone who asked not to be remembered: shown, never kept
        await store.db.run(keep_documents, store, user, email.message_id, session_id, documents, files,
                           max_file_bytes=config.max_file_kb * 1024)  # fmt: skip
    return documents


def limits_of(config: DocumentsConfig) -> Limits:
    """The per-file limits of the ``[documents]`` settings."""
    return Limits(max_file_bytes=config.max_file_kb * 1024, max_pages=config.max_pages,
                  max_text_chars=config.max_text_kb * 1024, timeout_s=config.timeout_s)  # fmt: skip


def read_attachments(attachments: Sequence[Attachment], config: DocumentsConfig) -> list[Extracted]:
    """Every attachment of one mail read (``extract``), in order; once their sizes together pass
    ``max_mail_kb``, the rest are reported unread, not read. Pure; never raises."""
    limits = limits_of(config)
    deadline = Deadline(config.timeout_s)  # one for the whole mail
    budget = config.max_mail_kb * 1024
    read: list[Extracted] = []
    used = 0
    for index, attachment in enumerate(attachments, start=1):
        used += attachment.size
        if used > budget:
            reason = f"the mail's files together pass the limit of {config.max_mail_kb} kB; this one was not read"
            read.append(unread(attachment, index, reason))
            continue
        read.append(extract(attachment.filename, attachment.content_type, attachment.data, limits, index, deadline))
    return read


def unread(attachment: Attachment, index: int, reason: str) -> Extracted:
    """An attachment reported as not read, for ``reason``."""
    return Extracted(display_name(attachment.filename, index), attachment.content_type, "unknown", attachment.size,
                     "", error=reason)  # fmt: skip


def document_pieces(document: Extracted) -> list[tuple[str, str]]:
    """The document's text as (ref, passage) pairs: each section cut on its own, so a passage keeps its page."""
    return [(section.ref, piece) for section in document.sections
            for piece in split_passages(section.text, DOCUMENT_PASSAGE_CHARS, DOCUMENT_OVERLAP_CHARS)]  # fmt: skip


def keep_documents(
    store: MemoryStore, user_id: str, message_id: str, session_id: str | None, documents: Sequence[Extracted],
    attachments: Sequence[Attachment], *, max_file_bytes: int,
) -> int:  # fmt: skip
    """Store the mail's files (``attachments``, as read in ``documents``) for the user, link them to the stored
    mail and its session, and index the text of each file not yet indexed for the mail as its passages. Files
    over the size limit, empty or not read for the mail's limit are not kept. Idempotent (a retried mail adds
    nothing). Runs on the DB thread; returns the passages written."""
    db = store.db
    user = normalise_user(user_id)
    message = stored_message(db, user, message_id, "in")
    if message is None:
        return 0
    written = 0
    for position, (document, attachment) in enumerate(zip(documents, attachments, strict=True), start=1):
        if not document.sha256 or not attachment.data or len(attachment.data) > max_file_bytes:
            continue  # not read for the mail's limit, empty, or too big: refused, not kept
        with db.transaction() as tx:
            tx.execute(
                "INSERT OR IGNORE INTO documents (user_id, sha256, kind, size, content, error, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user, document.sha256, document.kind, document.size, attachment.data, document.error, iso(utcnow())),
            )
            document_id = int(tx.query("SELECT id FROM documents WHERE user_id = ? AND sha256 = ?",
                                       (user, document.sha256))[0][0])  # fmt: skip
            tx.execute(
                "INSERT OR IGNORE INTO message_documents (message_row, position, document_id, user_id, session_id,"
                " name, content_type) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (message.row, position, document_id, user, session_id, document.name, document.content_type[:200]),
            )
        indexed = db.query_value("SELECT 1 FROM passages WHERE message_row = ? AND document_id = ? LIMIT 1",
                                 (message.row, document_id))  # fmt: skip
        if document.error is None and not indexed:
            written += write_passages(store, user, message, document_pieces(document), document_id=document_id,
                                      document=document.name)  # fmt: skip
    if documents:
        log.info("mail %s: %d file(s) kept for %s, %d passage(s) indexed", message_id, len(documents), user, written)
    return written
