"""Sender authentication from our own server's Authentication-Results (RFC 8601). Pure functions.

Quinn does not verify DKIM or SPF itself: the receiving server (the MX) does, and writes what it found in an
Authentication-Results field under its authserv-id. Such a field is only worth something if the sender cannot
have written it, so Quinn counts a field only when

- it carries our authserv-id (RFC 8601 §5: fields of other ADMDs are ignored), and
- it sits where our server puts it: above the first ``received_above_stamp + 1`` Received fields, reading from
  the top. Fields the sender wrote come below the Received field our MX added on arrival, so a field with our id
  further down (RFC 8601 §5, §7.2: "forged" fields) or one in a mail our server never stamped is ignored.
  The MX must still remove incoming fields that claim our id (RFC 8601 §5); the position check is the second lock.

Exchange Online (Microsoft 365, Outlook.com) breaks RFC 8601 §2.2 and writes its field without an authserv-id
(``Authentication-Results: spf=pass (sender IP is …) smtp.mailfrom=…; dkim=pass …;dmarc=pass action=none
header.from=…;compauth=pass reason=100``), so no id can name it. For such a server (``policy.idless_stamp``)
the position alone must do it, and is made strict: only the topmost Authentication-Results field of the whole
mail counts, only if it has no authserv-id, and only with exactly ``received_above_stamp`` Received fields
above it (``read_idless_stamp``). Exchange stamps every mail that enters from outside, above the Received field
of its front door, so whatever the sender wrote sits below that stamp and is never read.

The verdict uses the server's own DMARC result when it gave one: a ``dmarc=fail`` is final, whatever DKIM said,
because only the server knows the domain's policy and organisational domain. Without a DMARC result, a DKIM pass
whose signing domain aligns with the From domain counts (RFC 7489 §3.1.1, relaxed); SPF alone never does: it
vouches for the envelope sender, which the From field need not match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import authres  # type: ignore[import-untyped]

Result = tuple[str, str, dict[str, str]]  # (method, result, {"header.d": "example.com", …})
TraceField = tuple[str, str]  # (lower-cased name, value), topmost first: "received" and "authentication-results"


@dataclass(frozen=True)
class Stamp:
    """What our server said about one mail: the results it stamped, and what was ignored and why."""

    results: tuple[Result, ...]
    found: bool  # a field with our authserv-id in the trusted position
    ignored: tuple[str, ...] = ()  # fields with our id that did not count, each with the reason


def read_stamp(trace: Sequence[TraceField], ours: str, received_above_stamp: int = 0) -> Stamp:
    """The results of the Authentication-Results fields of ``ours`` that our server added.

    ``trace`` holds the Received and Authentication-Results fields in message order. A field of ours counts
    while at most ``received_above_stamp`` Received fields were above it; one below that, or one that cannot
    be read, does not.
    """
    ours = ours.strip().lower()
    if not ours:  # "" would match every field without an id: those are read_idless_stamp's, by position alone
        return Stamp((), False)
    results: list[Result] = []
    ignored: list[str] = []
    found = False
    received = 0
    for name, value in trace:
        if name == "received":
            received += 1
            continue
        if name != "authentication-results" or authserv_id(value) != ours:
            continue
        if received > received_above_stamp:
            ignored.append(f"a field with our id below {received} Received field(s)")
            continue
        parsed = parse_authentication_results(value)
        if parsed is None:
            ignored.append("an unreadable field with our id")
            continue
        found = True
        results.extend(parsed)
    return Stamp(tuple(results), found, tuple(ignored))


def read_idless_stamp(trace: Sequence[TraceField], received_above_stamp: int) -> Stamp:
    """The results of an Exchange Online stamp: the topmost Authentication-Results field, if it has no
    authserv-id and exactly ``received_above_stamp`` Received fields sit above it; nothing otherwise."""
    position, value = _topmost(trace)
    if value is None:
        return Stamp((), False)
    named = authserv_id(value)
    if named:
        return Stamp((), False, (f"the topmost field names {named}, not an id-less Exchange Online stamp",))
    if position != received_above_stamp:
        return Stamp((), False, (f"the topmost field sits below {position} Received field(s), not "
                                 f"{received_above_stamp} (policy.received_above_stamp)",))  # fmt: skip
    # A stand-in id lets the one parser read it; the id was checked above and plays no part from here.
    parsed = parse_authentication_results("exchange-online; " + value)
    if parsed is None:
        return Stamp((), False, ("an unreadable topmost field",))
    return Stamp(tuple(parsed), True)


def idless_stamp_position(trace: Sequence[TraceField]) -> int | None:
    """How many Received fields sit above the topmost Authentication-Results field when it has no authserv-id
    (None: there is none, or it names an id): what ``quinn check`` measures for ``policy.idless_stamp``."""
    position, value = _topmost(trace)
    return position if value is not None and not authserv_id(value) else None


def _topmost(trace: Sequence[TraceField]) -> tuple[int, str | None]:
    received = 0
    for name, value in trace:
        if name == "received":
            received += 1
        elif name == "authentication-results":
            return received, value
    return received, None


def verdict(stamp: Stamp, from_domain: str) -> tuple[bool, str]:
    """Whether our server vouched for ``from_domain``, and why (or why not)."""
    from_domain = from_domain.strip().lower()
    if not stamp.found:
        return False, "no Authentication-Results from our server" + (f" ({stamp.ignored[0]})" if stamp.ignored else "")
    # Microsoft's composite verdict on the From domain: whatever DMARC said, a compauth other than pass is final.
    for method, result, _props in stamp.results:
        if method == "compauth" and result != "pass":
            return False, f"compauth={result}"
    dmarc = [(r, p) for m, r, p in stamp.results if m == "dmarc"]
    if dmarc:
        for result, _props in dmarc:
            if result != "pass":
                return False, f"dmarc={result}"
        named = {p.get("header.from", "").strip().lower() for _, p in dmarc}
        if named == {from_domain}:
            return True, f"dmarc=pass header.from={from_domain}"
        return False, f"dmarc=pass names header.from={','.join(sorted(named)) or 'nothing'}, not {from_domain}"
    for method, result, props in stamp.results:
        if method == "dkim" and result == "pass":
            signer = props.get("header.d") or props.get("header.i", "").rpartition("@")[2]
            if signer and aligned(signer, from_domain):
                return True, f"dkim=pass header.d={signer.lower()}"
    seen = ", ".join(f"{m}={r}" for m, r, _ in stamp.results) or "none"
    return False, f"no DMARC pass and no DKIM pass aligned with {from_domain} ({seen}; SPF alone does not count)"


def failed(stamp: Stamp, from_domain: str) -> str | None:
    """Why our server marked the sender of ``from_domain`` as failing, or None when it did not (a pass, or no
    verdict: no stamp, dmarc=none, a temporary error). A ``dmarc=fail`` (RFC 7489 §11.2) is one; without any DMARC
    result, an ``spf=fail`` for an envelope sender of the From domain (or aligned with it) is the domain's own
    policy saying this host may not send its mail (RFC 7208 §2.6.4). Such a From is most likely forged: a reply
    to it is backscatter."""
    from_domain = from_domain.strip().lower()
    if not stamp.found:
        return None
    dmarc = [r for m, r, _ in stamp.results if m == "dmarc"]
    if dmarc:
        return "dmarc=fail" if "fail" in dmarc else None
    for method, result, props in stamp.results:
        if method == "spf" and result == "fail":
            envelope = props.get("smtp.mailfrom", "").strip("<>").rpartition("@")[2] or props.get("smtp.helo", "")
            if envelope and aligned(envelope, from_domain):
                return f"spf=fail smtp.mailfrom={envelope.lower()}"
    return None


def aligned(domain: str, from_domain: str) -> bool:
    """Relaxed alignment (RFC 7489 §3.1): equal, or one a subdomain of the other.

    Without the Public Suffix List, "same organisational domain" is approximated by the subdomain relation;
    the shorter name must have at least two labels so a bare TLD never aligns. Only used when the server gave
    no DMARC result of its own.
    """
    a, b = domain.strip().strip(".").lower(), from_domain.strip().strip(".").lower()
    if not a or not b:
        return False
    if a == b:
        return True
    shorter, longer = sorted((a, b), key=len)
    return "." in shorter and longer.endswith("." + shorter)


def stamp_position(trace: Sequence[TraceField], ours: str) -> int | None:
    """How many Received fields sit above the topmost field of ``ours`` (None: there is none): what
    ``policy.received_above_stamp`` must be for this server's layout. ``quinn check`` reads it off real mail."""
    ours = ours.strip().lower()
    received = 0
    for name, value in trace:
        if name == "received":
            received += 1
        elif name == "authentication-results" and authserv_id(value) == ours:
            return received
    return None


def topmost_ids(trace: Sequence[TraceField]) -> list[str]:
    """The authserv-ids of the Authentication-Results fields above the third Received field: the candidates
    for our own server's id, for ``quinn check`` to suggest."""
    ids: list[str] = []
    received = 0
    for name, value in trace:
        if name == "received":
            received += 1
            if received > 2:
                break
        elif name == "authentication-results":
            found = authserv_id(value)
            if found and found not in ids:
                ids.append(found)
    return ids


def authserv_id(field_value: str) -> str:
    """The authserv-id of an Authentication-Results value (RFC 8601 §2.2), lower-cased; "" if none.

    A value that opens with a result (``spf=pass …``, as Exchange Online writes it) has none: "=" cannot be
    part of a token (RFC 2045 tspecials), so a first word holding one is a method, not an id.
    """
    text = _strip_comments(field_value).strip()
    match = re.match(r'"((?:[^"\\]|\\.)*)"|([^\s;]+)', text)
    if not match:
        return ""
    if match.group(1) is not None:
        return match.group(1).lower()
    word = match.group(2)
    return "" if "=" in word or text[match.end() :].lstrip().startswith("=") else word.lower()


def parse_authentication_results(field_value: str) -> list[Result] | None:
    """The results of one Authentication-Results value: authres first, our own tolerant parser second.

    authres is strict: it refuses a trailing ";" and ``smtp.mailfrom=<a@b>``, both seen from real servers.
    """
    try:
        header = authres.AuthenticationResultsHeader.parse_value(field_value)
        return [
            (r.method.lower(), str(r.result).lower(), {f"{p.type}.{p.name}": str(p.value) for p in r.properties})
            for r in header.results
        ]
    except Exception:  # authres raises its own SyntaxError and sometimes plain errors: use the fallback
        return parse_results_fallback(field_value)


_METHOD = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9_-]*)(?:\s*/\s*\d+)?\s*=\s*([A-Za-z0-9_-]+)")
_PROPERTY = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s"]*)')


def parse_results_fallback(field_value: str) -> list[Result] | None:
    """A tolerant parser for RFC 8601 §2.2 resinfo: ``method=result reason=… ptype.property=value``.

    Comments are removed first; quoted strings are consumed whole, so a ``reason="… header.d=x"`` can never
    inject a property. Returns None when not even the authserv-id is there.
    """
    pieces = _split_outside_quotes(_strip_comments(field_value), ";")
    if not pieces or not pieces[0].strip():
        return None
    results: list[Result] = []
    for piece in pieces[1:]:
        method = _METHOD.match(piece)
        if not method:
            continue  # "none", empty pieces after a trailing ";", or junk
        props: dict[str, str] = {}
        pos = method.end()
        while pos < len(piece):
            prop = _PROPERTY.match(piece, pos)
            if not prop or prop.end() == pos:
                nxt = re.compile(r"\S*\s*").match(piece, pos)  # skip one unreadable word
                pos = nxt.end() if nxt and nxt.end() > pos else pos + 1
                continue
            key, value = prop.group(1).lower(), prop.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            if "." in key:  # "reason" and unknown bare keys are not properties
                props.setdefault(key, value)
            pos = prop.end()
        results.append((method.group(1).lower(), method.group(2).lower(), props))
    return results


def _strip_comments(text: str) -> str:
    """Remove RFC 5322 comments (nested parentheses) outside quoted strings."""
    out: list[str] = []
    depth, quoted, escaped = 0, False, False
    for ch in text:
        if escaped:
            escaped = False
            if not depth:
                out.append(ch)
        elif ch == "\\":
            escaped = True
            if not depth:
                out.append(ch)
        elif ch == '"' and not depth:
            quoted = not quoted
            out.append(ch)
        elif ch == "(" and not quoted:
            depth += 1
        elif ch == ")" and depth and not quoted:
            depth -= 1
            if not depth:
                out.append(" ")
        elif not depth:
            out.append(ch)
    return "".join(out)


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts
