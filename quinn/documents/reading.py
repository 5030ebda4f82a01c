"""Reading one mail's files: the per-mail size budget, and a child process that can be stopped (a hard deadline
and a memory cap: quinn/isolation.py).

The readers check their deadline between pages and rows, but a hostile file can keep a library busy inside one
call (a PDF content stream crafted to make text extraction crawl) or make it allocate without bound. A thread
cannot be stopped, so it would go on burning a core after the mail was answered. The files are read in a child
process instead (``isolation.run_in_child``: capped at ``MEMORY_CAP_BYTES`` of address space where setrlimit is
allowed, killed when it outlives the deadline by ``STUCK_GRACE_S``).
"""

from __future__ import annotations

from collections.abc import Sequence

from quinn.config import DocumentsConfig
from quinn.documents.extract import Extracted, display_name, extract
from quinn.documents.sections import Deadline, Limits
from quinn.isolation import STUCK_GRACE_S, ChildStopped, run_in_child
from quinn.mailbox import Attachment

__all__ = ["STUCK_GRACE_S", "limits_of", "read_attachments", "read_in_child", "unread"]


def read_in_child(attachments: Sequence[Attachment], config: DocumentsConfig) -> list[Extracted] | str:
    """The mail's files read by ``read_attachments`` in a child process; a string saying why when the
    child was killed at the deadline or died. Blocks (call it from a worker thread)."""
    try:
        return run_in_child(read_attachments, list(attachments), config, timeout_s=config.timeout_s, start="spawn")
    except ChildStopped as stopped:
        if stopped.timed_out:
            return f"reading the attached files took longer than the {config.timeout_s:g} s limit"
        # it died without an answer: the memory cap, or a crash in a library's C code
        return "reading the attached files failed (it needed too much memory, or a reader crashed)"


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
