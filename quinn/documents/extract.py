"""Text out of an attached file: which format it really is, the sections of its text, or why it cannot be read.

Pure and bounded: bytes in, an ``Extracted`` out, never an exception. The format is told by the file's own bytes
first (a PDF starts ``%PDF-``, DOCX and ODT are zips with known members), then by its name and declared type:
both come from the sender and may lie. Limits (``Limits``): the file's size, the pages read, the text kept,
the zip members and their unpacked size (a zip bomb is refused before it is unpacked), and a deadline checked
between pages, rows and parts. The file name is for display only (``display_name``): it never names a path.
"""

from __future__ import annotations

import hashlib
import re
import struct
import unicodedata
import zipfile
from dataclasses import dataclass
from io import BytesIO

from quinn.documents.formats import READERS
from quinn.documents.sections import Deadline, Limits, Section, Unreadable

NAME_CHARS = 80  # a longer file name is cut: it is shown to the model and cited
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f\[\]<>{}`|\\/]+")


@dataclass(frozen=True)
class Extracted:
    """One attached file as read: its text by section, or ``error`` (why it could not be read)."""

    name: str  # display_name of the sender's file name: safe to show and cite
    content_type: str  # as declared by the sender
    kind: str  # what it really is: pdf, docx, odt, xlsx, pptx, text, markdown, html, csv, ics, eml, image, unknown
    size: int
    sha256: str
    sections: tuple[Section, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()  # what was left out: pages past the limit, text cut, nested files not read

    @property
    def text(self) -> str:
        """All the text, sections in order."""
        return "\n\n".join(s.text for s in self.sections)


def display_name(name: str, index: int = 1) -> str:
    """The sender's file name made safe to show and cite: the last path component only ("../../etc/passwd" is
    "passwd"), no control characters, brackets or slashes, Unicode normalised (NFKC), at most ``NAME_CHARS``
    characters with the extension kept. An empty result is ``attachment-INDEX``."""
    text = unicodedata.normalize("NFKC", name or "")
    text = re.split(r"[/\\]", text)[-1]
    text = " ".join(_UNSAFE_NAME.sub(" ", text).split()).strip(". ")
    if len(text) > NAME_CHARS:
        _stem, dot, ext = text.rpartition(".")
        ext = ext if dot and len(ext) <= 8 else ""
        text = text[: NAME_CHARS - len(ext) - 2].rstrip() + "~" + (f".{ext}" if ext else "")
    return text or f"attachment-{index}"


def kind_of(name: str, content_type: str, data: bytes) -> str:
    """What the file is: its magic bytes first, then its extension, then its declared type."""
    head = data[:8]
    if head.startswith(b"%PDF-") or b"%PDF-" in data[:1024]:  # a PDF may start with a little junk (PDF 2.0 §7.5.2)
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(data)
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):  # OLE2: .doc/.xls/.ppt, or an encrypted .docx/.xlsx
        return "ole"
    if head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF")) or head[4:8] == b"ftyp":
        return "image"
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    by_ext = {"txt": "text", "text": "text", "log": "text", "md": "markdown", "markdown": "markdown",
              "html": "html", "htm": "html", "csv": "csv", "ics": "ics", "eml": "eml"}  # fmt: skip
    if ext in by_ext:
        return by_ext[ext]
    mime = content_type.split(";")[0].strip().lower()
    by_type = {"text/plain": "text", "text/markdown": "markdown", "text/html": "html", "text/csv": "csv",
               "text/calendar": "ics", "message/rfc822": "eml"}  # fmt: skip
    if mime in by_type:
        return by_type[mime]
    if mime.startswith("image/"):
        return "image"
    return "unknown"


def _zip_kind(data: bytes) -> str:
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "word/document.xml" in names:
                return "docx"
            if "xl/workbook.xml" in names:
                return "xlsx"
            if "ppt/presentation.xml" in names:
                return "pptx"
            if "content.xml" in names and "mimetype" in names:
                return "odt" if archive.read("mimetype")[:60].endswith(b"opendocument.text") else "zip"
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError):
        return "unknown"
    return "zip"


def extract(
    name: str, content_type: str, data: bytes, limits: Limits | None = None, index: int = 1,
    deadline: Deadline | None = None,
) -> Extracted:  # fmt: skip
    """Read one attached file (the ``index``-th of its mail), by ``deadline`` (one shared by a mail's files;
    else ``limits.timeout_s`` from now). Never raises: what cannot be read comes back with ``error`` saying why."""
    limits = limits or Limits()
    shown = display_name(name, index)
    kind = kind_of(shown, content_type, data)
    base = Extracted(shown, content_type, kind, len(data), hashlib.sha256(data).hexdigest())

    def failed(reason: str) -> Extracted:
        return Extracted(base.name, content_type, kind, base.size, base.sha256, error=reason)

    if not data:
        return failed("the file is empty (or its encoding in the mail is broken)")
    if len(data) > limits.max_file_bytes:
        return failed(f"it is {len(data) // 1024} kB, more than the limit of {limits.max_file_bytes // 1024} kB")
    if kind == "image":
        note = f"a picture{picture_facts(data)}: Quinn does not see pictures, only knows it was attached"
        return Extracted(base.name, content_type, kind, base.size, base.sha256, notes=(note,))
    reader = READERS.get(kind)
    if kind == "ole":
        return failed(
            "it is a password-protected or old-format (.doc, .xls, .ppt) Office file, which Quinn cannot read"
        )
    if reader is None:
        what = "a zip archive" if kind == "zip" else f'"{content_type}"'
        return failed(f"{what} is not a kind of file Quinn can read")
    deadline = deadline or Deadline(limits.timeout_s)
    try:
        sections, notes = reader(data, limits, deadline)
    except Unreadable as exc:
        return failed(str(exc))
    except RecursionError:
        return failed("the file is nested too deeply to read")
    except MemoryError:
        return failed("the file needs too much memory to read")
    except Exception as exc:  # any library failure on hostile input is the file's, never the mail's
        return failed(f"the file is damaged or not really a {kind.upper()} file ({type(exc).__name__}: {exc})"[:300])
    sections, cut = _within(sections, limits.max_text_chars)
    if cut:
        notes.append(f"text cut at {limits.max_text_chars} characters")
    if not any(s.text.strip() for s in sections):
        reason = "no text found in it (a scanned PDF is pictures of pages, which Quinn cannot read)"
        return Extracted(base.name, content_type, kind, base.size, base.sha256, error=reason, notes=tuple(notes))
    return Extracted(base.name, content_type, kind, base.size, base.sha256, tuple(sections), None, tuple(notes))


def picture_facts(data: bytes) -> str:
    """`` (PNG, 640x480)``: the picture's format and size in pixels from its header, as far as it says."""
    fmt, size = "", None
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        fmt, size = "PNG", struct.unpack(">II", data[16:24])
    elif data.startswith(b"GIF8") and len(data) >= 10:
        fmt, size = "GIF", struct.unpack("<HH", data[6:10])
    elif data.startswith(b"\xff\xd8"):
        fmt, size = "JPEG", _jpeg_size(data)
    elif data[8:12] == b"WEBP":
        fmt = "WebP"
    elif data[4:8] == b"ftyp":
        fmt = "HEIC" if data[8:12] in (b"heic", b"heix", b"mif1") else ""
    facts = [f for f in (fmt, f"{size[0]}x{size[1]} pixels" if size else "") if f]
    return f" ({', '.join(facts)})" if facts else ""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame segment (ITU T.81 §B.2.2), or None."""
    at = 2
    while at + 9 <= len(data) and data[at] == 0xFF:
        marker, length = data[at + 1], int.from_bytes(data[at + 2 : at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def _within(sections: list[Section], max_chars: int) -> tuple[list[Section], bool]:
    kept: list[Section] = []
    used = 0
    for section in sections:
        text = section.text.strip()
        if not text:
            continue
        if used + len(text) > max_chars:
            if max_chars - used > 0:
                kept.append(Section(section.ref, text[: max_chars - used]))
            return kept, True
        kept.append(Section(section.ref, text))
        used += len(text)
    return kept, False
