"""What Quinn does with one inbound email: handle it, ignore it, or reject it. Pure functions on plain data.

The order of the checks matters and is the order of ``decide``: our own mail and loops first, then everything
an auto-responder must never answer (RFC 3834 and practice), then addressing, the allowlist and sender
authentication (RFC 8601).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import getaddresses, parseaddr
from typing import Literal

import authres  # type: ignore[import-untyped]

from quinn.config import Config
from quinn.errors import ConfigError
from quinn.mailbox.message import InboundEmail

Action = Literal["handle", "ignore", "reject"]

#: More Received fields than this means the mail is circling (RFC 5321 §6.3 suggests a limit of 100;
#: real mail has < 15 hops, so 30 catches a loop early).
MAX_RECEIVED = 30
#: Fields that mark list or bulk mail: RFC 2919 (List-Id), RFC 2369 (List-Unsubscribe, List-Post), and
#: Google's Feedback-ID for bulk senders. RFC 3834 §2: do not auto-respond to list mail.
LIST_HEADERS = ("List-Id", "List-Unsubscribe", "List-Post", "Feedback-ID")
#: Fields set by vacation programs that do not send Auto-Submitted.
AUTOREPLY_HEADERS = ("X-Autoreply", "X-Autorespond")

# Local parts of robots (postmaster: RFC 5321 §4.5.1; MAILER-DAEMON, no-reply, bounces: convention), as a
# whole word of the local part: "noreply", "no-reply-orders", "github-noreply", "bounces+123".
_ROBOT_WORDS = r"mailer-daemon|postmaster|no[-_.]?reply|do[-_.]?not[-_.]?reply|bounces?"
_ROBOT_LOCAL = re.compile(rf"(?:^|[-_.+])(?:{_ROBOT_WORDS})(?:$|[-_.+])", re.IGNORECASE)
# Reply and forward prefixes in English, German (AW, WG), Nordic (SV, VS), Dutch (Antw), French (TR),
# Spanish/Italian (RV), including counted forms "Re[2]:" / "Re(2):" and a full-width colon.
_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|aw|wg|sv|vs|antw|tr|rv)\s*(?:\[\d+\]|\(\d+\))?\s*[:：]\s*)+", re.I)


@dataclass(frozen=True)
class Rules:
    """The operator's policy, built once from the config."""

    own_address: str
    allow: tuple[str, ...] = ()  # addresses or bare domains; empty = everyone
    aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)  # main address -> other addresses
    require_authentication: bool = False
    authserv_id: str | None = None  # our receiving server's id in Authentication-Results
    unauthenticated: Literal["no_memory", "reject"] = "no_memory"
    loop_header: str = "X-Quinn-Loop"
    own_message_id_domain: str | None = None  # None: recognise only Quinn's own "<quinn.…@own domain>" ids

    @classmethod
    def from_config(cls, config: Config, loop_header: str) -> Rules:
        """The rules of ``[policy]``, for the address ``[smtp] from_address``."""
        p = config.policy
        return cls(own_address=config.smtp.from_address, allow=tuple(p.allow),
                   aliases={k.lower(): [a.lower() for a in v] for k, v in p.aliases.items()},
                   require_authentication=p.require_authentication, authserv_id=p.authserv_id,
                   unauthenticated=p.unauthenticated, loop_header=loop_header)  # fmt: skip

    def __post_init__(self) -> None:
        if self.unauthenticated not in ("no_memory", "reject"):
            hint = 'use "no_memory" or "reject"'
            raise ConfigError(f"policy.unauthenticated is {self.unauthenticated!r}", hint=hint)
        if "@" not in self.own_address:
            raise ConfigError(f"own address {self.own_address!r} is not an email address")


@dataclass(frozen=True)
class Decision:
    """The outcome for one email. ``user_id`` is set exactly when the action is "handle"."""

    action: Action
    reason: str
    user_id: str | None = None
    authenticated: bool = False
    use_memory: bool = False


def normalise_address(addr: str) -> str:
    """``"Alice <Alice@Example.COM> "`` -> ``alice@example.com``; plus tags are kept."""
    _name, parsed = parseaddr(addr.strip())
    return (parsed or addr).strip().lower()


def user_for(address: str, aliases: Mapping[str, Sequence[str]]) -> str:
    """The main address of the user who owns ``address`` (itself when it is no alias)."""
    addr = normalise_address(address)
    for main, others in aliases.items():
        if addr == normalise_address(main) or addr in {normalise_address(o) for o in others}:
            return normalise_address(main)
    return addr


def normalise_subject(subject: str) -> str:
    """Subject without reply/forward prefixes, whitespace collapsed, lower-cased: for matching threads."""
    return " ".join(_PREFIX.sub("", subject).split()).lower()


def reply_subject(subject: str) -> str:
    """Exactly one "Re: " before the subject without its prefixes (not "Re: AW: Re:")."""
    return f"Re: {' '.join(_PREFIX.sub('', subject).split())}".rstrip()


def decide(email: InboundEmail, rules: Rules) -> Decision:
    """Handle, ignore or reject one email; the reason is short enough for one log line."""
    reason = _ours(email, rules) or _never_reply(email)
    if reason:
        return Decision("ignore", reason)
    own = normalise_address(rules.own_address)
    if not any(_same_mailbox(normalise_address(a.address), own) for a in (*email.to, *email.cc)):
        return Decision("ignore", "not addressed to quinn")
    sender = normalise_address(email.sender or "")
    user_id = user_for(sender, rules.aliases)
    if not _allowed(sender, rules.allow) and not _allowed(user_id, rules.allow):
        return Decision("reject", f"not allowed: {sender}")
    ok, why = authenticated(email, rules) if rules.authserv_id else (False, "no authserv_id configured")
    if not rules.require_authentication:
        return Decision("handle", f"authentication not required ({why})", user_id, ok, use_memory=True)
    if ok:
        return Decision("handle", f"authenticated: {why}", user_id, True, use_memory=True)
    if rules.unauthenticated == "reject":
        return Decision("reject", f"sender not authenticated: {why}")
    return Decision("handle", f"sender not authenticated: {why}", user_id, False, use_memory=False)


def _same_mailbox(address: str, own: str) -> bool:
    """Equal, or equal once a plus tag is removed: quinn+work@ is delivered to quinn@ (RFC 5233 subaddress)."""
    if address == own:
        return True
    local, _, domain = address.rpartition("@")
    return f"{local.split('+', 1)[0]}@{domain}" == own


def _ours(email: InboundEmail, rules: Rules) -> str | None:
    """Mail we sent, or that carries our loop marker: answering it would start a loop."""
    own = normalise_address(rules.own_address)
    if email.sender and _same_mailbox(normalise_address(email.sender), own):
        return "own mail: From is quinn"
    if email.header(rules.loop_header) is not None:
        return f"own mail: {rules.loop_header} present"
    message_id = email.message_id.lower()
    if rules.own_message_id_domain:
        if message_id.endswith(f"@{rules.own_message_id_domain.lower()}>"):
            return "own mail: Message-ID in our domain"
    elif re.fullmatch(rf"<quinn\.[0-9a-f]{{32}}@{re.escape(own.rpartition('@')[2])}>", message_id):
        return "own mail: Message-ID is one of ours"
    return None


def _never_reply(email: InboundEmail) -> str | None:
    """RFC 3834 and common practice: mail an automatic responder must not answer."""
    # RFC 3834 §5.1: any Auto-Submitted value other than "no" marks machine-generated mail (§2: do not reply).
    auto = email.header("Auto-Submitted")
    if auto is not None:
        token = re.split(r"[\s;(]", auto.strip(), maxsplit=1)[0].lower()
        if token != "no":
            return f"auto-submitted: {token or 'empty'}"
    # Precedence bulk/list/junk: never standardised (RFC 2076 lists it), but the de-facto mass-mail marker.
    precedence = (email.header("Precedence") or "").strip().lower()
    if precedence in ("bulk", "list", "junk"):
        return f"precedence: {precedence}"
    for name in LIST_HEADERS:
        if email.header(name) is not None:
            return f"list mail: {name}"
    # RFC 5321 §4.5.5: notifications are sent with a null reverse-path (RFC 3834 §2: never answer them);
    # RFC 6522 multipart/report carries delivery (RFC 3464) and disposition (RFC 8098) notifications.
    return_path = email.header("Return-Path")
    if return_path is not None and re.fullmatch(r"<\s*>", return_path.strip()):
        return "bounce: null Return-Path"
    if email.content_type == "multipart/report":
        return "bounce: multipart/report"
    # RFC 5321 §4.5.1 (postmaster) and convention (MAILER-DAEMON, no-reply): robots, not people.
    if email.from_ is not None and _ROBOT_LOCAL.search(email.from_.address.rpartition("@")[0]):
        return f"automated sender: {email.from_.address}"
    # Microsoft's X-Auto-Response-Suppress ([MS-OXCMAIL]) asks responders not to answer this mail.
    suppress = {v.strip().lower() for v in (email.header("X-Auto-Response-Suppress") or "").split(",")}
    if suppress & {"all", "autoreply"}:
        return "auto-response suppressed: X-Auto-Response-Suppress"
    for name in AUTOREPLY_HEADERS:
        if email.header(name) is not None:
            return f"autoreply header: {name}"
    received = len(email.header_all("Received"))
    if received > MAX_RECEIVED:
        return f"mail loop: {received} Received headers"
    if email.from_ is None:
        return "no From"
    return None


def _allowed(address: str, allow: Sequence[str]) -> bool:
    """An empty allowlist admits everyone; entries are addresses or bare domains (exact, no subdomains)."""
    if not allow:
        return True
    domain = address.rpartition("@")[2]
    entries = (e.strip().lower() for e in allow)
    return any(entry == address or entry.lstrip("@") == domain for entry in entries)


# --- sender authentication (RFC 8601) ----------------------------------------------------------------


def authenticated(email: InboundEmail, rules: Rules) -> tuple[bool, str]:
    """Whether our own server vouched for the From domain, and why (or why not).

    RFC 8601 §5: only the topmost Authentication-Results field with our authserv-id counts. Fields further
    down, or with another authserv-id, may have been added by the sender and are ignored, even if an
    outside one sits above ours. A pass must be aligned with the From domain (DMARC, RFC 7489 §3.1).
    """
    if not rules.authserv_id:
        return False, "no authserv_id configured"
    from_fields = email.header_all("From")
    senders = {a.lower() for _, a in getaddresses(list(from_fields)) if "@" in a}
    if email.from_ is None or len(from_fields) != 1 or len(senders) > 1:
        return False, "not exactly one From address"  # RFC 7489 §6.6.1: such mail cannot be aligned
    from_domain = email.from_.address.rpartition("@")[2]
    ours = rules.authserv_id.strip().lower()
    field_value = next((v for v in email.header_all("Authentication-Results") if authserv_id(v) == ours), None)
    if field_value is None:
        return False, f"no Authentication-Results from {ours}"
    results = parse_authentication_results(field_value)
    if results is None:
        return False, f"unreadable Authentication-Results from {ours}"
    passes = [(method, props) for method, result, props in results if result == "pass"]
    for method, props in passes:
        if method == "dmarc" and props.get("header.from", "").lower() == from_domain:
            return True, f"dmarc=pass header.from={from_domain}"
    for method, props in passes:
        if method == "dkim":
            signer = props.get("header.d") or props.get("header.i", "").rpartition("@")[2]
            if signer and aligned(signer, from_domain):
                return True, f"dkim=pass header.d={signer.lower()}"
    for method, props in passes:
        mail_from = props.get("smtp.mailfrom", "").strip("<>").rpartition("@")[2]
        if method == "spf" and mail_from and aligned(mail_from, from_domain):
            return True, f"spf=pass smtp.mailfrom={mail_from.lower()}"
    seen = ", ".join(f"{m}={r}" for m, r, _ in results) or "none"
    return False, f"no pass aligned with {from_domain} ({seen})"


def aligned(domain: str, from_domain: str) -> bool:
    """Relaxed alignment (RFC 7489 §3.1): equal, or one a subdomain of the other.

    Without the Public Suffix List, "same organisational domain" is approximated by the subdomain relation;
    the shorter name must have at least two labels so a bare TLD never aligns. A pass for a shared parent
    such as co.uk cannot be forged: it needs control of that domain's DNS.
    """
    a, b = domain.strip().strip(".").lower(), from_domain.strip().strip(".").lower()
    if not a or not b:
        return False
    if a == b:
        return True
    shorter, longer = sorted((a, b), key=len)
    return "." in shorter and longer.endswith("." + shorter)


Result = tuple[str, str, dict[str, str]]  # (method, result, {"header.d": "example.com", …})


def authserv_id(field_value: str) -> str:
    """The authserv-id of an Authentication-Results value (RFC 8601 §2.2), lower-cased; "" if none."""
    text = _strip_comments(field_value).strip()
    match = re.match(r'"((?:[^"\\]|\\.)*)"|([^\s;]+)', text)
    if not match:
        return ""
    return (match.group(1) if match.group(1) is not None else match.group(2)).lower()


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
