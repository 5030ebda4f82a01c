"""The per-mail state machine as data: the states a mail goes through and every move allowed between them.

    received ─┬─► handling ─┬─► replied | drafted | imported               final (imported: `quinn import`)
              │             ├─► deferred ──(due)──► handling …             waits: a retry, a rate cap, a hold
              │             └─► failed | quarantined                       final: the operator's to look at
              ├─► ignored | rejected | quarantined                          final: policy, size, unreadable
              ├─► deferred                                                  a rate cap, a setup hold
              └─► superseded                                                its key died (UIDVALIDITY changed)
    failed | quarantined ──(`quinn mail status --retry`)──► retried         comes back under a new UID
    drafted ──(its draft approved and sent: engine/reviews.py)──► replied
    final ──► filed                                                         flagged and moved (``moved``)

A mail that is not final may be taken up again after a crash from whatever open state it was left in, so every
open state may move to every state a mail can reach. A held mail is ``deferred`` with a reason starting with
``HELD_PREFIX`` (quinn.hold), released at once when the setup error is fixed. The ledger stores the state
(quinn.mailbox.ledger); ``quinn.engine.mail`` makes the moves, each through ``check``.
"""

from __future__ import annotations

from quinn.mailbox import FINAL_STATES, HANDED_ON_STATES

OPEN_STATES = frozenset({"received", "handling", "deferred"})
STATES = OPEN_STATES | FINAL_STATES | frozenset(HANDED_ON_STATES)

#: Where each state may go. ``received`` is only ever the first state; final states only to ``retried`` (the
#: operator's retry of a failed or quarantined mail), and ``retried`` back to ``failed`` when that retry's
#: move on the server failed; ``drafted`` to ``replied`` once a reviewer approved the draft and it was sent.
TRANSITIONS: dict[str, frozenset[str]] = {
    **{state: (STATES - {"received", "retried"}) for state in OPEN_STATES},
    "failed": frozenset({"retried"}),
    "quarantined": frozenset({"retried"}),
    "retried": frozenset({"failed"}),
    "drafted": frozenset({"replied"}),
    **{state: frozenset() for state in FINAL_STATES - {"failed", "quarantined", "drafted"}},
    "superseded": frozenset(),
}


class IllegalMove(RuntimeError):
    """A move the state machine does not allow: a bug in Quinn, never the mail's fault."""


def check(old: str, new: str) -> str:
    """``new`` when a mail in ``old`` may move there; raises ``IllegalMove`` otherwise."""
    if old not in TRANSITIONS:
        raise IllegalMove(f"unknown mail state {old!r}")
    if new not in TRANSITIONS[old]:
        raise IllegalMove(f"a mail cannot go from {old} to {new}")
    return new
