"""Reading one mail's files: the per-mail size budget, and the child process they are read in.

The readers check their deadline between pages and rows, but a hostile file can keep a library busy inside one call
(a PDF content stream crafted to make text extraction crawl) or make it allocate without bound. A thread cannot be
stopped, so it would go on burning a core after the mail was answered. The files are read in a fresh child process
instead (``quinn.confined``: no copy of the daemon's threads, connections or secrets), capped at
``MEMORY_CAP_BYTES`` of address space (under deploy/quinn.service too: see ``quinn.confined``), and killed when it
outlives the deadline by ``STUCK_GRACE_S``. Its result comes back over a pipe. Costs about half a second of start-up
per mail with files.
"""

from __future__ import annotations

from collections.abc import Sequence

from quinn.config import DocumentsConfig
from quinn.confined import ChildFailed, ChildLimits, run_confined
from quinn.documents.extract import Extracted, display_name, extract
from quinn.documents.sections import Deadline, Limits
from quinn.mailbox import Attachment

MEMORY_CAP_BYTES = 1024 * 1024 * 1024  # address space of the reading process: far above any file within limits
STUCK_GRACE_S = 2.0  # past the deadline, the reader is given up on and killed


def read_in_child(attachments: Sequence[Attachment], config: DocumentsConfig) -> list[Extracted] | str:
    """The mail's files read by ``read_attachments`` in a child process; a string saying why when the
    child was killed at the deadline or died. Blocks (call it from a worker thread)."""
    limits = ChildLimits(timeout_s=config.timeout_s + STUCK_GRACE_S, memory_bytes=MEMORY_CAP_BYTES)
    try:
        return run_confined(read_attachments, (list(attachments), config), limits)
    except ChildFailed as exc:
        if exc.kind == "timeout":  # the limit the operator set, not the grace above it
            return f"reading the attached files took longer than the {config.timeout_s:g} s limit"
        return f"reading the attached files {exc.message}"


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
