"""Purge: every trace of a user, each table's rows deleted by the module that owns the table.

``MemoryStore.purge`` runs memory's part and, in the same transaction, every other owner's ``purge_user``
listed here; then it merges the full-text indexes and vacuums. Both ways to ask for a purge come here: a
confirmed mail (``respond.Agent``) and ``quinn memory purge``. A table that holds a user's rows and is missing
from ``OWNERS`` survives a purge: tests/memory/test_memory_isolation.py plants a row in every one.
"""

from __future__ import annotations

from quinn.agent import audit_log, confirm, digest, learning, proposals, reply_trace, state, usage
from quinn.documents import library
from quinn.mailbox import ledger, outbox, threads
from quinn.memory import MemoryStore, PurgeUser

#: Besides memory (``quinn.memory.store.purge_user``, run first), in order: files (before the messages they are
#: linked to), conversations, replies, the ledger, then what the agent keeps of the user (the audit log
#: keeps its entries, unlinked from the user and without their detail; the proposals drawn from the user's
#: conversation reviews go before the reviews, which name them).
OWNERS: tuple[PurgeUser, ...] = (
    library.purge_user, threads.purge_user, outbox.purge_user, ledger.purge_user, proposals.purge_user,
    state.purge_user, usage.purge_user,
    confirm.purge_user, digest.purge_user, learning.purge_user, reply_trace.purge_user, audit_log.purge_user,
)  # fmt: skip


def purge(store: MemoryStore, user_id: str) -> dict[str, int]:
    """Delete every trace of a user in one transaction; returns the number of rows removed per table."""
    return store.purge(user_id, others=OWNERS)
