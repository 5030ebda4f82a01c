"""What Quinn does with one inbound email: handle it, ignore it, or reject it. Pure functions on plain data.

The order of the checks matters and is the order of ``decide``: our own mail and loops first, then everything
an auto-responder must never answer (RFC 3834 and practice), then addressing, the sender's identity, the
allowlist and sender authentication (RFC 8601, quinn/mailbox/authresults.py).

No backscatter: mail whose sender our server marked ``fail`` (DMARC, or the domain's SPF policy) is rejected
unanswered unless the operator set ``answer_failed_senders``; a reply would go to the forged address.

Trust is decided here, once per mail, before anything reads memory. Memory (read or written, commands, exports,
purges) is used only for a trusted sender: one our own server authenticated (``trust = "authenticated"``, the
default), or anyone the From field names when the operator wrote ``trust = "insecure-from-header"``. Even a
trusted sender gets no memory in a reply that goes to a Reply-To of someone else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from quinn.config import Config
from quinn.errors import ConfigError
from quinn.mailbox.authresults import (
    Stamp,
    TraceField,
    failed,
    idless_stamp_position,
    read_idless_stamp,
    read_stamp,
    stamp_position,
    topmost_ids,
    verdict,
)
from quinn.mailbox.identity import (
    PlusAddressing,
    canonical_address,
    from_problem,
    name_poses_as_address,
    same_mailbox,
    user_for,
)
from quinn.mailbox.message import Address, InboundEmail

Action = Literal["handle", "ignore", "reject"]
Trust = Literal["authenticated", "insecure-from-header"]
INSECURE = "insecure-from-header"
#: The rate-cap key of mail from a sender nobody vouched for: forged mail never spends a real user's caps.
UNVERIFIED_PREFIX = "unverified:"

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
_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|aw|wg|sv|vs|antw|tr|rv)\s*(?:(?:\[\d+\]|\(\d+\))\s*)?[:：]\s*)+", re.I)


@dataclass(frozen=True)
class Rules:
    """The operator's policy, built once from the config."""

    own_address: str
    allow: tuple[str, ...] = ()  # addresses or bare domains; empty = everyone
    aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)  # main address -> other addresses
    trust: Trust = "authenticated"
    authserv_id: str | None = None  # our receiving server's id in Authentication-Results
    received_above_stamp: int = 0  # Received fields our own servers put above their Authentication-Results
    idless_stamp: bool = False  # our server (Exchange Online) writes no authserv-id: the topmost field, by position
    unauthenticated: Literal["no_memory", "reject"] = "no_memory"
    answer_failed_senders: bool = False  # answer mail whose sender our server marked fail (see sender_failed)
    plus_addressing: PlusAddressing = "separate"
    loop_header: str = "X-Quinn-Loop"
    own_message_id_domain: str | None = None  # None: recognise only Quinn's own "<quinn.…@own domain>" ids
    # `quinn import --vouch`: senders (addresses or bare domains) the operator vouches for in an archive, trusted
    # as if our server had authenticated them. Empty for live mail: only an import may vouch.
    vouched: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config, loop_header: str) -> Rules:
        """The rules of ``[policy]``, for the address ``[smtp] from_address``."""
        p = config.policy
        return cls(own_address=config.smtp.from_address, allow=tuple(p.allow), aliases=dict(p.aliases),
                   trust=p.trust, authserv_id=p.authserv_id, received_above_stamp=p.received_above_stamp,
                   idless_stamp=p.idless_stamp,
                   unauthenticated=p.unauthenticated, answer_failed_senders=p.answer_failed_senders,
                   plus_addressing=p.plus_addressing,
                   loop_header=loop_header)  # fmt: skip

    def __post_init__(self) -> None:
        if self.unauthenticated not in ("no_memory", "reject"):
            hint = 'use "no_memory" or "reject"'
            raise ConfigError(f"policy.unauthenticated is {self.unauthenticated!r}", hint=hint)
        if self.trust not in ("authenticated", INSECURE):
            raise ConfigError(f"policy.trust is {self.trust!r}", hint=f'use "authenticated" or "{INSECURE}"')
        if "@" not in self.own_address:
            raise ConfigError(f"own address {self.own_address!r} is not an email address")


@dataclass(frozen=True)
class Decision:
    """The outcome for one email.

    For "handle": ``sender`` is the canonical From address the reply goes to; ``user_id`` is the user whose
    memory this mail may use, set only for a trusted sender (None: a stranger, however the From field reads);
    ``use_memory`` says whether this reply may carry memory; ``withheld`` tells the sender, in the reply, why it
    does not. ``rate_key`` is the bucket of the rate caps: the user, or ``unverified:<address>``.
    """

    action: Action
    reason: str
    user_id: str | None = None
    authenticated: bool = False
    use_memory: bool = False
    sender: str | None = None
    withheld: str | None = None
    rate_key: str | None = None

    @property
    def trusted(self) -> bool:
        """The sender is the user the From field names (authenticated, or trusted by the insecure setting)."""
        return self.user_id is not None


def normalise_subject(subject: str) -> str:
    """Subject without reply/forward prefixes, whitespace collapsed, lower-cased: for matching threads."""
    return " ".join(_PREFIX.sub("", subject).split()).lower()


def reply_subject(subject: str) -> str:
    """Exactly one "Re: " before the subject without its prefixes (not "Re: AW: Re:")."""
    return f"Re: {' '.join(_PREFIX.sub('', subject).split())}".rstrip()


def decide(email: InboundEmail, rules: Rules, *, imported: bool = False) -> Decision:
    """Handle, ignore or reject one email; the reason is short enough for one log line.

    ``imported`` (`quinn import`): the mail comes from an archive the operator chose (a backlog, an old support
    address), so it need not be addressed to Quinn; every other rule holds as for live mail."""
    reason = _ours(email, rules) or _never_reply(email)
    if reason:
        return Decision("ignore", reason)
    own = rules.own_address
    if not imported and not any(same_mailbox(a.address, own) for a in (*email.to, *email.cc)):
        return Decision("ignore", "not addressed to quinn")
    problem = from_problem(email.header_all("From"))
    if problem:  # RFC 5322 §3.6: one From field with one mailbox; anything else names no single sender
        return Decision("reject", f"no single sender: {problem}")
    assert email.from_ is not None  # _never_reply ignores mail without From
    sender = canonical_address(email.from_.address)
    user = user_for(sender, rules.aliases, rules.plus_addressing)
    if not _allowed(sender, rules.allow) and not _allowed(user, rules.allow):
        return Decision("reject", f"not allowed: {sender}")
    ok, why = authenticated(email, rules)
    if not ok and rules.vouched and (_allowed(sender, rules.vouched) or _allowed(user, rules.vouched)):
        # The operator's word stands in for a check nobody made (an archive from before our server stamped
        # mail), never against one that failed: a forgery our server caught stays one in any archive.
        caught = sender_failed(email, rules)
        if caught is None:
            ok, why = True, f"vouched for by the operator at import ({why})"
        else:
            why += f"; vouched for by the operator, but our server found the sender forged ({caught})"
    if name_poses_as_address(email.from_.name, sender):
        why += f"; the display name poses as another address, bound to {sender}"
    trusted = ok or rules.trust == INSECURE
    if not trusted and rules.unauthenticated == "reject":
        return Decision("reject", f"sender not authenticated: {why}")
    forged = None if ok or rules.answer_failed_senders else sender_failed(email, rules)
    if forged:
        # No backscatter: a reply would go to the address the forger wrote. Recorded and filed, never answered.
        return Decision("reject", f"sender failed authentication ({forged}): not answered, a reply would go to a "
                        "forged address (policy.answer_failed_senders)")  # fmt: skip
    if not trusted:
        if _foreign(email.reply_to, sender, rules):
            # A stranger asking us to write to someone else: Quinn would be a relay for their text.
            return Decision("reject", f"sender not authenticated and Reply-To names someone else: {why}")
        return Decision("handle", f"sender not authenticated: {why}", None, False, use_memory=False,
                        sender=sender, withheld=UNVERIFIED_NOTE, rate_key=UNVERIFIED_PREFIX + sender)  # fmt: skip
    reason = f"authenticated: {why}" if ok else f"trusted by the From field alone ({INSECURE}; {why})"
    foreign = _foreign(email.reply_to, user, rules)
    if foreign:
        return Decision("handle", f"{reason}; no memory: the reply goes to {_some(foreign)}", user, ok,
                        use_memory=False, sender=sender, withheld=foreign_reply_to_note(foreign),
                        rate_key=user)  # fmt: skip
    return Decision("handle", reason, user, ok, use_memory=True, sender=sender, rate_key=user)


def decide_sent(email: InboundEmail, rules: Rules) -> Decision:
    """`quinn import --sent`: a mail the operator's side sent (a Sent folder), kept as the outbound side of its
    first To recipient's conversation. The operator vouches for the folder by naming it so; the text is theirs,
    not the recipient's, so it joins the recipient's threads and recall and is never learnt as their words. Mail
    an auto-responder sent, to a robot, or to someone the allowlist does not admit is not kept."""
    reason = _never_reply(email)
    if reason:
        return Decision("ignore", reason)
    own = rules.own_address
    recipients = [canonical_address(a.address) for a in email.to if not same_mailbox(a.address, own)]
    if not recipients:
        return Decision("ignore", "sent mail without a recipient")
    if _ROBOT_LOCAL.search(recipients[0].rpartition("@")[0]):
        return Decision("ignore", f"sent to an automated address: {recipients[0]}")
    user = user_for(recipients[0], rules.aliases, rules.plus_addressing)
    if not _allowed(recipients[0], rules.allow) and not _allowed(user, rules.allow):
        return Decision("reject", f"not allowed: {recipients[0]}")
    return Decision("handle", f"sent to {user}: the outbound side of their conversation (--sent)", user, True,
                    use_memory=True, sender=user, rate_key=user)  # fmt: skip


def trust_warnings(rules: Rules) -> list[str]:
    """What an operator must hear at every start about the trust settings (empty when they are sound)."""
    if rules.trust == INSECURE:
        return [
            f'INSECURE: policy.trust = "{INSECURE}": anyone who writes a user\'s address in From can read, change, '
            "export and erase that user's memory. Use it only where no outsider can mail Quinn; set "
            'trust = "authenticated" and authserv_id (deploy/SECURITY.md).'
        ]
    if not rules.authserv_id and not rules.idless_stamp:
        return [
            "policy.authserv_id is not set, so no sender can be authenticated: every mail is answered without "
            "memory. Set it to the authserv-id your receiving server writes in Authentication-Results "
            "(`quinn check` suggests it from a recent mail; deploy/SECURITY.md)."
        ]
    return []


def check_trust(rules: Rules, samples: Sequence[InboundEmail]) -> tuple[bool, str]:
    """``quinn check``'s verdict on the trust setup, read off ``samples`` (recent mail of the mailbox)."""
    warnings = trust_warnings(rules)
    if rules.trust == INSECURE:
        return True, "WARNING " + warnings[0]
    if rules.idless_stamp:
        return _check_idless(rules, samples)
    seen = sorted({i for email in samples for i in topmost_ids(trace_of(email))})
    if not rules.authserv_id:
        hint = f"; the newest mail carries Authentication-Results of: {', '.join(seen)}" if seen else ""
        idless = [p for p in (idless_stamp_position(trace_of(e)) for e in samples) if p is not None]
        if idless:  # Exchange Online's stamp: no id to suggest, a position instead
            hint += (f"; {len(idless)} of the {len(samples)} newest mails carry an Authentication-Results without "
                     f"an authserv-id on top, as Exchange Online writes it: set idless_stamp = true and "
                     f"received_above_stamp = {max(set(idless), key=idless.count)}")  # fmt: skip
        return False, warnings[0] + hint
    if not samples:
        return True, f"authserv_id {rules.authserv_id}: no mail in the mailbox yet to check the stamp on"
    positions = [stamp_position(trace_of(email), rules.authserv_id) for email in samples]
    stamped = [p for p in positions if p is not None]
    where = "; ".join(f"{e.message_id}: {'no stamp' if p is None else f'stamp below {p} Received'}"
                      for e, p in zip(samples, positions, strict=True))  # fmt: skip
    if not stamped:
        other = f" (they carry: {', '.join(seen)})" if seen else ""
        return False, (f"none of the {len(samples)} newest mails carries an Authentication-Results field of "
                       f"{rules.authserv_id}{other}: nothing will authenticate. Your receiving server must check "
                       "DMARC and stamp every mail with that authserv-id (deploy/SECURITY.md)")  # fmt: skip
    if min(stamped) > rules.received_above_stamp:
        return False, (f"your server's stamp sits below {min(stamped)} Received field(s), but "
                       f"policy.received_above_stamp is {rules.received_above_stamp}: set it to {min(stamped)} "
                       f"or no mail will authenticate ({where})")  # fmt: skip
    unstamped = len(positions) - len(stamped)
    tail = f"; {unstamped} of them without a stamp: is there an unstamped path into the mailbox? ({where})" if (
        unstamped) else ""  # fmt: skip
    return True, f"authserv_id {rules.authserv_id}: {len(stamped)} of the {len(samples)} newest mails stamped{tail}"


def _check_idless(rules: Rules, samples: Sequence[InboundEmail]) -> tuple[bool, str]:
    """``check_trust`` for a server that stamps without an authserv-id (Exchange Online): where is the topmost
    id-less field on recent mail, and is that exactly where ``received_above_stamp`` says?"""
    want = rules.received_above_stamp
    if not samples:
        return True, f"id-less stamp (Exchange Online) below {want} Received: no mail in the mailbox yet to check"
    positions = [idless_stamp_position(trace_of(email)) for email in samples]
    stamped = [p for p in positions if p is not None]
    where = "; ".join(f"{e.message_id}: {'no id-less stamp on top' if p is None else f'stamp below {p} Received'}"
                      for e, p in zip(samples, positions, strict=True))  # fmt: skip
    if not stamped:
        return False, (f"none of the {len(samples)} newest mails has an Authentication-Results field without an "
                       "authserv-id on top: nothing will authenticate. Is this mailbox on Exchange Online? "
                       f"Otherwise set idless_stamp = false and authserv_id ({where})")  # fmt: skip
    exact = [p for p in stamped if p == want]
    if not exact:
        common = max(set(stamped), key=stamped.count)
        return False, (f"the stamp sits below {common} Received field(s), but policy.received_above_stamp is "
                       f"{want}: set it to {common} or no mail will authenticate ({where})")  # fmt: skip
    tail = f"; the others will not authenticate ({where})" if len(exact) < len(positions) else ""
    return True, (f"id-less stamp (Exchange Online) below {want} Received: {len(exact)} of the {len(samples)} "
                  f"newest mails stamped there{tail}")  # fmt: skip


UNVERIFIED_NOTE = (
    "I could not verify that this email really comes from your address, so I answered it without anything I "
    "remember about you, and I did not change your memory."
)


def foreign_reply_to_note(addresses: Sequence[str]) -> str:
    """What the reply says when it is sent to a Reply-To of someone else. It names no address: everyone on the
    reply reads it, and a list of hundreds is the attacker's (issue 30)."""
    whom = "the address" if len(addresses) == 1 else "the addresses"
    return (
        f"This reply goes to {whom} in the email's Reply-To, not to your own address, so I answered without "
        "anything I remember about you and changed nothing in your memory."
    )


def _some(addresses: Sequence[str], shown: int = 3) -> str:
    """A few addresses and how many more, for a log line and the ledger's reason (bounded, whatever the mail)."""
    more = f" and {len(addresses) - shown} more" if len(addresses) > shown else ""
    return ", ".join(addresses[:shown]) + more


def _foreign(reply_to: Sequence[Address], user: str, rules: Rules) -> list[str]:
    """Reply-To addresses that are not the user (nor one of their aliases)."""
    found = [canonical_address(a.address) for a in reply_to]
    return [a for a in found if user_for(a, rules.aliases, rules.plus_addressing) != user]


def _ours(email: InboundEmail, rules: Rules) -> str | None:
    """Mail we sent, or that carries our loop marker: answering it would start a loop."""
    own = canonical_address(rules.own_address)
    if email.sender and same_mailbox(email.sender, own):
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


# --- sender authentication (RFC 8601, quinn/mailbox/authresults.py) ----------------------------------------


def authenticated(email: InboundEmail, rules: Rules) -> tuple[bool, str]:
    """Whether our own server vouched for the From domain, and why (or why not)."""
    if not rules.authserv_id and not rules.idless_stamp:
        return False, "no authserv_id configured"
    problem = from_problem(email.header_all("From"))
    if problem or email.from_ is None:
        return False, f"no single sender ({problem or 'no From'})"  # RFC 7489 §6.6.1: such mail cannot be aligned
    stamp = our_stamp(email, rules)
    if isinstance(stamp, str):
        return False, stamp
    return verdict(stamp, canonical_address(email.from_.address).rpartition("@")[2])


def sender_failed(email: InboundEmail, rules: Rules) -> str | None:
    """Why our own server marked the From domain as failing its check (``authresults.failed``), or None."""
    if (not rules.authserv_id and not rules.idless_stamp) or email.from_ is None:
        return None
    stamp = our_stamp(email, rules)
    if isinstance(stamp, str):
        return None
    return failed(stamp, canonical_address(email.from_.address).rpartition("@")[2])


def our_stamp(email: InboundEmail, rules: Rules) -> Stamp | str:
    """What our own server stamped on ``email`` (by ``authserv_id``, or Exchange's id-less stamp by position),
    or why nothing it carries can be our server's."""
    if not rules.idless_stamp:
        return read_stamp(trace_of(email), rules.authserv_id or "", rules.received_above_stamp)
    # Exchange stamps mail from outside only. Mail a user of the tenant submitted (AuthAs Internal, Partner) gets
    # no stamp, so a topmost field there is the sender's own text. Exchange's header firewall removes
    # X-MS-Exchange-Organization-* fields a sender wrote, and a sender can only add one, never remove Exchange's:
    # any value but Anonymous refuses, whatever else the mail says.
    auth_as = {v.strip().lower() for v in email.header_all("X-MS-Exchange-Organization-AuthAs")}
    if auth_as - {"anonymous"}:
        return f"submitted inside the tenant (AuthAs {', '.join(sorted(auth_as))}): Exchange stamps none"
    return read_idless_stamp(trace_of(email), rules.received_above_stamp)


def trace_of(email: InboundEmail) -> tuple[TraceField, ...]:
    """The mail's Received and Authentication-Results fields in order; a mail built without ``trace`` (tests)
    gives its Authentication-Results fields alone."""
    if email.trace:
        return email.trace
    return tuple(("authentication-results", v) for v in email.header_all("Authentication-Results"))
