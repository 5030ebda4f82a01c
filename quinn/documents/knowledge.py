"""The knowledge base (issue 18, ``quinn kb``): files the admin adds for every user's replies to draw on.

A knowledge-base file is kept as a user's attached file is (migration 0013), under the owner
``passages.KNOWLEDGE_OWNER`` instead of an address: a ``documents`` row by content hash (no bytes: its passages
are all a reply reads), a ``message_documents`` row that names it (``message_row`` is minus the document's id:
no message carried it, and no message's deletion reaches it), and its passages, cited ``[doc:NAME p.3]``, in
``passages``, where every user's search adds them to the user's own (``passages.search_passages``). A user's
purge deletes by the user's address, so it never touches them.

Files are read as attachments are, in a child process within the ``[documents]`` limits. A name is the file's
display name: adding a file of a name already in the base replaces it when its bytes changed (one transaction:
no search sees both versions or neither) and skips it when they did not. A file may be scoped to mail domains
(``quinn kb add --domain example.org``; ``document_domains``, migration 0018): its passages then reach only
users at those domains; a file without a scope reaches everyone. Adding a file again sets its scope to the one
given, unscoped included, without reading it again when its bytes did not change.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quinn.clock import iso, utcnow
from quinn.config import DocumentsConfig
from quinn.db import Transaction
from quinn.documents.extract import display_name
from quinn.documents.library import document_pieces
from quinn.documents.reading import read_in_child
from quinn.mailbox import Attachment
from quinn.memory import (
    KNOWLEDGE_OWNER,
    StoredMessage,
    document_passage_counts,
    drop_document_passages,
    embedded_text,
    insert_passages,
)

if TYPE_CHECKING:
    from quinn.db import Database
    from quinn.memory import MemoryStore


@dataclass(frozen=True)
class Added:
    """What ``add_file`` did with one file: added, updated, rescoped (same bytes, another scope), unchanged or
    failed (with the reason)."""

    path: str
    name: str
    status: str
    passages: int = 0
    reason: str = ""


def normalise_domain(domain: str) -> str:
    """A mail domain as the scope stores it and an address ends: lower-case, without a leading @ or trailing
    dot; "" when it is not one (empty, spaces, an @ inside, no dot)."""
    text = domain.strip().lower().removeprefix("@").rstrip(".")
    valid = "." in text and not any(c.isspace() or c in "@/[]" for c in text) and ".." not in text
    return text if valid and not text.startswith(".") else ""


def _scope(db: Database | Transaction, document_id: int) -> tuple[str, ...]:
    rows = db.query("SELECT domain FROM document_domains WHERE document_id = ? ORDER BY domain", (document_id,))
    return tuple(str(r[0]) for r in rows)


def _set_scope(tx: Transaction, document_id: int, domains: tuple[str, ...]) -> None:
    tx.delete("document_domains", "document_id = ?", (document_id,))
    for domain in domains:
        tx.execute("INSERT INTO document_domains (document_id, domain) VALUES (?, ?)", (document_id, domain))


def entries(db: Database) -> list[dict[str, Any]]:
    """The knowledge base's files, by name: size, kind, pages and sections, passages, when added, and the
    domains whose users it reaches (empty: everyone)."""
    rows = db.query(
        "SELECT md.name, d.id, d.size, d.kind, d.created_at"
        " FROM message_documents md JOIN documents d ON d.id = md.document_id AND d.user_id = md.user_id"
        " WHERE md.user_id = ? ORDER BY md.name",
        (KNOWLEDGE_OWNER,),
    )
    counts = document_passage_counts(db, KNOWLEDGE_OWNER)
    listed = []
    for name, doc, size, kind, added in rows:
        passages, sections, pages = counts.get(int(doc), (0, 0, 0))
        listed.append({"name": name, "id": int(doc), "size": int(size), "kind": kind, "pages": pages,
                       "sections": sections, "passages": passages, "added": added,
                       "domains": list(_scope(db, int(doc)))})  # fmt: skip
    return listed


def _entry(db: Database | Transaction, name: str) -> tuple[int, str] | None:
    """(document id, sha256) of the file of that name in the knowledge base."""
    rows = db.query(
        "SELECT d.id, d.sha256 FROM message_documents md JOIN documents d ON d.id = md.document_id"
        " WHERE md.user_id = ? AND d.user_id = ? AND md.name = ?",
        (KNOWLEDGE_OWNER, KNOWLEDGE_OWNER, name),
    )
    return (int(rows[0][0]), str(rows[0][1])) if rows else None


def _drop(tx: Transaction, document_id: int) -> None:
    """A file out of the knowledge base: its passages, its name (a trigger then deletes the file's row)."""
    drop_document_passages(tx, KNOWLEDGE_OWNER, document_id)
    tx.delete("message_documents", "user_id = ? AND document_id = ?", (KNOWLEDGE_OWNER, document_id))
    tx.delete("documents", "user_id = ? AND id = ?", (KNOWLEDGE_OWNER, document_id))


def remove(db: Database, name: str) -> bool:
    """Take the file of that name out of the knowledge base; False when there is none."""
    with db.transaction() as tx:
        known = _entry(tx, name)
        if known is not None:
            _drop(tx, known[0])
    return known is not None


def add_file(store: MemoryStore, path: Path, config: DocumentsConfig, domains: Iterable[str] = ()) -> Added:
    """Read the file (in a child process, within the limits), cut it into passages, embed them and store them
    as the knowledge base's, replacing a changed file of the same name; scoped to the users of ``domains``
    (none: everyone). Never raises for a file that cannot be read or stored: the result says why."""
    name = display_name(path.name)
    scope = tuple(sorted({normalise_domain(d) for d in domains}))
    if "" in scope:
        return Added(str(path), name, "failed", reason="a domain to scope it to is not a mail domain")
    try:
        size = path.stat().st_size
        if size > config.max_file_kb * 1024:
            return Added(str(path), name, "failed", reason=f"larger than the {config.max_file_kb} kB limit")
        data = path.read_bytes()
    except OSError as exc:
        return Added(str(path), name, "failed", reason=f"cannot read it: {exc.strerror or exc}")
    sha = hashlib.sha256(data).hexdigest()
    known = _entry(store.db, name)
    if known is not None and known[1] == sha:
        if _scope(store.db, known[0]) == scope:
            return Added(str(path), name, "unchanged")
        with store.db.transaction() as tx:
            _set_scope(tx, known[0], scope)
        return Added(str(path), name, "rescoped")
    same = store.db.query_one(
        "SELECT md.name FROM documents d JOIN message_documents md ON md.document_id = d.id"
        " WHERE d.user_id = ? AND d.sha256 = ?",
        (KNOWLEDGE_OWNER, sha),
    )
    if same is not None:
        return Added(str(path), name, "failed", reason=f"the same bytes are already in it as {same[0]}")
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    read = read_in_child([Attachment(path.name, content_type, len(data), data)], config)
    document = read[0] if isinstance(read, list) else None
    if document is None or document.error:
        return Added(str(path), name, "failed", reason=(document.error if document else None) or str(read))
    pieces = document_pieces(document)
    if not pieces:
        return Added(str(path), name, "failed", reason="no text found in it")
    try:
        added = _store(store, name, sha, len(data), content_type, document.kind, pieces, known, scope)
    except Exception as exc:  # the embedder or the database failed: reported, and the next file is tried
        return Added(str(path), name, "failed", reason=f"not stored: {type(exc).__name__}: {exc}")
    return Added(str(path), name, "updated" if known is not None else "added", added)


def _store(
    store: MemoryStore, name: str, sha: str, size: int, content_type: str, kind: str,
    pieces: list[tuple[str, str]], known: tuple[int, str] | None, scope: tuple[str, ...],
) -> int:  # fmt: skip
    """Embed the file's passages, then in one transaction drop its old version (``known``) and store it with
    its ``scope``."""
    embedder = store.embedder
    vectors = embedder.embed([embedded_text(name, content) for _ref, content in pieces]) if embedder else None
    now = iso(utcnow())
    with store.db.transaction() as tx:
        if known is not None:
            _drop(tx, known[0])
        document_id = tx.execute(
            "INSERT INTO documents (user_id, sha256, kind, size, error, created_at) VALUES (?, ?, ?, ?, NULL, ?)",
            (KNOWLEDGE_OWNER, sha, kind, size, now),
        )
        tx.execute(
            "INSERT INTO message_documents (message_row, position, document_id, user_id, session_id, name,"
            " content_type) VALUES (?, 1, ?, ?, NULL, ?, ?)",
            (-document_id, document_id, KNOWLEDGE_OWNER, name, content_type),
        )
        _set_scope(tx, document_id, scope)
        entry = StoredMessage(-document_id, f"kb:{sha[:32]}", None, "in", now, name, "", ())
        insert_passages(tx, KNOWLEDGE_OWNER, entry, pieces, vectors, embedder.model_id if embedder else None,
                        document_id=document_id, document=name)  # fmt: skip
    return len(pieces)


def files_under(paths: list[Path]) -> list[Path]:
    """The files named, and those in the directories named (recursively, hidden ones left out), in order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))  # fmt: skip
        else:
            found.append(path)
    return found
