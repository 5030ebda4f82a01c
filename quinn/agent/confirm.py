"""Single-use confirmation codes for the memory commands that destroy or send memory (purge, export).

Quinn asks "reply YES to confirm" with a random code that goes only to the user's own address; only a reply
from that user that says yes and carries the code carries the command out. The code is random (60 bits), expires,
works once, and only its SHA-256 is stored: a forger who does not read the user's mail cannot guess it, and a
copy of the database does not give it away. (Before, the question's Message-ID was the only proof, and it was a
hash of the request's id: predictable, so a blind forged "YES" purged a user.)

This module owns the ``confirmations`` table (migration 0007). Its functions run on the DB thread.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import Literal

from quinn.clock import iso
from quinn.db import Database, Transaction

Action = Literal["purge", "export"]
TTL = timedelta(hours=24)
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: a code is read and copied by people
_CODE = re.compile(r"\bQ-([A-HJ-NP-Z2-9]{4})-([A-HJ-NP-Z2-9]{4})-([A-HJ-NP-Z2-9]{4})\b")


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode("ascii")).hexdigest()


def issue(db: Database, user_id: str, action: Action, request_message_id: str, now: datetime) -> str:
    """A new code for ``action`` by ``user_id``, valid for ``TTL``; only its hash is stored."""
    groups = ["".join(secrets.choice(_ALPHABET) for _ in range(4)) for _ in range(3)]
    code = "Q-" + "-".join(groups)
    db.execute(
        "INSERT INTO confirmations (token_hash, user_id, action, request_message_id, created_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (_hash(code), user_id, action, request_message_id, iso(now), iso(now + TTL)),
    )
    return code


def codes_in(text: str) -> list[str]:
    """The confirmation codes written in ``text`` (a reply quotes the question, so the code comes along)."""
    return list(dict.fromkeys("Q-" + "-".join(m.groups()) for m in _CODE.finditer(text.upper())))


def redeem(db: Database, user_id: str, codes: list[str], message_id: str, now: datetime) -> Action | None:
    """The action of the first of ``codes`` that is ``user_id``'s, unexpired and unused, now used up by the mail
    ``message_id``. The same mail may redeem its code again: a retry after a crash or an outage."""
    for code in codes:
        row = db.query(
            "SELECT action FROM confirmations WHERE token_hash = ? AND user_id = ? AND expires_at > ?"
            " AND (used_at IS NULL OR used_by = ?)",
            (_hash(code), user_id, iso(now), message_id),
        )
        if row:
            db.execute("UPDATE confirmations SET used_at = coalesce(used_at, ?), used_by = ? WHERE token_hash = ?",
                       (iso(now), message_id, _hash(code)))  # fmt: skip
            return row[0][0]
    return None


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The user's confirmation codes, in a purge (the one that confirmed it included)."""
    return {"confirmations": tx.delete("confirmations", "user_id = ?", (user,))}
