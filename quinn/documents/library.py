"""The user's files: read one mail's attachments within the limits, keep each file once by content hash, and
cut its text into passages that conversation recall searches (memory/passages.py) under the owner's isolation.

Called only for an authenticated user's mail (the app's memory path, as conversation recall is): a stranger's
files are never read or kept. Where the bytes live, and why the database: migration 0013.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from quinn.clock import iso, utcnow
from quinn.config import DocumentsConfig
from quinn.db import Database, Transaction
from quinn.documents.extract import Extracted
from quinn.documents.reading import read_in_child, unread
from quinn.mailbox import Attachment, InboundEmail
from quinn.memory import normalise_user, split_passages, stored_message, write_passages

if TYPE_CHECKING:
    from quinn.db import Database
    from quinn.memory import MemoryStore

log = logging.getLogger(__name__)

# 300 tokens (at about 4 characters a token, search.estimate_tokens) with 50 of overlap: the lower end of issue
# 18's 300-800, because the default embedder reads 256 word pieces of a passage; words past them are still found
# by full-text search, and the overlap starts the next passage with them.
DOCUMENT_PASSAGE_CHARS = 1200
DOCUMENT_OVERLAP_CHARS = 200
PART_BYTES = 1 << 20  # a file's bytes are stored in parts of this size: sqld refuses one argument of ~5 MB


async def take_documents(
    store: MemoryStore, config: DocumentsConfig, email: InboundEmail, user: str, session_id: str | None, *,
    searchable: bool,
) -> list[Extracted]:  # fmt: skip
    """The authenticated user's mail's attachments: read (in a child process, within the limits) and, when the
    mail joins conversation recall (``searchable``), kept and indexed. Returns them as read, for the reply
    prompt; a file that could not be read is one with its reason, never a failed mail."""
    files = email.attachments
    if not files:
        return []
    if not config.enabled:
        return [unread(a, i, "reading attached files is turned off here") for i, a in enumerate(files, start=1)]
    read = await asyncio.to_thread(read_in_child, files, config)
    documents = read if isinstance(read, list) else [unread(a, i, read) for i, a in enumerate(files, start=1)]
    for document in documents:
        if document.error:
            log.info("mail %s: file %r (%s, %d bytes) not read: %s", email.message_id, document.name,
                     document.content_type, document.size, document.error)  # fmt: skip
    if searchable:  # else a memory command, or someone who asked not to be remembered: shown, never kept
        await store.db.run(keep_documents, store, user, email.message_id, session_id, documents, files,
                           max_file_bytes=config.max_file_kb * 1024)  # fmt: skip
    return documents


def document_pieces(document: Extracted) -> list[tuple[str, str]]:
    """The document's text as (ref, passage) pairs: each section cut on its own, so a passage keeps its page."""
    return [(section.ref, piece) for section in document.sections
            for piece in split_passages(section.text, DOCUMENT_PASSAGE_CHARS, DOCUMENT_OVERLAP_CHARS)]  # fmt: skip


def _store(
    db: Database, user: str, message_row: int, position: int, session_id: str | None, document: Extracted,
    data: bytes,
) -> int:  # fmt: skip
    """One file and its link to the mail in one transaction (its bytes in parts, once per user); its id."""
    with db.transaction() as tx:
        known = tx.query("SELECT id FROM documents WHERE user_id = ? AND sha256 = ?", (user, document.sha256))
        if known:
            document_id = int(known[0][0])
        else:
            document_id = tx.execute(
                "INSERT INTO documents (user_id, sha256, kind, size, error, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (user, document.sha256, document.kind, document.size, document.error, iso(utcnow())),
            )
            for part, start in enumerate(range(0, len(data), PART_BYTES)):
                tx.execute("INSERT INTO document_parts (document_id, part, user_id, bytes) VALUES (?, ?, ?, ?)",
                           (document_id, part, user, data[start : start + PART_BYTES]))  # fmt: skip
        tx.execute(
            "INSERT OR IGNORE INTO message_documents (message_row, position, document_id, user_id, session_id,"
            " name, content_type) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (message_row, position, document_id, user, session_id, document.name, document.content_type[:200]),
        )
    return document_id


def document_bytes(db: Database, user_id: str, document_id: int) -> bytes | None:
    """A kept file's bytes, reassembled; None when the user has no such file."""
    rows = db.query("SELECT bytes FROM document_parts WHERE document_id = ? AND user_id = ? ORDER BY part",
                    (document_id, normalise_user(user_id)))  # fmt: skip
    return b"".join(bytes(r[0]) for r in rows) if rows else None


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
    message = stored_message(db, user, message_id, "in") if user else None
    if user is None or message is None:
        return 0
    written = kept = 0
    for position, (document, attachment) in enumerate(zip(documents, attachments, strict=True), start=1):
        if not document.sha256 or not attachment.data or len(attachment.data) > max_file_bytes:
            continue  # not read for the mail's limit, empty, or too big: refused, not kept
        try:
            document_id = _store(db, user, message.row, position, session_id, document, attachment.data)
        except Exception as exc:  # a file that cannot be stored is not kept; the mail is still answered
            log.warning("mail %s: file %r not kept: %s: %s", message_id, document.name, type(exc).__name__, exc)
            continue
        kept += 1
        indexed = db.query_value("SELECT 1 FROM passages WHERE message_row = ? AND document_id = ? LIMIT 1",
                                 (message.row, document_id))  # fmt: skip
        if document.error is None and not indexed:
            written += write_passages(store, user, message, document_pieces(document), document_id=document_id,
                                      document=document.name)  # fmt: skip
    if documents:
        log.info("mail %s: %d of %d file(s) kept for %s, %d passage(s) indexed", message_id, kept, len(documents),
                 user, written)  # fmt: skip
    return written


def renamed(name: str, mentions: Callable[[str], bool]) -> str | None:
    """A file's shown name without a forgotten fact: ``attachment`` with its extension ("IVF results.pdf" is
    "attachment.pdf"), as ``extract.display_name`` names a file with no name; None when ``name`` does not mention
    it. A name is one phrase: nothing of it is kept but the kind of file."""
    if not mentions(name):
        return None
    stem, dot, ext = name.rpartition(".")
    kind = dot and stem and ext.isalnum() and len(ext) <= 8 and not mentions(ext)
    return f"attachment.{ext}" if kind else "attachment"


def forget_in_files(db: Database, user_id: str, mentions: Callable[[str], bool]) -> int:
    """A forget's part of the user's files (issue 35): a name their mail gave a file that ``mentions`` the fact
    is renamed (``renamed``), and the bytes of a file whose name or read text mentions it are deleted (a PDF cannot
    be rewritten; its text in recall is, with the passages, after this). The file stays listed, by kind, size
    and date. Run before the passages are rewritten: their text says which files mention it. Returns how many
    files changed."""
    user = normalise_user(user_id)
    if user is None:
        return 0
    changed: set[int] = set()
    with db.transaction() as tx:
        texts = tx.query("SELECT document_id, content, coalesce(ref, '') FROM passages WHERE user_id = ?"
                         " AND document_id IS NOT NULL", (user,))  # fmt: skip
        said = {int(d) for d, content, ref in texts if mentions(content) or mentions(ref)}
        for row, position, document_id, name in tx.query(
            "SELECT message_row, position, document_id, name FROM message_documents WHERE user_id = ?", (user,)
        ):
            new = renamed(name, mentions)
            if new is not None:
                tx.execute("UPDATE message_documents SET name = ? WHERE message_row = ? AND position = ?",
                           (new, row, position))  # fmt: skip
                said.add(int(document_id))
        for document_id in sorted(said):
            tx.execute("DELETE FROM document_parts WHERE document_id = ? AND user_id = ?", (document_id, user))
            changed.add(document_id)
    return len(changed)


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The documents' part of a purge: the user's files, their parts and their links to mail. Run before the
    mailbox's (deleting a message drops its links, and a trigger a file with its last link); all three counted
    first, then deleted by owner, so a file is the user's even if a link was ever missing. Their passages go with
    memory's part."""
    tables = ("documents", "document_parts", "message_documents")
    counts = {t: int(tx.query(f"SELECT count(*) FROM {t} WHERE user_id = ?", (user,))[0][0]) for t in tables}
    for table in reversed(tables):  # links, parts, then the files (the triggers find nothing left)
        tx.delete(table, "user_id = ?", (user,))
    return counts


def document_counts(db: Database, users: Sequence[str]) -> dict[str, int]:
    """How many files each of ``users`` has kept, in one grouped query (the People page); none: absent."""
    if not users:
        return {}
    marks = ", ".join("?" * len(users))
    rows = db.query(f"SELECT user_id, count(*) FROM documents WHERE user_id IN ({marks}) GROUP BY user_id",
                    list(users))  # fmt: skip
    return {user: int(n) for user, n in rows}


def files_of(db: Database, user_id: str) -> list[dict[str, object]]:
    """The files kept for the user, by the names their mail gave them: what the export and the person page show
    (issue 35)."""
    rows = db.query(
        "SELECT md.name, d.kind, d.size, d.created_at, coalesce(d.error, '') FROM message_documents md"
        " JOIN documents d ON d.id = md.document_id WHERE md.user_id = ? AND md.message_row > 0"
        " ORDER BY d.created_at, md.name",
        (user_id,),
    )
    return [{"name": n, "kind": k, "size": s, "date": c, "unreadable": e} for n, k, s, c, e in rows]
