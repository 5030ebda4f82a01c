"""Hypothesis strategies for hostile MIME: random structure, charsets, header encodings, transfer encodings, sizes.

Hypothesis draws a seed and a ``random.Random`` builds the mail from it: drawing every byte through
Hypothesis was 10x slower than parsing, and a seed reproduces a failing case exactly. The generator writes
bytes by hand (not through ``email.message``), so it can produce what real senders get
wrong: unknown charsets, broken encoded words, raw 8-bit headers, missing or mismatched boundaries, truncated
parts, bogus transfer encodings, NUL bytes, enormous lines.
"""

from __future__ import annotations

import base64
import quopri
import random

from hypothesis import strategies as st

CHARSETS = ["utf-8", "iso-8859-1", "windows-1252", "koi8-r", "shift_jis", "gb2312", "utf-16", "x-unknown",
            "utf8", "latin1", "", "us-ascii", "iso-2022-jp", "bogus\x00set"]  # fmt: skip
HEADER_NAMES = ["Subject", "From", "To", "Cc", "Reply-To", "Message-ID", "In-Reply-To", "References", "Date",
                "Content-Type", "Content-Transfer-Encoding", "Auto-Submitted", "List-Id", "Precedence",
                "Authentication-Results", "Return-Path", "X-Weird", "Received"]  # fmt: skip
ENCODINGS = ["7bit", "8bit", "base64", "quoted-printable", "binary", "x-uuencode", "b64", ""]


ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()<>@[]\\=-_\t",
    "äöüßéèêàçñÅØÆœłżćčšžřőű€£¥",
    "Привет мир ж",
    "日本語のテキスト、中文文本",
    "العربية עברית",
    "\u200b\u200e\u202e\ufeff\u0000\u00ad",
    "🙂🚀👍🏽",
    "=?_\r\n",
]


def text(rng: random.Random, max_size: int = 300) -> str:
    """Random text mixing scripts, control and bidi characters (never lone surrogates: they cannot be sent)."""
    alphabet = "".join(rng.sample(ALPHABETS, rng.randint(1, 3)))
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_size)))


def _encode(text_: str, charset: str) -> bytes:
    try:
        return text_.encode(charset or "utf-8", errors="replace")
    except (LookupError, ValueError):
        return text_.encode("utf-8", errors="replace")


def _encode_body(text_: str, charset: str, encoding: str, garble: bool) -> bytes:
    raw = _encode(text_, charset)
    if encoding in ("base64", "b64"):
        out = base64.encodebytes(raw)
        return out[: len(out) // 2] + b"!!" if garble else out
    if encoding == "quoted-printable":
        out = quopri.encodestring(raw)
        return out + b"=Z" if garble else out
    return raw


def encoded_word(rng: random.Random) -> str:
    """An RFC 2047 encoded word, sometimes broken."""
    charset = rng.choice(CHARSETS)
    raw = _encode(text(rng, 60), charset)
    kind = rng.choice("BQX")
    payload = base64.b64encode(raw).decode() if kind == "B" else quopri.encodestring(raw, header=True).decode()
    if rng.random() < 0.3:
        payload = payload[: max(0, len(payload) - rng.randint(1, 5))]
    return f"=?{charset}?{kind}?{payload}?="


def _token(rng: random.Random, alphabet: str, max_size: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_size)))


def header_value(rng: random.Random) -> bytes:
    """A header value: plain, encoded words, raw 8-bit in some charset, addresses, ids, or junk."""
    kind = rng.choice(["plain", "encoded", "raw8bit", "address", "ids", "junk", "long"])
    if kind == "encoded":
        return " ".join(encoded_word(rng) for _ in range(rng.randint(1, 3))).encode("ascii", "replace")
    if kind == "raw8bit":
        return text(rng, 80).encode(rng.choice(["utf-8", "latin-1", "cp1252", "koi8-r"]), errors="replace")
    if kind == "address":
        name = text(rng, 30).replace("\n", " ").replace("\r", " ")
        local = _token(rng, "abcxyz019._+-", 12)
        domain = _token(rng, "abcdexyz09.-", 12)
        return f'"{name}" <{local}@{domain}>, {local}@{domain}'.encode("utf-8", "replace")
    if kind == "ids":
        return " ".join(f"<{_token(rng, 'abcz019.@$-', 20)}>" for _ in range(rng.randint(0, 30))).encode()
    if kind == "junk":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))).replace(b"\r", b"").replace(b"\n", b" ")
    if kind == "long":
        return b"x" * rng.randint(900, 20_000)
    return text(rng, 80).encode("utf-8", "replace").replace(b"\r", b"").replace(b"\n", b" ")


def headers(rng: random.Random, content_type: bytes | None = None) -> list[bytes]:
    lines = []
    for _ in range(rng.randint(0, 12)):
        lines.append(rng.choice(HEADER_NAMES).encode() + b": " + header_value(rng))
        if rng.random() < 0.1:
            lines.append(b"\t" + header_value(rng))  # folded continuation
    if content_type is not None:
        lines.append(b"Content-Type: " + content_type)
    return lines


def mime_part(rng: random.Random, depth: int = 0) -> bytes:
    """One MIME entity: a leaf with some body, or a multipart of sub-entities (sometimes malformed)."""
    if depth < 4 and rng.random() < 0.25:
        boundary = _token(rng, "AZaz09'()+_,./:=? -", 40).strip() or "b"
        subtype = rng.choice(["mixed", "alternative", "related", "report", "signed", "digest"])
        ctype = f'multipart/{subtype}; boundary="{boundary}"'.encode()
        if rng.random() < 0.1:
            ctype = f"multipart/{subtype}".encode()  # boundary missing
        parts = [mime_part(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        body = b"".join(b"--" + boundary.encode() + b"\n" + p + b"\n" for p in parts)
        if rng.random() < 0.5:
            body += b"--" + boundary.encode() + b"--\n"  # closed; otherwise truncated
        return b"\n".join(headers(rng, ctype)) + b"\n\n" + body
    charset = rng.choice(CHARSETS)
    subtype = rng.choice(["plain", "html", "calendar", "rfc822-headers", "octet-stream", "x-junk"])
    maintype = "application" if subtype == "octet-stream" else "text"
    encoding = rng.choice(ENCODINGS)
    body_text = text(rng, rng.choice([0, 50, 300, 5000]))
    if subtype == "html":
        body_text = f"<html><body><p>{body_text}</p>{'<div>' * rng.randint(0, 40)}</body></html>"
    body = _encode_body(body_text, charset, encoding, rng.random() < 0.5)
    head = headers(rng, f"{maintype}/{subtype}; charset={charset}".encode("utf-8", "replace"))
    if encoding:
        head.append(b"Content-Transfer-Encoding: " + encoding.encode())
    if rng.random() < 0.15:
        head.append(b'Content-Disposition: attachment; filename="' + header_value(rng)[:60] + b'"')
    return b"\n".join(head) + b"\n\n" + body


def build_mail(seed: int) -> bytes:
    """A whole message from a seed; line endings mixed, sometimes NUL bytes, sometimes cut short."""
    rng = random.Random(seed)
    raw = mime_part(rng)
    if rng.random() < 0.5:
        raw = raw.replace(b"\n", b"\r\n")
    if rng.random() < 0.1:
        raw = raw.replace(b"a", b"a\x00", 3)
    if rng.random() < 0.1:
        raw = raw[: rng.randint(0, len(raw))]
    return raw


def hostile_mail() -> st.SearchStrategy[bytes]:
    """Hypothesis strategy: a seed, turned into a hostile mail."""
    return st.integers(min_value=0, max_value=2**63).map(build_mail)


# --- header floods (issue 30): counts an attacker chooses ---------------------------------------------------


def _ids(rng: random.Random, count: int) -> bytes:
    """``count`` message ids, some repeated, some bare, some folded over lines, with junk between them."""
    ids = []
    for n in range(count):
        if rng.random() < 0.02 and ids:
            ids.append(rng.choice(ids))  # repeats: de-duplication must stay linear
        elif rng.random() < 0.01:
            ids.append(f"bare{n}@{_token(rng, 'abz09', 6)}".encode())
        else:
            ids.append(f"<{n}.{_token(rng, 'abcz019.$-', 10)}@example.test>".encode())
    separators = [b" ", b",", b"\n ", b" (c) ", b"\t"]
    return b"".join(rng.choice(separators) + i for i in ids).lstrip(b" ,\n\t")


def _recipients(rng: random.Random, count: int) -> bytes:
    """``count`` addresses, some with encoded or 8-bit display names, some broken."""
    found = []
    for n in range(count):
        kind = rng.random()
        if kind < 0.2:
            found.append(f"{encoded_word(rng)} <u{n}@example.test>".encode("ascii", "replace"))
        elif kind < 0.3:
            found.append(text(rng, 20).encode("utf-8", "replace").replace(b"\n", b" ") + b" <u%d@ex.test>" % n)
        elif kind < 0.35:
            found.append(b"<broken%d@" % n)
        else:
            found.append(b"u%d@example.test" % n)
    return b",\n ".join(found)


def build_header_flood(seed: int) -> bytes:
    """A mail whose header fields carry many ids, many recipients and many encoded words, in any mix."""
    rng = random.Random(seed)
    big = rng.choice([10, 200, 3_000, 20_000])  # how many of the thing that floods
    lines = [b"From: " + (_recipients(rng, rng.choice([1, 3, big])) if rng.random() < 0.3 else b"a@example.test")]
    lines += [b"To: " + _recipients(rng, rng.choice([1, big])), b"Cc: " + _recipients(rng, rng.choice([0, big]))]
    lines += [b"Reply-To: " + _recipients(rng, rng.choice([1, big // 10 + 1]))]
    lines += [b"Message-ID: " + _ids(rng, rng.choice([1, 2, big]))]
    lines += [b"In-Reply-To: " + _ids(rng, rng.choice([1, big]))]
    lines += [b"References: " + _ids(rng, rng.choice([0, 5, big, big * 4])) for _ in range(rng.randint(1, 3))]
    lines += [
        b"Subject: "
        + b" ".join(encoded_word(rng).encode("ascii", "replace") for _ in range(rng.choice([1, big // 10 + 1])))
    ]
    lines += [b"X-Filler-%d: " % n + header_value(rng) for n in range(rng.choice([0, big // 4]))]
    rng.shuffle(lines)
    raw = b"\n".join(lines) + b"\n\n" + text(rng, 200).encode("utf-8", "replace")
    return raw.replace(b"\n", b"\r\n") if rng.random() < 0.5 else raw


def header_flood() -> st.SearchStrategy[bytes]:
    """Hypothesis strategy: a seed, turned into a mail with floods of ids, recipients and encodings."""
    return st.integers(min_value=0, max_value=2**63).map(build_header_flood)
