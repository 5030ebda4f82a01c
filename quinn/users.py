"""Who Quinn knows: the one definition of a user, read by ``quinn users list``, the ``quinn_users`` metric and
``MemoryStore.users``, so they cannot disagree.

A user is an address Quinn holds something of: a memory of their own, a session (and the messages in it), or a
mail of theirs in the ledger (``mail_state.user_id``, set once ``policy.decide`` named the sender). Global
memories (no user) and unverified senders (no ``user_id``) are nobody. A purge deletes or unlinks every one of
these rows, so a purged user is known no more. Imports nothing of Quinn at run time: memory, metrics and the
commands all read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quinn.db import Database

USER_IDS = (
    "SELECT user_id FROM memories WHERE user_id IS NOT NULL"
    " UNION SELECT user_id FROM sessions"
    " UNION SELECT user_id FROM messages"
    " UNION SELECT user_id FROM mail_state WHERE user_id IS NOT NULL"
)
"""Every user id, once each: a sub-query to build on (``WITH ids AS (USER_IDS)``)."""


def fold_address(address: str) -> str:
    """An address as user ids compare it: ASCII letters lower-cased, every other letter as written (a mailbox's
    non-ASCII letters are its own: "Àlice@" and "àlice@" may be two people). ``identity.canonical_address`` and
    ``filters.normalise_user`` both fold so."""
    return "".join(ch.lower() if ch.isascii() else ch for ch in address)


def user_ids(db: Database) -> list[str]:
    """Every user Quinn knows, sorted."""
    return [row[0] for row in db.query(f"{USER_IDS} ORDER BY 1")]


def count_users(db: Database) -> int:
    """How many users Quinn knows."""
    return int(db.query_value(f"SELECT count(*) FROM ({USER_IDS})") or 0)
