"""Where `quinn import` reads mail from: an mbox file, a Maildir, or a folder of the configured IMAP account.

Each mail of a source gets a ledger key (``MailKey``) that names it for good, so an import can be stopped and run
again: an IMAP folder keys a mail by (UIDVALIDITY, UID) as the daemon does; a file's mail has no UID, so its key
is a hash of its bytes (the same mail in the same file is the same key, whatever its position). The folder part of
the key is ``import:<kind>:<where>``, never a folder the daemon watches. A source is only read: nothing in it is
changed, moved or flagged (IMAP: ``BODY.PEEK``).

What is not a source at all (a PDF, a directory of something else) is a ``ConfigError`` naming the path and
what Quinn can read; a mail inside a source that is not mail is the importer's to quarantine.
"""

from __future__ import annotations

import hashlib
import mailbox
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol, Self

from quinn.config import ImapConfig
from quinn.errors import ConfigError
from quinn.mailbox.imap import ImapMailbox
from quinn.mailbox.ledger import MailKey

IMPORT_PREFIX = "import:"
IMAP_SCHEME = "imap:"
SOURCE_HINT = (
    "pass an mbox file (mails each after a line 'From SENDER DATE'), a Maildir directory (with cur/, new/ and "
    "tmp/), or imap:FOLDER for a folder of the [imap] account; a single .eml file goes into a Maildir: "
    "mkdir -p box/cur box/new box/tmp && cp FILE box/new/"
)
_SNIFF_BYTES = 4096
_HEADER_END = (b"\r\n\r\n", b"\n\n")
CHUNK_BYTES = 1 << 20  # a file's mail is listed a chunk at a time
HEADER_BYTES = 1 << 20  # at most this much of a mail is kept as its header block while the source is imported
IMAP_CHUNK = 200  # UIDs per header FETCH


class ByteStream(Protocol):
    """An open mail file (``mailbox``'s proxy files are not ``BinaryIO``)."""

    def read(self, size: int | None = ..., /) -> bytes: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


@dataclass(frozen=True)
class SourceMail:
    """One mail of a source: its ledger key, where it is (for messages), its size and header block, and how to
    read its bytes (read when it is imported, not before); ``stream``, for a file's mail, opens them to be
    copied without holding them whole. ``error``: why the source could not even be read there (a file that
    vanished, a dangling link, no permission): such a mail has no key of its own and is reported, not imported."""

    key: MailKey
    where: str
    size: int
    header: bytes
    internal_date: datetime | None
    read: Callable[[], bytes]
    stream: Callable[[], ByteStream] | None = None
    error: str | None = None


class MailSource:
    """A source's mails, listed in source order; ``close`` releases a connection."""

    kind = "?"
    label = "?"

    def mails(self) -> Iterator[SourceMail]:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


def content_key(folder: str, raw: bytes) -> MailKey:
    """A file mail's key: 56 bits of the SHA-256 of its bytes, line ends normalised (an integer SQLite keeps)."""
    digest = hashlib.sha256(raw.replace(b"\r\n", b"\n")).digest()
    return MailKey(folder, 0, int.from_bytes(digest[:7], "big"))


def listed(folder: str, file: ByteStream) -> tuple[MailKey, int, bytes]:
    """A file mail's key (``content_key``), size and header block (``header_of``), read in chunks: a mail of
    gigabytes is never held whole, and its header block is cut at ``HEADER_BYTES`` when it has no end."""
    digest = hashlib.sha256()
    size, head, carry = 0, b"", b""
    while chunk := file.read(CHUNK_BYTES):
        size += len(chunk)
        if len(head) < HEADER_BYTES and not any(end in head for end in _HEADER_END):
            head += chunk[: HEADER_BYTES - len(head) + 3]  # a header end may straddle two chunks
        data = carry + chunk
        carry = b"\r" if data.endswith(b"\r") else b""  # a line end split between two chunks
        digest.update((data[:-1] if carry else data).replace(b"\r\n", b"\n"))
    digest.update(carry)
    return MailKey(folder, 0, int.from_bytes(digest.digest()[:7], "big")), size, header_of(head)[:HEADER_BYTES]


def unreadable(folder: str, where: str, exc: OSError) -> SourceMail:
    """A place in a file source that cannot be read (``SourceMail.error``)."""
    why = f"{exc.__class__.__name__}: {exc.strerror or exc}"

    def read() -> bytes:
        raise exc

    return SourceMail(MailKey(folder, 0, 0), where, 0, b"", None, read, None, why)


def header_of(raw: bytes) -> bytes:
    """The header block of a raw mail, with its blank line (the whole mail when it has no body)."""
    ends = [raw.find(end) for end in _HEADER_END]
    found = [(i, len(end)) for i, end in zip(ends, _HEADER_END, strict=True) if i >= 0]
    if not found:
        return raw
    i, n = min(found)
    return raw[: i + n]


#: An mbox separator (RFC 4155: "From " + sender + a timestamp, the classic asctime "Tue Nov 30 09:00:00 2026"):
#: a line of a mail's text that starts with "From " but has no time and year ("From here on, the plan is:") is
#: text that the writer of the file forgot to escape as ">From ", not the start of a mail.
_SEPARATOR = re.compile(rb"From \S+ +\S.*\b\d{1,2}:\d{2}(?::\d{2})?\b.*\b\d{4}\b")


class _Mbox(mailbox.mbox):
    """``mailbox.mbox`` that starts a mail only at a separator line (``_SEPARATOR``) at the top of the file or
    after a blank line; the standard one starts one at any line beginning "From ", cutting a mail whose text
    has such a line in two (its end then quarantined as a mail of its own)."""

    def _generate_toc(self) -> None:
        # Where a mail stops is as the standard class has it (the blank line before a separator is not the
        # mail's), so a file's keys are the same as before; only where a mail starts is stricter.
        starts: list[int] = []
        stops: list[int] = []
        previous = b"\n"  # the top of the file counts as after a blank line
        file: BinaryIO = self._file  # type: ignore[attr-defined]  # the standard class's, untyped in typeshed
        file.seek(0)
        while True:
            at = file.tell()
            line = file.readline()
            if not line:
                if len(stops) < len(starts):
                    stops.append(at - len(mailbox.linesep) if previous == mailbox.linesep and at else at)
                break
            if previous in (b"\n", b"\r\n") and line.startswith(b"From ") and _SEPARATOR.match(line):
                if len(stops) < len(starts):
                    stops.append(at - len(mailbox.linesep) if previous == mailbox.linesep else at)
                starts.append(at)
            previous = line
        self._toc = dict(enumerate(zip(starts, stops, strict=True)))
        self._next_key = len(self._toc)
        self._file_length = file.tell()


class MboxSource(MailSource):
    """An mbox file (RFC 4155): each mail after a ``From `` separator line."""

    kind = "mbox"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)
        self.folder = f"{IMPORT_PREFIX}mbox:{path}"
        self._box = _Mbox(path, create=False)

    def mails(self) -> Iterator[SourceMail]:
        for position, key in enumerate(self._box.keys(), start=1):
            with self._box.get_file(key) as file:
                mail_key, size, header = listed(self.folder, file)
            yield SourceMail(mail_key, f"{self.path} mail #{position}", size, header, None,
                             partial(self._box.get_bytes, key), partial(self._box.get_file, key))  # fmt: skip

    def close(self) -> None:
        self._box.close()


class MaildirSource(MailSource):
    """A Maildir: its mails in ``new/`` and ``cur/``, read in file-name order (delivery order)."""

    kind = "maildir"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)
        self.folder = f"{IMPORT_PREFIX}maildir:{path}"
        self._box = mailbox.Maildir(path, factory=None, create=False)

    def mails(self) -> Iterator[SourceMail]:
        for key in sorted(self._box.keys()):
            where = f"{self.path} file {key}"
            try:
                with self._box.get_file(key) as file:
                    mail_key, size, header = listed(self.folder, file)
            except OSError as exc:  # vanished since the listing, a dangling link, no permission
                yield unreadable(self.folder, where, exc)
                continue
            yield SourceMail(mail_key, where, size, header, None, partial(self._box.get_bytes, key),
                             partial(self._box.get_file, key))  # fmt: skip


class ImapFolderSource(MailSource):
    """A folder of the configured IMAP account, read without changing it (``BODY.PEEK``, no flags, no moves)."""

    kind = "imap"

    def __init__(self, config: ImapConfig, folder: str) -> None:
        self.label = f"imap:{folder}"
        self.folder = f"{IMPORT_PREFIX}imap:{folder}"
        self._mailbox = ImapMailbox(config.model_copy(update={"folder": folder}))
        self._mailbox.connect(create_folders=False)  # changes nothing on the server
        if folder in self._mailbox.missing_folders:
            where = self._mailbox.where
            self._mailbox.close()
            raise ConfigError(f"there is no IMAP folder {folder!r} at {where}",
                              "name an existing folder: imap:INBOX, imap:Sent, imap:Archive/2023 ...")  # fmt: skip

    def mails(self) -> Iterator[SourceMail]:
        box = self._mailbox
        uids = box.uids()
        for start in range(0, len(uids), IMAP_CHUNK):
            chunk = uids[start : start + IMAP_CHUNK]
            for uid, (size, header, moment) in sorted(box.headers(chunk).items()):
                yield SourceMail(MailKey(self.folder, box.uidvalidity, uid), f"{self.label} uid {uid}", size, header,
                                 moment, partial(self._fetch, uid))  # fmt: skip

    def _fetch(self, uid: int) -> bytes:
        fetched = self._mailbox.fetch(uid)
        return b"" if fetched is None else fetched.raw  # gone since the listing: an empty mail, quarantined

    def close(self) -> None:
        self._mailbox.close()


def open_source(spec: str, imap: ImapConfig) -> MailSource:
    """The source ``spec`` names: ``imap:FOLDER``, a Maildir directory, or an mbox file. Raises ``ConfigError``
    naming the path when it is none of them."""
    if spec.startswith(IMAP_SCHEME):
        folder = spec[len(IMAP_SCHEME) :].strip()
        if not folder:
            raise ConfigError("imap: names no folder", "write imap:FOLDER, e.g. imap:Sent")
        return ImapFolderSource(imap, folder)
    path = Path(spec).expanduser().resolve()
    if not path.exists():
        raise ConfigError(f"{spec}: no such file or directory", SOURCE_HINT)
    if path.is_dir():
        missing = [name for name in ("cur", "new") if not (path / name).is_dir()]
        if missing:
            raise ConfigError(f"{path} is a directory but not a Maildir: it has no {' and no '.join(missing)}/ "
                              "folder", SOURCE_HINT)  # fmt: skip
        return MaildirSource(path)
    with path.open("rb") as file:
        head = file.read(_SNIFF_BYTES)
    problem = _not_mbox(head)
    if problem:
        raise ConfigError(f"{path} is not an mbox file: {problem}; nothing was imported", SOURCE_HINT)
    return MboxSource(path)


def _not_mbox(head: bytes) -> str | None:
    """Why the first bytes of a file are not those of an mbox, or None when they are."""
    if not head.strip():
        return "it is empty"
    if b"\x00" in head:
        return "it holds binary data (NUL bytes), not text mail"
    first = head.lstrip(b"\r\n").split(b"\n", 1)[0]
    if not first.startswith(b"From "):
        shown = first[:40].decode("utf-8", "replace")
        return f"its first line is {shown!r}, not a 'From ' line"
    return None
