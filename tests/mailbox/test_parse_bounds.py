"""Counts an attacker chooses are bounded by the parser (issue 30): ids per header, addresses per field, header
fields and their length, the header section, attachments. Each limit keeps what matters and says what it cut."""

from __future__ import annotations

import time

import pytest

from quinn.errors import MailParseError
from quinn.mailbox.parse import (
    MAX_ADDRESSES,
    MAX_ATTACHMENTS,
    MAX_HEADER_BYTES,
    MAX_HEADER_CHARS,
    MAX_HEADER_FIELDS,
    MAX_MIME_PARTS,
    MAX_REFERENCES_HEAD,
    MAX_REFERENCES_TAIL,
    parse_email,
)


def mail(headers: str, body: str = "Hi\n") -> bytes:
    return f"From: a@example.com\nTo: quinn@quinn.test\nSubject: s\nMessage-ID: <m@x>\n{headers}\n{body}".encode()


def ids(count: int) -> list[str]:
    return [f"<id{n:06d}@evil.test>" for n in range(count)]


def test_references_of_80k_ids_keep_the_root_and_the_nearest_parents() -> None:
    """1.7 MB of References took 54 s on c7b109b (a list's ``not in``); the thread's root and the newest ids stay."""
    refs = ids(80_000)
    started = time.perf_counter()
    email = parse_email(mail(f"References: {' '.join(refs)}\n"))
    assert time.perf_counter() - started < 10  # generous: it takes ~0.3 s
    assert email.references == (*refs[:MAX_REFERENCES_HEAD], *refs[-MAX_REFERENCES_TAIL:])
    assert any("References: 80000 ids" in d for d in email.defects)
    assert email.thread_ids[0] == refs[0]


def test_repeated_ids_are_dropped_in_order() -> None:
    email = parse_email(mail("References: <a@x> <b@x> <a@x> <> <c@x> <b@x>\n"))
    assert email.references == ("<a@x>", "<b@x>", "<c@x>")


def test_in_reply_to_and_message_id_of_many_ids_take_the_first() -> None:
    flood = " ".join(ids(40_000))
    email = parse_email(
        mail(f"In-Reply-To: <> {flood}\n").replace(b"Message-ID: <m@x>", f"Message-ID: {flood}".encode())
    )
    assert email.in_reply_to == email.message_id == "<id000000@evil.test>"


@pytest.mark.parametrize("field", ["To", "Cc", "Reply-To"])
def test_addresses_per_field_are_capped(field: str) -> None:
    many = ", ".join(f"u{n}@example.test" for n in range(5_000))
    email = parse_email(
        mail(f"{field}: {many}\n").replace(b"To: quinn@quinn.test\n", b"")
        if field == "To"
        else mail(f"{field}: {many}\n")
    )
    found = {"To": email.to, "Cc": email.cc, "Reply-To": email.reply_to}[field]
    assert [a.address for a in found] == [f"u{n}@example.test" for n in range(MAX_ADDRESSES)]
    assert any(f"{len(range(5_000))} addresses, kept the first {MAX_ADDRESSES}" in d for d in email.defects)


def test_header_fields_past_the_limit_are_not_read_and_the_topmost_trace_stays() -> None:
    flood = "".join(f"Received: by hop{n}\n" for n in range(MAX_HEADER_FIELDS * 3))
    email = parse_email(b"Received: by our-mx\n" + mail(flood))
    assert sum(len(v) for v in email.headers.values()) == MAX_HEADER_FIELDS
    assert email.trace[0] == ("received", "by our-mx")
    assert any(f"read the topmost {MAX_HEADER_FIELDS}" in d for d in email.defects)


def test_a_long_header_value_is_cut_and_says_so() -> None:
    email = parse_email(mail("").replace(b"Subject: s", b"Subject: " + b"a" * 100_000))
    assert email.subject == "a" * MAX_HEADER_CHARS
    assert any("100000 characters" in d for d in email.defects)


def test_a_header_section_past_the_limit_is_refused_with_its_size() -> None:
    flood = "".join(f"X-Filler-{n}: v\n" for n in range(MAX_HEADER_BYTES // 15))
    started = time.perf_counter()
    with pytest.raises(MailParseError, match="header section too large"):
        parse_email(mail(flood).replace(b"\n", b"\r\n"))
    assert time.perf_counter() - started < 5


def test_attachments_past_the_limit_are_counted_not_kept() -> None:
    part = ('--b\nContent-Type: application/octet-stream\nContent-Disposition: attachment; filename="f{n}.bin"\n'
            "Content-Transfer-Encoding: base64\n\nAAAA\n")  # fmt: skip
    body = "--b\nContent-Type: text/plain\n\nhello\n" + "".join(part.format(n=n) for n in range(MAX_ATTACHMENTS + 40))
    email = parse_email(mail('Content-Type: multipart/mixed; boundary="b"\n', body + "--b--\n"))
    assert len(email.attachments) == MAX_ATTACHMENTS and email.attachments_left_out == 40
    assert email.attachments[-1].filename == f"f{MAX_ATTACHMENTS - 1}.bin"
    assert email.text == "hello"


def test_a_mime_tree_of_too_many_parts_is_refused_before_mail_parser_walks_it() -> None:
    part = "--b\nContent-Type: text/plain\n\nx\n"
    body = part * (MAX_MIME_PARTS + 1) + "--b--\n"
    started = time.perf_counter()
    with pytest.raises(MailParseError, match=f"more than {MAX_MIME_PARTS} MIME parts"):
        parse_email(mail('Content-Type: multipart/mixed; boundary="b"\n', body))
    assert time.perf_counter() - started < 30  # generous: ~1 s, the stdlib's parse only
