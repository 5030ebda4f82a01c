"""One reader per file format: bytes in, sections with their page/heading/row reference and notes out.

A reader raises ``Unreadable`` with a reason the sender can act on ("it is encrypted"); any other exception
is caught by ``extract.extract``. Each checks the ``Deadline`` between its units of work.

Libraries: pypdf (PDF; pure Python, no external binaries, own limits on decompressed stream sizes), python-docx
(DOCX; on lxml), openpyxl (XLSX, read-only streaming), icalendar (.ics); HTML goes through the mail body's own
hardened html2text path, .eml through Quinn's own mail parser, CSV through the standard library, and ODT's and
PPTX's XML through lxml with entities and network off.
"""

from __future__ import annotations

import csv
import logging
import re
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from io import BytesIO, StringIO
from typing import Any

from quinn.documents.sections import Deadline, Limits, Reader, Section, Unreadable, check_zip
from quinn.errors import MailParseError

ROWS_PER_SECTION = 40  # a CSV section: a screenful of rows, each section repeating the header line
_MD_HEADING = re.compile(r"#{1,6}\s+(.+)")  # its closing "#"s and spaces are cut in code (``heading``)


def heading(line: str) -> str | None:
    r"""A Markdown heading's title ("## Fees ##" -> "Fees"), or None. In code, not one pattern: "(.+?)\s*#*\s*$"
    backtracked cubically on a line of spaces in a stranger's file (1,000 characters: 2.5 s)."""
    match = _MD_HEADING.match(line)
    if match is None:
        return None
    title = match.group(1)
    return title[: max(1, len(title.rstrip().rstrip("#").rstrip()))]


def decode_text(data: bytes) -> str:
    """Bytes of a text file as text: UTF-8 (with or without BOM), UTF-16 with a BOM, else Windows-1252."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def read_pdf(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Text page by page, cited ``p.N``. An encrypted PDF is read only when it opens without a password."""
    import pypdf
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings on damaged files are ours to summarise
    try:
        reader = pypdf.PdfReader(BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("it is encrypted (protected by a password)")
        pages = reader.pages
        count = len(pages)
    except FileNotDecryptedError as exc:
        raise Unreadable("it is encrypted (protected by a password)") from exc
    except PdfReadError as exc:
        raise Unreadable(f"the PDF is damaged ({exc})") from exc
    notes = [f"only the first {limits.max_pages} of {count} pages read"] if count > limits.max_pages else []
    sections = []
    for number in range(min(count, limits.max_pages)):
        deadline.check()
        sections.append(Section(f"p.{number + 1}", pages[number].extract_text() or ""))
    return sections, notes


def under_headings(blocks: Iterable[tuple[str | None, str]], deadline: Deadline) -> list[Section]:
    """Sections of (heading, text) blocks in order: a block with a heading starts a section cited by it (the
    heading's text is also its first line); the others join the current one."""
    sections: list[Section] = []
    heading, lines = "", list[str]()
    for title, text in blocks:
        deadline.check()
        if title and title.strip():
            sections.append(Section(heading, "\n".join(lines)))
            heading, lines = title.strip()[:80], [text]
        else:
            lines.append(text)
    sections.append(Section(heading, "\n".join(lines)))
    return sections


def safe_xml(data: bytes) -> Any:
    """An lxml tree of ``data`` with entities, DTDs and network access off (no billion laughs, no XXE)."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False)
    return etree.fromstring(data, parser)


def read_docx(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Paragraphs and tables in order, each section under the heading it follows."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    check_zip(data, limits)

    def blocks() -> Iterator[tuple[str | None, str]]:
        for block in docx.Document(BytesIO(data)).iter_inner_content():
            if isinstance(block, Paragraph):
                style = (block.style.name if block.style is not None else "") or ""
                yield (block.text if style.lower().startswith(("heading", "title")) else None), block.text
            elif isinstance(block, Table):
                yield from ((None, " | ".join(cell.text.strip() for cell in row.cells)) for row in block.rows)

    return under_headings(blocks(), deadline), []


def read_odt(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """OpenDocument text: the paragraphs and headings of content.xml, sections under headings."""
    check_zip(data, limits)
    with zipfile.ZipFile(BytesIO(data)) as archive:
        root = safe_xml(archive.read("content.xml"))
    text = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
    blocks = ((("".join(e.itertext()) if e.tag == f"{text}h" else None), "".join(e.itertext()))
              for e in root.iter(f"{text}h", f"{text}p"))  # fmt: skip
    return under_headings(blocks, deadline), []


def read_text(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """A plain text file: one section."""
    return [Section("", decode_text(data))], []


def read_markdown(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Markdown: sections under their ``#`` headings."""
    lines = decode_text(data).splitlines()
    return under_headings(((heading(line), line) for line in lines), deadline), []


def read_html(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """HTML through the mail body's converter (its cost bounded the same way)."""
    from quinn.mailbox import html_to_text

    cut: list[str] = []
    return [Section("", html_to_text(decode_text(data), cut))], cut


def read_csv(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Rows as ``a | b | c`` lines in sections of ``table_sections``, cited ``rows 2-41``."""
    text = decode_text(data)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    return table_sections(csv.reader(StringIO(text), dialect), "", deadline), []


def table_sections(rows: Iterator[Sequence[object]], where: str, deadline: Deadline) -> list[Section]:
    """A table's rows as ``a | b | c`` lines, ``ROWS_PER_SECTION`` to a section cited ``rows 2-41`` (after
    ``where``, e.g. ``sheet Budget``), each section starting with the header row so a passage keeps its column
    names. Empty cells are blank, trailing empty rows dropped."""

    def line(row: Sequence[object]) -> str:
        return " | ".join("" if cell is None else str(cell) for cell in row).rstrip(" |")

    header = line(next(rows, []))
    sections: list[Section] = []
    chunk: list[str] = []
    first = 2
    prefix = f"{where} " if where else ""
    for number, row in enumerate(rows, start=2):
        if number % ROWS_PER_SECTION == 0:
            deadline.check()
        chunk.append(line(row))
        if len(chunk) == ROWS_PER_SECTION:
            sections.append(Section(f"{prefix}rows {first}-{number}", "\n".join([header, *chunk])))
            chunk, first = [], number + 1
    while chunk and not chunk[-1]:
        chunk.pop()
    if chunk or not sections:
        ref = f"{prefix}rows {first}-{first + len(chunk) - 1}" if chunk else where
        sections.append(Section(ref, "\n".join([header, *chunk])))
    return sections


def read_xlsx(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Each sheet's rows (the values last computed, not formulas) in sections cited ``sheet NAME rows 2-41``."""
    import openpyxl

    check_zip(data, limits)
    with warnings.catch_warnings():  # openpyxl warns about styles and extensions it skips: not the reader's business
        warnings.simplefilter("ignore")
        book = openpyxl.load_workbook(BytesIO(data), read_only=True, data_only=True)
        try:
            sections = []
            for sheet in book.worksheets:
                deadline.check()
                sections += table_sections(sheet.iter_rows(values_only=True), f"sheet {sheet.title[:40]}", deadline)
        finally:
            book.close()
    return sections, []


def read_pptx(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """Each slide's text, paragraph by paragraph, cited ``slide N`` (slides in their files' numbering)."""
    check_zip(data, limits)
    drawing = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
    sections = []
    with zipfile.ZipFile(BytesIO(data)) as archive:
        slides = sorted((int(m.group(1)), name) for name in archive.namelist()
                        if (m := re.fullmatch(r"ppt/slides/slide(\d+)\.xml", name)))  # fmt: skip
        for number, name in slides:
            deadline.check()
            root = safe_xml(archive.read(name))
            paragraphs = ["".join(t.text or "" for t in p.iter(f"{drawing}t")) for p in root.iter(f"{drawing}p")]
            sections.append(Section(f"slide {number}", "\n".join(p for p in paragraphs if p.strip())))
    return sections, []


def read_ics(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """A calendar: one section per event (what, when, where, who, description), cited ``event N``."""
    import icalendar

    try:
        calendar = icalendar.Calendar.from_ical(decode_text(data))
    except ValueError as exc:
        raise Unreadable(f"the calendar file is damaged ({exc})") from exc
    sections = []
    for number, event in enumerate(calendar.walk("VEVENT"), start=1):
        deadline.check()
        lines = []
        for key, label in (("SUMMARY", "Event"), ("DTSTART", "Starts"), ("DTEND", "Ends"), ("LOCATION", "Where"),
                           ("ORGANIZER", "Organizer"), ("DESCRIPTION", "Description")):  # fmt: skip
            value = event.get(key)
            if value is None:
                continue
            shown = value.dt.isoformat() if hasattr(value, "dt") else str(value)
            lines.append(f"{label}: {shown.removeprefix('mailto:') if key == 'ORGANIZER' else shown}")
        attendees = event.get("ATTENDEE")
        if attendees:
            listed = attendees if isinstance(attendees, list) else [attendees]
            lines.append("Attendees: " + ", ".join(str(a).removeprefix("mailto:") for a in listed))
        sections.append(Section(f"event {number}", "\n".join(lines)))
    return sections, []


def read_eml(data: bytes, limits: Limits, deadline: Deadline) -> tuple[list[Section], list[str]]:
    """A forwarded mail: its headers and text through Quinn's own parser; files inside it are named, not read."""
    from quinn.mailbox import parse_email

    try:
        inner = parse_email(data, max_bytes=limits.max_file_bytes)
    except MailParseError as exc:
        raise Unreadable(f"the attached mail cannot be read ({exc.message})") from exc
    head = [f"From: {inner.from_ or ''}", f"To: {', '.join(str(a) for a in inner.to)}",
            f"Date: {inner.date.isoformat() if inner.date else ''}", f"Subject: {inner.subject}"]  # fmt: skip
    notes = [f"files inside the attached mail not read: {', '.join(a.filename for a in inner.attachments)}"] if (
        inner.attachments) else []  # fmt: skip
    return [Section("", "\n".join(head) + "\n\n" + inner.full_text)], notes


READERS: dict[str, Reader] = {
    "pdf": read_pdf, "docx": read_docx, "odt": read_odt, "xlsx": read_xlsx, "pptx": read_pptx, "text": read_text,
    "markdown": read_markdown, "html": read_html, "csv": read_csv, "ics": read_ics, "eml": read_eml,
}  # fmt: skip
