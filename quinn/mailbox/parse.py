"""Turn raw RFC 5322 bytes into an ``InboundEmail``. Pure: no I/O, no clock, deterministic.

mail-parser supplies the MIME structure (body parts, attachments, defects, hardened address parsing);
header text is decoded here from the stdlib message, because mail-parser silently drops characters
it cannot decode (raw non-UTF-8 bytes, RFC 2047 words with unusable charsets, codecs that yield lone
surrogates). Whatever goes wrong, the caller gets an ``InboundEmail`` or a ``MailParseError``.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import re
from dataclasses import replace
from datetime import UTC, datetime
from email.message import Message
from typing import Any

import html2text
import mailparser  # type: ignore[import-untyped]
from mailparser.exceptions import MailParserRecursionError  # type: ignore[import-untyped]
from mailparser.utils import get_addresses  # type: ignore[import-untyped]
from mailparser_reply.parser import EmailMessage as ReplyMessage  # type: ignore[import-untyped]

from quinn.errors import MailParseError
from quinn.mailbox.identity import canonical_address
from quinn.mailbox.message import Address, Attachment, InboundEmail

#: Header fields whose order matters to trust (quinn/mailbox/authresults.py).
TRACE_FIELDS = frozenset({"received", "authentication-results"})
#: Languages whose reply headers ("On … wrote:", "Am … schrieb …") and sign-offs are recognised.
REPLY_LANGUAGES: tuple[str, ...] = ("en", "de", "fr", "es", "it", "nl")
#: Deeper MIME trees are refused: real mail nests < 10 levels; parsers recurse once per level.
MAX_MIME_DEPTH = 50
#: mail-parser-reply's patterns backtrack polynomially (one 2,000-char line of "Am 3. schrieb " takes 5 s;
#: 8,000 chars of it never finish). So it only sees the head of the text, and lines longer than
#: MAX_SCAN_LINE_CHARS (never a reply header) are masked: 20 kB of the worst input then costs ~0.15 s.
MAX_REPLY_SCAN_CHARS = 20_000
MAX_SCAN_LINE_CHARS = 300
#: HTML beyond this is not converted (html2text is slow); deeper list/quote nesting is flattened.
MAX_HTML_CHARS = 500_000
MAX_HTML_NESTING = 20
#: Counts an attacker controls are bounded here, before anything reads them (issue 30): a References field of
#: 80,000 ids froze the daemon. References keeps its first and last ids, as threading practice trims it (RFC 5322
#: §3.6.4 keeps the root first; JWZ threading needs the root and the nearest parents): the root names the
#: thread (threads.thread_key), the last ids its newest messages.
MAX_REFERENCES_HEAD = 3
MAX_REFERENCES_TAIL = 17
#: Addresses kept per address field (To, Cc, Reply-To, From): replies go to a handful at most.
MAX_ADDRESSES = 100
#: Header fields read, topmost first (trust reads the topmost trace fields: quinn/mailbox/authresults.py), and
#: the characters kept of each value (ids are taken from the whole value first).
MAX_HEADER_FIELDS = 1000
MAX_HEADER_CHARS = 16_384
#: A longer header section is refused before the MIME parser reads it: it costs ~1.5 s per MB of tiny fields,
#: and real headers stay under 100 kB (RFC 5322 §2.1.1 lines are at most 998 characters).
MAX_HEADER_BYTES = 2 * 1024 * 1024
#: A MIME tree of more parts is refused before mail-parser walks it: 60,000 tiny parts (9 MB) cost ~6 s of its
#: time on top of the stdlib's ~3 s; real mail has a few dozen.
MAX_MIME_PARTS = 20_000
#: Attachments kept (with their bytes); the rest are counted in ``InboundEmail.attachments_left_out``.
MAX_ATTACHMENTS = 500
#: Header names that any email carries at least one of; without them the input is not an email.
_EMAIL_HEADERS = frozenset(
    "from sender to cc subject date message-id received return-path mime-version content-type "
    "delivered-to reply-to in-reply-to references".split()
)
_HINT = "the message is quarantined; inspect the raw file"

_FOLD = re.compile(r"\r?\n(?=[ \t])")
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=")
_BETWEEN_WORDS = re.compile(r"(?<=\?=)[ \t]+(?==\?)")
_SURROGATES = re.compile("[\ud800-\udfff]")
_MSG_ID = re.compile(r"<[^<>]*>")
_NESTING_TAG = re.compile(r"<(/?)(?:ul|ol|dl|blockquote)\b[^>]*>", re.IGNORECASE)
_INVENTED_NAME = re.compile(r"^[A-Za-z]{10}\.(txt|rtf)$")


def parse_email(raw: bytes, *, internal_date: datetime | None = None, max_bytes: int | None = None) -> InboundEmail:
    """Parse one raw message; raise ``MailParseError`` (with the reason) when it cannot be an email."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise MailParseError(f"cannot parse {type(raw).__name__}: expected bytes", hint=_HINT)
    raw = bytes(raw)
    if not raw.strip():
        raise MailParseError("empty message", hint=_HINT)
    if max_bytes is not None and len(raw) > max_bytes:
        raise MailParseError(
            f"message too large: {len(raw)} bytes > limit {max_bytes}", hint="raise max_message_kb to accept it"
        )
    try:
        try:
            return _parse(raw, internal_date)
        except ValueError:
            if b"\x00" not in raw:
                raise
            # mail-parser 4.8 crashes on a NUL inside a charset name ("embedded null character");
            # NUL is not allowed in RFC 5322 text anyway, so retry without it.
            cleaned = _parse(raw.replace(b"\x00", b""), internal_date)
            return replace(cleaned, defects=(*cleaned.defects, "NUL bytes removed"), size=len(raw))
    except MailParseError:
        raise
    except (MailParserRecursionError, RecursionError) as exc:
        raise MailParseError(f"MIME nesting too deep ({type(exc).__name__})", hint=_HINT) from exc
    except Exception as exc:  # any library failure on hostile input becomes a quarantine reason
        raise MailParseError(f"parser failed: {type(exc).__name__}: {exc}", hint=_HINT) from exc


def parse_or_reason(
    raw: bytes, internal_date: datetime | None = None, max_bytes: int | None = None
) -> InboundEmail | str:
    """``parse_email``'s result, or the message of its refusal: what a child process sends back (never raises;
    quinn/confined.py)."""
    try:
        return parse_email(raw, internal_date=internal_date, max_bytes=max_bytes)
    except MailParseError as exc:
        return exc.message


def _parse(raw: bytes, internal_date: datetime | None) -> InboundEmail:
    # IMAP delivers CRLF; files and tests use LF. Normalise first so text, hashes and ids agree.
    normalised = raw.replace(b"\r\n", b"\n")
    end = normalised.find(b"\n\n")
    header_bytes = len(normalised) if end < 0 else end
    if header_bytes > MAX_HEADER_BYTES:
        raise MailParseError(f"header section too large: {header_bytes} bytes > limit {MAX_HEADER_BYTES}",
                             hint=_HINT)  # fmt: skip
    # The stdlib builds the tree once (what mailparser.parse_from_bytes does too); its shape is checked before
    # mail-parser walks it, the costlier part. A RecursionError (deep nesting) is caught by parse_email.
    msg: Message = email.message_from_bytes(normalised)
    _check_shape(msg)
    parsed = mailparser.MailParser(msg)
    defects: list[str] = _library_defects(parsed.defects)

    headers: dict[str, list[str]] = {}
    trace: list[tuple[str, str]] = []
    references: list[str] = []
    fields = _bounded_fields(msg, defects)
    for name, value in fields:
        # Trace fields are structured (RFC 8601, RFC 5321): no encoded words, and decoding one would let a
        # sender who picks a value the server copies in (a DKIM i=) write results into our stamp.
        words = name.lower() not in TRACE_FIELDS
        text = decode_header_value(_unfold(str(value)), defects, name, words=words)
        if name.lower() == "references":  # from the whole value: its last ids are the nearest parents
            references.append(text)
        if len(text) > MAX_HEADER_CHARS:
            defects.append(f"header {name}: {len(text)} characters, kept the first {MAX_HEADER_CHARS}")
            text = text[:MAX_HEADER_CHARS]
        headers.setdefault(name.lower(), []).append(text)
        if name.lower() in TRACE_FIELDS:
            trace.append((name.lower(), text))

    message_id = _first_id(_first(headers, "message-id"))
    if not message_id:
        message_id = f"<{hashlib.sha256(normalised).hexdigest()[:32]}@quinn.invalid>"
        defects.append(f"missing Message-ID: synthesised {message_id}")

    from_ = next(iter(_addresses(fields, "from", defects)), None)
    to, cc = _addresses(fields, "to", defects), _addresses(fields, "cc", defects)
    reply_to = _addresses(fields, "reply-to", defects)
    date = _date(_first(headers, "date"), parsed, internal_date, defects)
    full_text = _body_text(parsed, defects)
    text = strip_reply(full_text, defects)
    return InboundEmail(
        message_id=message_id,
        in_reply_to=_first_id(_first(headers, "in-reply-to")),
        references=_trimmed_references(_all_ids(" ".join(references)), defects),
        from_=from_,
        to=to,
        cc=cc,
        reply_to=reply_to,
        subject=_first(headers, "subject"),
        date=date,
        text=text,
        full_text=full_text,
        headers={name: tuple(values) for name, values in headers.items()},
        trace=tuple(trace),
        attachments=_attachments(parsed.attachments[:MAX_ATTACHMENTS]),
        attachments_left_out=_left_out(len(parsed.attachments), defects),
        defects=tuple(dict.fromkeys(defects)),  # the same defect may repeat per encoded word
        content_type=msg.get_content_type(),
        size=len(raw),
    )


def _bounded_fields(msg: Message, defects: list[str]) -> list[tuple[str, Any]]:
    """The topmost ``MAX_HEADER_FIELDS`` header fields, as (name, raw value)."""
    fields = list(msg.raw_items())
    if len(fields) > MAX_HEADER_FIELDS:
        defects.append(f"{len(fields)} header fields: read the topmost {MAX_HEADER_FIELDS}")
        fields = fields[:MAX_HEADER_FIELDS]
    return fields


def _trimmed_references(ids: tuple[str, ...], defects: list[str]) -> tuple[str, ...]:
    """References cut to its first ``MAX_REFERENCES_HEAD`` and last ``MAX_REFERENCES_TAIL`` ids."""
    if len(ids) <= MAX_REFERENCES_HEAD + MAX_REFERENCES_TAIL:
        return ids
    defects.append(f"References: {len(ids)} ids, kept the first {MAX_REFERENCES_HEAD} and the last "
                   f"{MAX_REFERENCES_TAIL}")  # fmt: skip
    return ids[:MAX_REFERENCES_HEAD] + ids[-MAX_REFERENCES_TAIL:]


def _left_out(count: int, defects: list[str]) -> int:
    """How many attachments beyond ``MAX_ATTACHMENTS`` were not kept (said in ``defects``)."""
    if count <= MAX_ATTACHMENTS:
        return 0
    defects.append(f"{count} attachments: kept the first {MAX_ATTACHMENTS}")
    return count - MAX_ATTACHMENTS


def _check_shape(msg: Message) -> None:
    """Refuse inputs that are not email at all, and MIME trees deeper than ``MAX_MIME_DEPTH`` or with more than
    ``MAX_MIME_PARTS`` parts."""
    names = {name.lower() for name in msg}
    if not names:
        raise MailParseError("not an email: no header fields", hint=_HINT)
    if not names & _EMAIL_HEADERS:
        raise MailParseError(f"not an email: none of the usual header fields (saw {len(names)})", hint=_HINT)
    stack: list[tuple[Message, int]] = [(msg, 1)]  # iterative: recursion is what deep nesting attacks
    parts = 0
    while stack:
        part, depth = stack.pop()
        parts += 1
        if parts > MAX_MIME_PARTS:
            raise MailParseError(f"more than {MAX_MIME_PARTS} MIME parts", hint=_HINT)
        if depth > MAX_MIME_DEPTH:
            raise MailParseError(f"MIME nesting deeper than {MAX_MIME_DEPTH} levels", hint=_HINT)
        if part.is_multipart():
            stack.extend((child, depth + 1) for child in part.get_payload() if isinstance(child, Message))


def _library_defects(raw_defects: list[dict[str, list[str]]]) -> list[str]:
    """Flatten mail-parser's ``[{content_type: [defect, …]}, …]`` into strings."""
    flat: list[str] = []
    for entry in raw_defects:
        for where, items in entry.items():
            flat.extend(f"{where}: {_clean(str(item))}" for item in (items if isinstance(items, list) else [items]))
    return flat


# --- header decoding --------------------------------------------------------------------------------


def _unfold(value: str) -> str:
    """RFC 5322 §2.2.3: unfolding removes the CRLF before folding whitespace."""
    return _FOLD.sub("", value).replace("\r", "").replace("\n", " ").strip()


def _clean(text: str) -> str:
    """Replace lone surrogates (never valid Unicode scalars) so text always survives ``.encode()``."""
    return _SURROGATES.sub("\ufffd", text).replace("\x00", "")


def _decode_bytes(data: bytes, charset: str | None, defects: list[str], where: str) -> str:
    """Decode with the declared charset, else UTF-8, else cp1252, else latin-1 (which never fails)."""
    candidates = [c for c in (charset, "utf-8", "cp1252", "latin-1") if c]
    for index, candidate in enumerate(candidates):
        try:
            text = data.decode(candidate)
        except (LookupError, UnicodeError):
            continue
        if index and charset:
            defects.append(f"{where}: charset {charset!r} unusable, decoded as {candidate}")
        if _SURROGATES.search(text):  # utf-7/utf-16 can produce lone surrogates
            defects.append(f"{where}: charset {candidate!r} produced lone surrogates, replaced")
        return _clean(text)
    return data.decode("latin-1")  # unreachable: latin-1 decodes every byte string


def _eight_bit(value: str, defects: list[str], where: str) -> str:
    """Recover raw 8-bit header bytes (RFC 6532 allows UTF-8) kept by the stdlib as surrogate escapes."""
    if not _SURROGATES.search(value):
        return value
    try:
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # surrogates that are not escaped bytes: nothing to recover
        return _clean(value)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = _decode_bytes(data, None, [], where)
        defects.append(f"{where}: raw 8-bit header is not UTF-8, decoded as cp1252/latin-1")
        return text


def _decode_word(match: re.Match[str], defects: list[str], where: str) -> str:
    """Decode one RFC 2047 encoded-word; keep it literally when its payload is corrupt."""
    charset, encoding, payload = match.group(1), match.group(2).upper(), match.group(3)
    charset = charset.split("*", 1)[0]  # RFC 2231 §5: charset*language
    try:
        if encoding == "B":
            if not re.fullmatch(r"[A-Za-z0-9+/]*=*", payload):
                raise ValueError("not base64")
            data = binascii.a2b_base64(payload + "=" * (-len(payload) % 4))
        else:  # RFC 2047 §4.2: "_" is a space in Q encoding
            data = binascii.a2b_qp(payload.encode("utf-8"), header=True)
    except (binascii.Error, ValueError):
        defects.append(f"{where}: corrupt encoded-word kept as is")
        return match.group(0)
    return _decode_bytes(data, charset, defects, where)


def decode_header_value(
    value: str, defects: list[str] | None = None, name: str = "header", *, words: bool = True
) -> str:
    """Decode an unfolded header value (8-bit bytes and, with ``words``, RFC 2047 words) to clean text, losing
    nothing."""
    sink: list[str] = [] if defects is None else defects
    where = f"header {name}"
    text = _eight_bit(value, sink, where)
    if words and "=?" in text:
        text = _BETWEEN_WORDS.sub("", text)  # RFC 2047 §6.2: whitespace between adjacent words is dropped
        text = _ENCODED_WORD.sub(lambda m: _decode_word(m, sink, where), text)
    return _clean(text)


def _first(headers: dict[str, list[str]], name: str) -> str:
    values = headers.get(name)
    return values[0] if values else ""


def _addresses(fields: list[tuple[str, Any]], name: str, defects: list[str]) -> tuple[Address, ...]:
    """Mailboxes of every ``name`` header (at most ``MAX_ADDRESSES``): structure by mail-parser, then display
    names decoded here."""
    result: list[Address] = []
    for field_name, raw in fields:  # raw: get_all() would turn 8-bit bytes into U+FFFD
        if field_name.lower() != name:
            continue
        where = f"header {field_name}"
        # Parse structure before decoding encoded words: a decoded name may contain "," or "<".
        # Charset defects were already reported when the header was decoded for ``headers``.
        value = _eight_bit(_unfold(str(raw)), [], where)
        found: list[dict[str, Any]] = []
        for display, addr in get_addresses(value, defects=found):
            if addr:
                # An encoded word may decode to CR or LF: a display name is one line (it is written into replies).
                name = " ".join(decode_header_value(display).split())
                result.append(Address(name, canonical_address(_clean(addr))))
        defects.extend(f"{where}: {item.get('reason')}: {_clean(str(item.get('raw')))[:200]}" for item in found[:20])
    if len(result) > MAX_ADDRESSES:
        defects.append(f"header {name}: {len(result)} addresses, kept the first {MAX_ADDRESSES}")
    return tuple(result[:MAX_ADDRESSES])


def _first_id(value: str) -> str | None:
    for match in _MSG_ID.finditer(value):  # the first only: an In-Reply-To of 80,000 ids is not all read
        clean = re.sub(r"\s+", "", match.group(0))
        if clean != "<>":
            return clean
    ids = _all_ids(value)
    return ids[0] if ids else None


def _all_ids(value: str) -> tuple[str, ...]:
    """Message ids with angle brackets and no whitespace (RFC 5322 §3.6.4); bare ids get brackets. Linear in
    the value: duplicates are dropped through a dict (issue 30: a list made 80,000 ids take minutes)."""
    found = _MSG_ID.findall(value) or [f"<{token.strip('<>')}>" for token in value.split() if token.strip("<>")]
    ids = dict.fromkeys(re.sub(r"\s+", "", found_id) for found_id in found)
    ids.pop("<>", None)
    return tuple(ids)


# --- date, body, attachments ------------------------------------------------------------------------


def _date(value: str, parsed: Any, internal_date: datetime | None, defects: list[str]) -> datetime | None:
    """The Date header as aware UTC (naive means -0000, RFC 5322 §3.3); else the server's internal date."""
    candidate: datetime | None = None
    if value:
        try:
            candidate = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError, IndexError):
            candidate = parsed.date  # mail-parser's own, more lenient date parser
        if candidate is None:
            defects.append(f"unparseable Date: {value[:80]}")
    if candidate is None:
        candidate = internal_date
    if candidate is None:
        return None
    if candidate.tzinfo is None:
        return candidate.replace(tzinfo=UTC)
    return candidate.astimezone(UTC)


def _normalise_newlines(text: str) -> str:
    return _clean(text.replace("\r\n", "\n").replace("\r", "\n")).strip("\n")


def _body_text(parsed: Any, defects: list[str]) -> str:
    """The text/plain parts; else the HTML parts as text (script and style content dropped)."""
    plain = [part for part in parsed.text_plain if part.strip()]
    if plain:
        return _normalise_newlines("\n\n".join(plain))
    html = "\n".join(part for part in parsed.text_html if part.strip())
    return html_to_text(html, defects) if html else ""


def html_to_text(html: str, defects: list[str]) -> str:
    """HTML as plain text (script and style content dropped), its cost bounded: the head of a huge page only,
    deep nesting flattened. What was cut is said in ``defects``."""
    if len(html) > MAX_HTML_CHARS:  # html2text converts 0.15 MB/s of tag soup: bound the cost (~3 s)
        html = html[:MAX_HTML_CHARS]
        defects.append(f"HTML longer than {MAX_HTML_CHARS} chars: converted the head only")
    converter = html2text.HTML2Text()
    converter.body_width = 0  # no hard wrapping: the text goes to a model, not a terminal
    converter.ignore_images = True
    converter.unicode_snob = True
    return _normalise_newlines(converter.handle(_flatten_nesting(html))).strip()


def _flatten_nesting(html: str) -> str:
    """Drop list and quote tags nested deeper than ``MAX_HTML_NESTING``.

    html2text indents every line by its nesting depth, so its output grows with depth x lines:
    8,000 nested ``<ul><li>`` (64 kB) become 64 MB of text in 20 s.
    """
    depth = 0

    def keep(match: re.Match[str]) -> str:
        nonlocal depth
        if match.group(1):  # closing tag
            depth = max(depth - 1, 0)
            return match.group(0) if depth < MAX_HTML_NESTING else ""
        depth += 1
        return match.group(0) if depth <= MAX_HTML_NESTING else ""

    return _NESTING_TAG.sub(keep, html)


def strip_reply(full_text: str, defects: list[str] | None = None) -> str:
    """The newest reply only: quoted history, reply headers and signature removed (mail-parser-reply)."""
    head = full_text
    if len(head) > MAX_REPLY_SCAN_CHARS:
        head = head[:MAX_REPLY_SCAN_CHARS]
        if defects is not None:
            defects.append(f"text longer than {MAX_REPLY_SCAN_CHARS} chars: reply taken from the head only")
    long_lines: list[str] = []

    def mask(line: str) -> str:
        line = line.strip()  # the library strips every line too
        if len(line) <= MAX_SCAN_LINE_CHARS:
            return line
        long_lines.append(line)
        return f"\x00{len(long_lines) - 1}\x00"  # NUL never survives _clean, so it cannot be mail text

    # Runs of blank lines are collapsed: its "\s*^" patterns are quadratic in them (20k newlines: 50 s).
    masked = re.sub(r"\n{3,}", "\n\n", "\n".join(mask(line) for line in head.split("\n")))
    # EmailMessage rather than EmailReplyParser: only it can keep "- item" lists (keep_hyphen_lists);
    # the parser's default takes a line starting with "- " for a signature and drops the rest of the mail.
    message = ReplyMessage(text=masked, languages=list(REPLY_LANGUAGES), keep_hyphen_lists=True).read()
    body = message.replies[0].body if message.replies else ""
    body = re.sub(r"\x00(\d+)\x00", lambda m: long_lines[int(m.group(1))], body)
    return _drop_trailing_quote(_cut_at_attribution(body)) or head.strip()


# Attribution lines the library misses (its Spanish pattern can never match; Dutch Gmail puts "schreef"
# before the name): (start, keywords), checked on a lower-cased line that ends with ":".
_ATTRIBUTIONS = (
    ("on ", ("wrote",)),
    ("am ", ("schrieb",)),
    ("le ", ("a écrit",)),
    ("el ", ("escribió",)),
    ("il ", ("ha scritto",)),
    ("op ", ("schreef", "geschreven")),
)


def _cut_at_attribution(text: str) -> str:
    """Cut at an attribution line ("El … escribió:") that is followed by quoted (``>``) lines."""
    lines = text.split("\n")
    for index in range(1, len(lines)):
        line = lines[index].strip().lower()
        if len(line) > MAX_SCAN_LINE_CHARS or not line.endswith(":"):
            continue
        if not any(line.startswith(start) and any(k in line for k in keys) for start, keys in _ATTRIBUTIONS):
            continue
        following = next((rest.strip() for rest in lines[index + 1 :] if rest.strip()), "")
        if following.startswith(">"):
            return "\n".join(lines[:index]).strip()
    return text


def _drop_trailing_quote(text: str) -> str:
    """Remove a quoted block (``>`` lines) at the end that came without an attribution line."""
    lines = text.split("\n")
    end = len(lines)
    while end and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith(">")):
        end -= 1
    return "\n".join(lines[:end]).strip() if end else text.strip()


def _attachments(items: list[dict[str, Any]]) -> tuple[Attachment, ...]:
    """mail-parser's attachments: name, type, decoded size and bytes (quinn/documents reads them)."""
    result: list[Attachment] = []
    for index, item in enumerate(items, start=1):
        name = _clean(str(item.get("filename") or ""))
        disposition = str(item.get("content-disposition") or "").lower()
        content_type = str(item.get("mail_content_type") or "application/octet-stream").lower()
        if not item.get("content-id") and "name" not in disposition and _INVENTED_NAME.match(name):
            # mail-parser invents a random name for unnamed parts; keep parsing deterministic. A forwarded
            # mail (message/rfc822, RFC 2046 §5.2.1) is named as one, not as the .txt it is invented as.
            name = (f"forwarded-{index}.eml" if content_type == "message/rfc822"
                    else f"unnamed-{index}.{name.rsplit('.', 1)[1]}")  # fmt: skip
        payload = str(item.get("payload") or "")
        if item.get("binary"):
            try:
                data = base64.b64decode("".join(payload.split()), validate=False)
            except ValueError:  # broken base64: the part is kept as an unreadable file, not a lost mail
                data = b""
        else:
            data = payload.encode("utf-8", "replace")
        result.append(Attachment(filename=name, content_type=content_type, size=len(data), data=data))
    return tuple(result)
