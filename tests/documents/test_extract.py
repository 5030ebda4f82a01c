"""Reading attached files (quinn/documents/extract.py, issue 18): text by page or section per format, and bad
input (damaged, encrypted, too big, zip bombs, lying names and types) as a reason, never an exception.
Files are made in code (tests/lab/documents.py) and read by the real libraries."""

from __future__ import annotations

import io
import time
import zipfile

import pytest

from quinn.documents.extract import display_name, extract, kind_of
from quinn.documents.formats import heading
from quinn.documents.sections import Deadline, Limits
from quinn.mailbox.parse import parse_email
from tests.lab.documents import encrypted_pdf, make_docx, make_odt, make_pdf, make_pptx, make_xlsx
from tests.lab.inprocess import build_mail

ICS = (b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:1@test\r\n"
       b"SUMMARY:Board meeting\r\nDTSTART:20261201T100000Z\r\nDTEND:20261201T110000Z\r\nLOCATION:Room 4\r\n"
       b"ORGANIZER:mailto:carol@example.org\r\nATTENDEE:mailto:alice@example.org\r\n"
       b"END:VEVENT\r\nEND:VCALENDAR\r\n")  # fmt: skip


def test_a_pdf_is_read_page_by_page_with_its_page_numbers() -> None:
    data = make_pdf(["Lease agreement", "The deposit is 1,850 euros.\nPaid by transfer."])
    read = extract("lease.pdf", "application/pdf", data)
    assert read.error is None and read.kind == "pdf" and read.size == len(data)
    assert [(s.ref, s.text) for s in read.sections] == [
        ("p.1", "Lease agreement"), ("p.2", "The deposit is 1,850 euros.\nPaid by transfer.")]  # fmt: skip


def test_pages_past_the_limit_are_left_out_and_said() -> None:
    read = extract("long.pdf", "application/pdf", make_pdf([f"page {n}" for n in range(1, 6)]), Limits(max_pages=2))
    assert [s.ref for s in read.sections] == ["p.1", "p.2"]
    assert read.notes == ("only the first 2 of 5 pages read",)


def test_an_encrypted_pdf_is_a_reason_not_an_error() -> None:
    read = extract("secret.pdf", "application/pdf", encrypted_pdf(["hidden"]))
    assert read.sections == () and read.error == "it is encrypted (protected by a password)"


@pytest.mark.parametrize("data", [b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", b"%PDF-1.7\n\x00\xff" * 50])
def test_a_damaged_pdf_is_a_reason(data: bytes) -> None:
    read = extract("broken.pdf", "application/pdf", data)
    assert read.sections == () and read.error is not None and "damaged" in read.error


def test_a_pdf_sent_as_text_is_read_as_a_pdf() -> None:
    assert extract("scan", "text/plain", make_pdf(["Invoice 42"])).sections[0].text == "Invoice 42"


def test_docx_sections_follow_headings_and_keep_tables() -> None:
    data = make_docx([("p", "Preface."), ("h1", "Terms"), ("p", "Rent is due on the 3rd."),
                      ("row", "Item | Price"), ("row", "Desk | 120")])  # fmt: skip
    read = extract("contract.docx", "application/octet-stream", data)
    assert read.kind == "docx" and read.error is None
    assert [(s.ref, s.text) for s in read.sections] == [
        ("", "Preface."), ("Terms", "Terms\nRent is due on the 3rd.\nItem | Price\nDesk | 120")]  # fmt: skip


def test_xlsx_sheets_and_pptx_slides_keep_their_names_and_numbers() -> None:
    rows = [["Item", "Cost", "Total"], *([f"line {i}", i, f"=B{i + 2}*2"] for i in range(45))]
    book = extract("budget.xlsx", "application/octet-stream", make_xlsx({"Budget": rows, "Notes": [["ok"]]}))
    assert book.kind == "xlsx" and book.error is None
    assert [s.ref for s in book.sections] == ["sheet Budget rows 2-41", "sheet Budget rows 42-46", "sheet Notes"]
    # The values a spreadsheet last computed; openpyxl saved the formula uncomputed, so that cell is blank.
    assert book.sections[1].text.splitlines()[:2] == ["Item | Cost | Total", "line 40 | 40"]
    deck = extract("plan.pptx", "application/vnd.ms-powerpoint", make_pptx([["Roadmap"], ["Q1: hire", "Q2: ship"]]))
    assert deck.kind == "pptx" and [(s.ref, s.text) for s in deck.sections] == [
        ("slide 1", "Roadmap"), ("slide 2", "Q1: hire\nQ2: ship")]  # fmt: skip


def test_odt_sections_follow_headings_and_its_xml_expands_no_entities() -> None:
    read = extract("minutes.odt", "application/octet-stream", make_odt([("p", "Draft."), ("h", "Budget"),
                                                                          ("p", "Total 30k.")]))  # fmt: skip
    assert read.kind == "odt" and [(s.ref, s.text) for s in read.sections] == [
        ("", "Draft."), ("Budget", "Budget\nTotal 30k.")]  # fmt: skip
    laughs = '<!DOCTYPE d [<!ENTITY a "haha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    bomb = extract("laughs.odt", "application/vnd.oasis.opendocument.text", make_odt([("p", "x &b; y")], laughs))
    assert bomb.text == "x &b; y"  # the reference is left as written: nothing expanded


def test_a_zip_bomb_is_refused_before_it_is_unpacked() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<w/>")
        archive.writestr("word/huge.bin", b"\0" * (3 * 1024 * 1024))  # 3 MB of zeros: a few kB packed
    read = extract("bomb.docx", "application/vnd.openxmlformats", out.getvalue(), Limits(max_unzipped_bytes=2_000_000))
    assert read.error is not None and "zip bomb" in read.error and len(out.getvalue()) < 10_000


@pytest.mark.parametrize(("line", "title"), [
    ("# Fees ##", "Fees"), ("## C#", "C"), ("# #", "#"), ("# a # b", "a # b"), ("# a  # #", "a  #"),
    ("#    ", " "), ("####### x", None), ("#x", None), ("text", None),
])  # fmt: skip
def test_markdown_headings_read_as_the_one_pattern_did(line: str, title: str | None) -> None:
    assert heading(line) == title


def test_a_markdown_heading_of_spaces_is_not_a_redos() -> None:
    """A stranger's .md with "# a" + spaces: the heading pattern backtracked cubically (1,000 spaces 2.5 s)."""
    started = time.monotonic()
    read = extract("notes.md", "text/markdown", ("# a" + " " * 5_000 + "x\nbody\n").encode())
    assert time.monotonic() - started < 5
    assert read.error is None and read.sections[0].ref.startswith("a ") and read.sections[0].text.endswith("body")


def test_text_markdown_html_csv_ics_and_forwarded_mail() -> None:
    assert extract("a.txt", "text/plain", "Grüße\n".encode("cp1252")).text == "Grüße"
    markdown = extract("notes.md", "text/markdown", b"intro\n# Budget\nTotal 30k\n")
    assert [(s.ref, s.text) for s in markdown.sections] == [("", "intro"), ("Budget", "# Budget\nTotal 30k")]
    html = extract("page.html", "text/html", b"<p>Hello <b>there</b></p><script>steal()</script>")
    assert "Hello" in html.text and "steal" not in html.text
    rows = "\n".join(["name;amount", *(f"p{i};{i}" for i in range(50))]).encode()
    table = extract("sheet.csv", "text/csv", rows)
    assert [s.ref for s in table.sections] == ["rows 2-41", "rows 42-51"]
    assert table.sections[1].text.startswith("name | amount\np40 | 40")  # every section keeps the header
    invite = extract("invite.ics", "text/calendar", ICS)
    assert invite.sections[0].ref == "event 1"
    assert invite.sections[0].text.splitlines() == [
        "Event: Board meeting", "Starts: 2026-12-01T10:00:00+00:00", "Ends: 2026-12-01T11:00:00+00:00",
        "Where: Room 4", "Organizer: carol@example.org", "Attendees: alice@example.org"]  # fmt: skip
    _mid, raw = build_mail("bob@example.org", "alice@example.org", "Quote", "The price is 99 euros.")
    forwarded = extract("fwd.eml", "message/rfc822", raw)
    assert "Subject: Quote" in forwarded.text and "The price is 99 euros." in forwarded.text


@pytest.mark.parametrize(("name", "shown"), [
    ("../../etc/passwd", "passwd"), ("C:\\Users\\x\\evil.pdf", "evil.pdf"), ("a]\n[doc:other p.1", "a doc:other p.1"),
    ("\x00\x1b[31m.pdf", "31m.pdf"), ("", "attachment-3"), ("..", "attachment-3"),
    ("x" * 300 + ".pdf", "x" * 75 + "~.pdf"),
])  # fmt: skip
def test_a_file_name_is_only_ever_a_label(name: str, shown: str) -> None:
    assert display_name(name, 3) == shown


def test_unknown_oversize_empty_and_slow_files_are_reasons() -> None:
    assert extract("tool.exe", "application/x-msdownload", b"MZ\x90\x00").error == (
        '"application/x-msdownload" is not a kind of file Quinn can read')  # fmt: skip
    big = extract("big.txt", "text/plain", b"a" * 5000, Limits(max_file_bytes=4096))
    assert big.error == "it is 4 kB, more than the limit of 4 kB" and big.sections == ()
    assert extract("empty.pdf", "application/pdf", b"").error is not None
    ole = extract("budget.xlsx", "application/vnd.ms-excel", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100)
    assert ole.error is not None and ole.error.startswith("it is a password-protected or old-format")
    slow = extract("a.pdf", "application/pdf", make_pdf(["x"]), deadline=Deadline(-1.0))
    assert slow.error is not None and "longer than" in slow.error
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + (640).to_bytes(4, "big") + (480).to_bytes(4, "big") + b"\0" * 20
    photo = extract("photo.png", "image/png", png)
    assert (photo.kind, photo.error) == ("image", None)
    assert photo.notes == ("a picture (PNG, 640x480 pixels): Quinn does not see pictures, only knows it was attached",)
    jpeg = b"\xff\xd8\xff\xe0\x00\x04ab\xff\xc0\x00\x11\x08" + (300).to_bytes(2, "big") + (200).to_bytes(2, "big")
    assert "(JPEG, 200x300 pixels)" in extract("p.jpg", "image/jpeg", jpeg + b"\0" * 20).notes[0]
    assert kind_of("notes.txt", "application/pdf", b"plain words") == "text"  # the name, then the declared type


def test_a_forwarded_mail_attached_as_message_rfc822_is_read_as_a_mail() -> None:
    import email as email_lib
    import email.policy
    from email.message import EmailMessage

    _mid, inner = build_mail("bob@example.org", "alice@example.org", "Quote", "The price is 99 euros.")
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "alice@example.org", "quinn@example.org", "Fwd: Quote"
    msg.set_content("See the forwarded quote.")
    msg.add_attachment(email_lib.message_from_bytes(inner, policy=email.policy.default))
    [attachment] = parse_email(msg.as_bytes()).attachments
    assert (attachment.filename, attachment.content_type) == ("forwarded-1.eml", "message/rfc822")
    read = extract(attachment.filename, attachment.content_type, attachment.data)
    assert read.kind == "eml" and read.text.startswith("From: Alice Example <bob@example.org>\nTo: alice@example.org")
    assert "Subject: Quote\n\nThe price is 99 euros." in read.text


def test_the_parser_keeps_an_attachments_bytes() -> None:
    from email.message import EmailMessage

    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@example.org", "b@example.org", "File"
    msg.set_content("see attached")
    pdf = make_pdf(["hello"])
    msg.add_attachment(pdf, maintype="application", subtype="pdf", filename="x.pdf")
    [attachment] = parse_email(msg.as_bytes()).attachments
    assert attachment.data == pdf and attachment.size == len(pdf)


@pytest.mark.lab  # a child process killed at its deadline: seconds of CPU, not the unit layer's kind
def test_a_reader_stuck_inside_one_library_call_is_killed_at_the_deadline() -> None:
    """One page of 4 MB of text operators: pypdf spends seconds inside one extract_text call, where no deadline
    check can run. The child process reading it is killed at timeout_s + the grace; the files get the reason."""
    import resource

    from quinn.config import DocumentsConfig
    from quinn.documents.reading import STUCK_GRACE_S, read_in_child
    from quinn.mailbox.message import Attachment

    data = make_pdf(["\n".join(["word " * 20] * 60_000)])  # about 9 s of CPU in extract_text on page 1 (measured)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # 1.5 s: time to start the child and open the PDF, so the deadline passes inside the page, not before it.
    read = read_in_child([Attachment("slow.pdf", "application/pdf", len(data), data)], DocumentsConfig(timeout_s=1.5))
    assert read == "reading the attached files took longer than the 1.5 s limit"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Killed, not waited for: the child's CPU time (which a busy machine does not stretch, unlike the clock) is
    # at most the deadline and its grace, well short of the 9 s the whole page takes.
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 1.5 + STUCK_GRACE_S + 1


def test_files_are_read_in_a_child_process_and_come_back_whole() -> None:
    from quinn.config import DocumentsConfig
    from quinn.documents.reading import read_in_child
    from quinn.mailbox.message import Attachment

    pdf, text = make_pdf(["one", "two"]), b"plain words " * 10
    assert len(pdf) + len(text) <= 1024 < len(pdf) + 2 * len(text)  # the third file passes the mail's 1 kB
    files = [Attachment("a.pdf", "application/pdf", len(pdf), pdf), Attachment("b.txt", "text/plain", 120, text),
             Attachment("c.txt", "text/plain", 120, text)]  # fmt: skip
    read = read_in_child(files, DocumentsConfig(max_mail_kb=1))
    assert not isinstance(read, str)
    assert [(d.name, d.error) for d in read] == [("a.pdf", None), ("b.txt", None), ("c.txt", (
        "the mail's files together pass the limit of 1 kB; this one was not read"))]  # fmt: skip
    assert [s.text for s in read[0].sections] == ["one", "two"]


def test_a_file_goes_with_the_last_stored_mail_that_carried_it(tmp_path) -> None:
    """Retention deletes old messages (scheduler/retention.py); migration 0013's triggers take their links, and
    a file with its bytes once no message carries it."""
    from quinn.db import Database

    db = Database.open(str(tmp_path / "q.db"))
    try:
        rows = [db.execute("INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr,"
                           " to_addrs, sent_at, body, full_text, created_at) VALUES ('s', 'a@x', 'in', ?, '', 'a@x',"
                           " '[]', '2026-01-01', 'b', 'b', '2026-01-01')", (f"<m{n}@x>",)) for n in (1, 2)]  # fmt: skip
        db.execute("INSERT INTO documents (user_id, sha256, kind, size, created_at) VALUES ('a@x', 'h', 'pdf', 3, 't')")
        db.execute("INSERT INTO document_parts VALUES (1, 0, 'a@x', x'010203')")
        for row in rows:
            db.execute("INSERT INTO message_documents VALUES (?, 1, 1, 'a@x', 's', 'a.pdf', 'application/pdf')", (row,))

        def left() -> list[int]:
            return [int(db.query_value(f"SELECT count(*) FROM {t}")) for t in ("message_documents", "documents",
                                                                                "document_parts")]  # fmt: skip

        db.execute("DELETE FROM messages WHERE id = ?", (rows[0],))
        assert left() == [1, 1, 1]  # still carried by the second mail
        db.execute("DELETE FROM messages WHERE id = ?", (rows[1],))
        assert left() == [0, 0, 0]
    finally:
        db.close()
