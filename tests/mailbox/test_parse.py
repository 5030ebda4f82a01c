"""parse_email on .eml fixtures and generated hostile input: every case keeps its text or raises MailParseError."""

from __future__ import annotations

import hashlib
import random
import re
import time
from dataclasses import astuple
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from quinn.errors import MailParseError
from quinn.mailbox import parse as parse_module
from quinn.mailbox.message import Address, Attachment, InboundEmail
from quinn.mailbox.parse import (
    MAX_HTML_CHARS,
    MAX_MIME_DEPTH,
    MAX_REPLY_SCAN_CHARS,
    MAX_SCAN_LINE_CHARS,
    decode_header_value,
    parse_email,
    strip_reply,
)

MAIL = Path(__file__).parents[1] / "fixtures" / "mail"
SENT = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # "Mon, 03 Mar 2025 10:00:00 +0100" in every fixture


def raw(name: str) -> bytes:
    return (MAIL / name).read_bytes()


def parse(name: str, **kwargs: object) -> InboundEmail:
    return parse_email(raw(name), **kwargs)  # type: ignore[arg-type]


def strings(email: InboundEmail) -> list[str]:
    """Every text in the result, to check that each one survives ``.encode()``."""
    out = [email.message_id, email.subject, email.text, email.full_text, *email.references, *email.defects]
    for addr in (email.from_, *email.to, *email.cc, *email.reply_to):
        if addr is not None:
            out += [addr.name, addr.address]
    out += [a.filename for a in email.attachments]
    out += [v for values in email.headers.values() for v in values] + list(email.headers)
    return out


def assert_clean(email: InboundEmail) -> None:
    for text in strings(email):
        text.encode("utf-8")  # raises on a lone surrogate
        assert "\r" not in text


def simple(headers: str, body: str = "Hi\n") -> bytes:
    return f"From: a@example.com\nTo: quinn@quinn.test\nSubject: s\n{headers}\n{body}".encode()


def nested(depth: int) -> bytes:
    parts = [b"From: a@example.com\nTo: quinn@quinn.test\nSubject: deep\nMIME-Version: 1.0\n"]
    parts += [b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (i, i) for i in range(depth)]
    parts.append(b"Content-Type: text/plain\n\nhi\n")
    parts += [b"--b%d--\n" % i for i in reversed(range(depth))]
    return b"".join(parts)


# --- well-formed mail -------------------------------------------------------------------------------


def test_plain_mail_fields() -> None:
    email = parse("plain.eml")
    assert email.message_id == "<plain-1@example.com>"
    assert email.in_reply_to is None and email.references == ()
    assert email.from_ == Address("Alice Example", "alice@example.com")
    assert email.to == (Address("Quinn", "quinn@quinn.test"),)
    assert email.cc == (Address("Bob", "bob@example.com"),)  # lower-cased
    assert email.reply_to == (Address("", "alice.private@example.org"),)
    assert email.subject == "Dentist"
    assert email.date == SENT and email.date.tzinfo is UTC
    assert email.full_text == "Hello Quinn,\n\ncan you remind me about the dentist on Friday?\n\nAlice"
    assert email.text == email.full_text  # nothing quoted, no signature
    assert email.content_type == "text/plain"
    assert email.size == len(raw("plain.eml"))
    assert email.attachments == () and email.defects == ()
    assert email.header("SUBJECT") == "Dentist"
    assert all(name == name.lower() for name in email.headers)
    assert_clean(email)


def test_html_only_becomes_text_without_script_or_style() -> None:
    email = parse("html_only.eml")
    assert email.content_type == "text/html"
    assert "please book a table at [Chez Marie](https://food.example.com)" in email.full_text
    assert "Friday" in email.full_text and "4 people" in email.full_text
    for hidden in ("tracking", "alert", "color: red", "<p>", "document.write"):
        assert hidden not in email.full_text
    assert "Chez Marie" in email.text


def test_deeply_nested_html_lists_are_flattened() -> None:
    # Unflattened, html2text indents each line by its depth: 10,000 levels give ~100 MB of text.
    started = time.monotonic()
    email = parse_email(simple("Content-Type: text/html\n", "<ul><li>item " * 10_000))
    assert time.monotonic() - started < 10
    assert email.full_text.startswith("* item") and len(email.full_text) < 1_000_000


def test_huge_html_is_converted_up_to_the_limit() -> None:
    email = parse_email(simple("Content-Type: text/html\n", "<p>" + "word " * (MAX_HTML_CHARS // 4)))
    assert email.full_text.startswith("word word")
    assert any(d.startswith(f"HTML longer than {MAX_HTML_CHARS}") for d in email.defects)


def test_multipart_alternative_prefers_plain() -> None:
    email = parse("alternative.eml")
    assert email.content_type == "multipart/alternative"
    assert email.text == "Plain version: the meeting moved to 3pm."
    assert "HTML version" not in email.full_text


def test_attachments_are_metadata_only_and_deterministic() -> None:
    email = parse("attachment.eml")
    assert email.text == "Here is the invoice, please file it."
    assert email.attachments == (
        Attachment("Rechnung März.pdf", "application/pdf", 1040),  # RFC 2231 name, decoded size
        Attachment("unnamed-2.txt", "text/csv", 8),  # mail-parser's random name replaced
    )
    assert parse("attachment.eml") == email  # no randomness anywhere
    assert "JVBER" not in repr(email) and "%PDF" not in repr(email)


def test_german_reply_strips_quote_and_greeting() -> None:
    email = parse("reply_de.eml")
    assert email.text == "Hallo Quinn,\n\nja, Freitag um 10 Uhr passt mir gut."
    assert "Am Mo., 3. März 2025 um 09:12 Uhr schrieb" in email.full_text
    assert "> Passt dir Freitag?" in email.full_text
    assert email.from_ == Address("Jörg Müller", "joerg@example.de")
    assert email.subject == "AW: Termin"
    assert email.in_reply_to == "<q-1@quinn.test>"
    assert email.references == ("<orig-0@example.com>", "<q-1@quinn.test>")  # folded header unfolded
    assert email.thread_ids == ("<orig-0@example.com>", "<q-1@quinn.test>")


def test_english_reply_with_signature_and_crlf() -> None:
    data = raw("reply_en_crlf.eml")
    assert b"\r\n" in data
    email = parse_email(data)
    assert email.text == "Sure, Tuesday works for me.\n\n- bring the slides\n- book the room"  # list kept
    assert "-- \nAlice Example\nACME Corp, Berlin" in email.full_text
    assert "wrote:\n> Does Tuesday work?" in email.full_text
    assert email.size == len(data)
    assert_clean(email)
    assert parse_email(data.replace(b"\r\n", b"\n")).full_text == email.full_text


@pytest.mark.parametrize(
    "attribution",
    [
        "On Mon, 3 Mar 2025 at 10:00, Quinn <quinn@quinn.test> wrote:",
        "Am Mo., 3. März 2025 um 10:00 Uhr schrieb Quinn <quinn@quinn.test>:",
        "Le lun. 3 mars 2025 à 10:00, Quinn <quinn@quinn.test> a écrit :",
        "El lun, 3 mar 2025 a las 10:00, Quinn (<quinn@quinn.test>) escribió:",  # missed by the library
        "Il giorno lun 3 mar 2025 alle ore 10:00 Quinn <quinn@quinn.test> ha scritto:",
        "Op ma 3 mrt 2025 om 10:00 schreef Quinn <quinn@quinn.test>:",  # missed by the library
        "Op 3 mrt. 2025, om 10:00 heeft Quinn <quinn@quinn.test> het volgende geschreven:",
        "Von: Quinn <quinn@quinn.test>\nGesendet: Montag, 3. März 2025 10:00\nAn: Alice\nBetreff: Termin",
        "-----Original Message-----\nFrom: Quinn\nSent: Monday",
    ],
)
def test_reply_headers_in_six_languages(attribution: str) -> None:
    assert strip_reply(f"Reply body line.\n\n{attribution}\n> quoted line\n> more\n") == "Reply body line."


def test_attribution_like_sentence_without_quote_is_kept() -> None:
    # Our own cut needs quoted lines after the attribution. (The library's English pattern has no such
    # guard: "On Monday I wrote:" alone cuts the text there; full_text keeps everything.)
    text = "Hola,\n\nEl lunes Pedro escribió:\nel plan está bien.\n\nAna"
    assert strip_reply(text) == text


def test_trailing_quote_without_attribution_is_dropped() -> None:
    assert strip_reply("Yes, do it.\n\n> Shall I book it?\n> Quinn\n") == "Yes, do it."
    assert strip_reply("> only a quote\n") == "> only a quote"  # nothing else: keep it


def test_long_lines_survive_reply_stripping() -> None:
    paragraph = "word " * (MAX_SCAN_LINE_CHARS // 2)
    text = strip_reply(f"{paragraph}\n\nOn Mon, 3 Mar 2025, Quinn <q@quinn.test> wrote:\n> old\n")
    assert text == paragraph.strip()


@pytest.mark.parametrize("unit", ["Am 3. schrieb ", "On a wrote ", "Op x schreef ", "\n", " \n", ">\n", "- "])
def test_reply_stripping_is_not_a_redos(unit: str) -> None:
    # Unguarded, mail-parser-reply needs minutes for these (polynomial backtracking); guarded ~0.2 s.
    for line_chars in (0, MAX_SCAN_LINE_CHARS - 1):
        text = (unit * (200_000 // len(unit)))[:200_000]
        if line_chars:
            text = "\n".join(text[i : i + line_chars] for i in range(0, len(text), line_chars))
        started = time.monotonic()
        strip_reply(text)
        assert time.monotonic() - started < 5


# --- header decoding where mail-parser loses text ----------------------------------------------------


def test_rfc2047_with_bogus_charset_keeps_text() -> None:
    email = parse("bogus_charset.eml")
    assert email.subject == "café au lait"  # adjacent encoded words joined (RFC 2047 §6.2)
    assert email.from_ == Address("René Dupont", "rene@example.fr")  # latin-1 bytes labelled utf-8
    assert any("x-bogus" in d for d in email.defects)
    assert_clean(email)


def test_raw_utf8_headers_keep_text() -> None:
    email = parse("raw_utf8_headers.eml")
    assert email.subject == "Grüße aus Köln"
    assert email.from_ == Address("Jürgen Grüße", "juergen@example.de")
    assert email.header("from") == "Jürgen Grüße <juergen@example.de>"
    assert email.defects == ()  # RFC 6532 UTF-8 headers are legal


def test_non_utf8_bytes_and_lone_surrogates_are_recovered() -> None:
    email = parse("lone_surrogate.eml")
    assert email.subject == "Grüße"  # latin-1 bytes: mail-parser alone gives "Gre"
    assert email.from_ == Address("Jörg", "joerg@example.de")
    assert email.header("x-note") == "J\ufffdrg"  # utf-7 produced a lone surrogate: replaced
    assert any("lone surrogates" in d for d in email.defects)
    assert any("not UTF-8" in d for d in email.defects)
    assert_clean(email)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=?utf-8?B?R3LDvMOfZQ?=", "Grüße"),  # base64 without padding
        ("=?ISO-8859-1?Q?Andr=E9?= Pirard", "André Pirard"),
        ("=?utf-8*de?Q?Gr=C3=BC=C3=9Fe?=", "Grüße"),  # RFC 2231 language suffix
        ("=?utf-8?Q?a?=  =?utf-8?Q?_b?=", "a b"),
        ("plain text", "plain text"),
        ("=?utf-8?B?!!!?=", "=?utf-8?B?!!!?="),  # corrupt: kept literally
    ],
)
def test_decode_header_value(value: str, expected: str) -> None:
    assert decode_header_value(value) == expected


def test_encoded_display_name_with_comma_is_one_address() -> None:
    email = parse_email(
        b"From: a@example.com\nTo: =?utf-8?q?Doe=2C_John?= <J.Doe@Example.COM>, quinn@quinn.test\nSubject: s\n\nx"
    )
    assert email.to == (Address("Doe, John", "j.doe@example.com"), Address("", "quinn@quinn.test"))


def test_ambiguous_from_is_not_guessed() -> None:
    email = parse_email(simple("", "x").replace(b"From: a@example.com", b"From: alice@example.org)<bob@example.com>"))
    assert email.from_ is None
    assert any("header From" in d for d in email.defects)


def test_ids_keep_brackets_and_lose_whitespace() -> None:
    email = parse_email(
        simple(
            "Message-ID:\n <abc\n def@example.com>\nIn-Reply-To: <p1@example.com> (sent by Bob)\n"
            "References: <r1@example.com>,<r2@example.com>\n <r1@example.com>\n"
        )
    )
    assert email.message_id == "<abcdef@example.com>"
    assert email.in_reply_to == "<p1@example.com>"
    assert email.references == ("<r1@example.com>", "<r2@example.com>")
    assert parse_email(simple("Message-ID: bare@example.com\n")).message_id == "<bare@example.com>"


def test_headers_keep_every_value_topmost_first() -> None:
    email = parse_email(simple("Received: by top\nReceived: by middle\nReceived: by bottom\n"))
    assert email.header_all("received") == ("by top", "by middle", "by bottom")
    assert email.header("Received") == "by top"


# --- missing and broken parts ------------------------------------------------------------------------


def test_missing_message_id_is_synthesised_deterministically() -> None:
    data = raw("no_message_id.eml")
    email = parse_email(data)
    digest = hashlib.sha256(data).hexdigest()[:32]
    assert email.message_id == f"<{digest}@quinn.invalid>"
    assert any(d.startswith("missing Message-ID") for d in email.defects)
    # The hash is over the LF form, so the same mail fetched over IMAP (CRLF) gets the same id.
    assert parse_email(data.replace(b"\n", b"\r\n")).message_id == email.message_id


def test_truncated_multipart_keeps_what_arrived() -> None:
    email = parse("truncated.eml")
    assert email.text == "The first part arrived complete."
    assert email.attachments == (Attachment("cut.pdf", "application/pdf", 15),)
    assert any("CloseBoundaryNotFoundDefect" in d for d in email.defects)


@pytest.mark.parametrize(
    ("date_header", "internal", "expected"),
    [
        ("Date: Mon, 03 Mar 2025 10:00:00 +0100\n", None, SENT),
        ("Date: Mon, 03 Mar 2025 09:00:00 -0000\n", None, SENT),  # naive: -0000 means UTC
        ("", datetime(2025, 1, 2, 3, 4, 5), datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("Date: yesterday-ish\n", datetime(2025, 1, 2, 4, 4, tzinfo=timezone(timedelta(hours=1))), None),
        ("", None, None),
    ],
)
def test_date_is_utc_with_internal_date_fallback(
    date_header: str, internal: datetime | None, expected: datetime | None
) -> None:
    email = parse_email(simple(date_header), internal_date=internal)
    if internal is not None and expected is None:
        expected = internal.astimezone(UTC)
        assert any("unparseable Date" in d for d in email.defects)
    assert email.date == expected
    assert email.date is None or email.date.utcoffset() == timedelta(0)


def test_nul_in_charset_is_survived() -> None:
    # mail-parser 4.8 raises ValueError("embedded null character") on this charset name.
    data = simple("Content-Type: text/plain; charset=utf-8\x00\n", "") + b"still readable \xa4\n"  # not UTF-8
    email = parse_email(data)
    assert email.text.startswith("still readable")
    assert "NUL bytes removed" in email.defects


def test_long_text_only_reply_scanned_in_its_head() -> None:
    body = "line of text\n" * (MAX_REPLY_SCAN_CHARS // 10)
    email = parse_email(simple("", body))
    assert len(email.full_text) > MAX_REPLY_SCAN_CHARS
    assert email.text.startswith("line of text")
    assert any("reply taken from the head only" in d for d in email.defects)


# --- refused input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty message"),
        (b" \r\n\n ", "empty message"),
        (None, "expected bytes"),
        ("From: a@b\n\nx", "expected bytes"),
    ],
)
def test_empty_or_wrong_type_raises(data: object, reason: str) -> None:
    with pytest.raises(MailParseError, match=reason):
        parse_email(data)  # type: ignore[arg-type]


def test_empty_fixture_raises() -> None:
    with pytest.raises(MailParseError, match="empty message"):
        parse("empty.eml")


@pytest.mark.parametrize("name", ["garbage.eml", "not_an_email.eml"])
def test_not_an_email_raises(name: str) -> None:
    with pytest.raises(MailParseError, match="not an email"):
        parse(name)


def test_unknown_headers_only_is_not_an_email() -> None:
    with pytest.raises(MailParseError, match="none of the usual header fields"):
        parse_email(b"X-Foo: bar\n\nbody")


def test_max_bytes() -> None:
    data = raw("plain.eml")
    assert parse_email(data, max_bytes=len(data)).size == len(data)
    with pytest.raises(MailParseError, match=f"message too large: {len(data)} bytes > limit {len(data) - 1}"):
        parse_email(data, max_bytes=len(data) - 1)


def test_nesting_within_limit_parses() -> None:
    assert parse_email(nested(10)).text == "hi"


@pytest.mark.parametrize("depth", [MAX_MIME_DEPTH, 200, 2000])
def test_deep_nesting_raises(depth: int) -> None:
    # 2000 levels: mail-parser's MailParserRecursionError (the stdlib alone raises RecursionError).
    with pytest.raises(MailParseError, match="nesting"):
        parse_email(nested(depth))


def test_library_exceptions_are_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_message: object) -> None:
        raise KeyError("surprise")

    monkeypatch.setattr(parse_module.mailparser, "MailParser", boom)
    with pytest.raises(MailParseError, match="parser failed: KeyError") as info:
        parse("plain.eml")
    assert isinstance(info.value.__cause__, KeyError)


def test_mutated_fixtures_never_escape() -> None:
    """Seeded mutations of every fixture: the result is an InboundEmail with clean text, or MailParseError."""
    rnd = random.Random(20250303)
    seeds = [path.read_bytes() for path in sorted(MAIL.glob("*.eml")) if path.stat().st_size]
    junk = [b"=?", b"?=", b"<", b">", b"\n", b"\r", b"\x00", b"--", b"=?utf-7?B?", b":", b"\n\n", b"\xff", b'"', b"("]
    parsed = refused = 0
    for _ in range(300):
        data = bytearray(rnd.choice(seeds))
        roll = rnd.random()
        if roll < 0.35:
            data = data[: rnd.randrange(len(data))]
        elif roll < 0.7:
            for _ in range(rnd.randrange(1, 20)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        else:
            pos = rnd.randrange(len(data))
            data[pos:pos] = rnd.choice(junk) * rnd.randrange(1, 5)
        try:
            email = parse_email(bytes(data))
        except MailParseError as exc:
            assert exc.message
            refused += 1
            continue
        assert_clean(email)
        assert re.fullmatch(r"<[^<>\s]+>", email.message_id)
        assert astuple(email)  # a complete, frozen value
        parsed += 1
    assert parsed > 150 and refused > 0
