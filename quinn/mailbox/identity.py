"""Who a mail is from: one canonical user per address. Pure functions on strings.

An address is compared the way mail systems compare it, and never more loosely: ASCII letters are lower-cased
(domains are case-insensitive, RFC 5321 §2.4, and every provider treats local parts the same way), Unicode is
put in NFC (the same text typed two ways is one address), and nothing else is folded. In particular no
compatibility or case folding of non-ASCII characters: "ａlice" (full-width a), "alice" with a Cyrillic "а" or
the Kelvin sign "K" stay other addresses than the ASCII ones they look like, so a lookalike is bound to itself,
never to the user it imitates.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from email.utils import getaddresses, parseaddr
from typing import Literal

from quinn.users import fold_address

PlusAddressing = Literal["separate", "base"]


def canonical_address(address: str, plus: PlusAddressing = "separate") -> str:
    """``"Alice <Alice@Example.COM> "`` -> ``alice@example.com``: NFC, ASCII letters lower-cased.

    ``plus="base"`` maps ``alice+news@x`` to ``alice@x`` (RFC 5233 subaddress); "separate" keeps them apart.
    """
    _name, parsed = parseaddr(address.strip())
    text = unicodedata.normalize("NFC", (parsed or address).strip())
    text = fold_address(text)
    if plus == "base":
        local, at, domain = text.rpartition("@")
        if at and "+" in local.lstrip("+"):
            text = f"{local.split('+', 1)[0] or local}@{domain}"
    return text


def user_for(address: str, aliases: Mapping[str, Sequence[str]], plus: PlusAddressing = "separate") -> str:
    """The main address of the user who owns ``address`` (itself when it is no alias)."""
    addr = canonical_address(address, plus)
    for main, others in aliases.items():
        if addr == canonical_address(main, plus) or addr in {canonical_address(o, plus) for o in others}:
            return canonical_address(main, plus)
    return addr


def same_mailbox(address: str, own: str) -> bool:
    """Equal, or equal once a plus tag is removed: quinn+work@ is delivered to quinn@ (RFC 5233 subaddress)."""
    address, own = canonical_address(address), canonical_address(own)
    return address == own or canonical_address(address, "base") == own


def from_problem(from_fields: Sequence[str]) -> str | None:
    """Why the From field(s) name no single sender, or None. RFC 5322 §3.6 allows exactly one From field;
    a From with several mailboxes needs a Sender, and DMARC cannot align either (RFC 7489 §6.6.1)."""
    if len(from_fields) != 1:
        return f"{len(from_fields)} From fields"
    mailboxes = {canonical_address(a) for _, a in getaddresses(list(from_fields)) if "@" in a}
    if len(mailboxes) != 1:
        return f"{len(mailboxes)} addresses in From"
    return None


def name_poses_as_address(display_name: str, address: str) -> bool:
    """A display name that is itself an address other than the real one (``"alice@x" <mallory@y>``)."""
    named = canonical_address(display_name.strip().strip("\"'<>"))
    return "@" in named and " " not in named and named != canonical_address(address)
