"""The user's short-term state (table ``user_state``): what the last conversations left open.

The session-close job writes it (scheduler/session_close.py, through ``update_user_state``, with the review in
``conversation_summaries``) when a thread goes quiet; the reply prompt reads it as "Recent context with this
person", so someone who comes back with "can we pick up where we left off?" finds the last conversation's
summary, their goal and its status, and what Quinn must keep in mind (issue 15).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from quinn.clock import iso
from quinn.db import Database, Transaction

#: What the session-close review may change (null leaves a field as it was).
STATE_FIELDS = ("user_info", "recent_goal_and_status", "important_context", "agent_beliefs", "agent_info")
#: Every column, the summary of the last conversation included (written from the review's summary).
ALL_STATE_FIELDS = ("user_info", "last_conversation_summary", "recent_goal_and_status", "important_context",
                    "agent_beliefs", "agent_info")  # fmt: skip


def user_state(db: Database, user_id: str) -> dict[str, str]:
    """The user's short-term state (empty strings when none was written yet)."""
    row = db.query_one(f"SELECT {', '.join(ALL_STATE_FIELDS)} FROM user_state WHERE user_id = ?", (user_id,))
    return dict(zip(ALL_STATE_FIELDS, row or ("",) * len(ALL_STATE_FIELDS), strict=True))


def add_conversation_summary(
    tx: Transaction, session_id: str, user_id: str, *, summary: str, feedback_text: str, reward_score: float | None,
    improvement_suggestion: str, prompt_version: str, now: datetime,
) -> None:  # fmt: skip
    """Keep the session-close review of one conversation (``conversation_summaries``), inside the caller's
    transaction: the review, the state and the session's closing are written together."""
    tx.execute(
        "INSERT INTO conversation_summaries (session_id, user_id, summary, feedback_text, reward_score,"
        " improvement_suggestion, prompt_version, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, user_id, summary, feedback_text, reward_score, improvement_suggestion, prompt_version,
         iso(now)),
    )  # fmt: skip


def update_user_state(tx: Transaction, user_id: str, changes: Mapping[str, str | None], now: datetime) -> None:
    """Write the user's state with ``changes`` (fields of ``ALL_STATE_FIELDS``; None leaves a field as it was)
    over what it was, inside the caller's transaction."""
    current = tx.query(f"SELECT {', '.join(ALL_STATE_FIELDS)} FROM user_state WHERE user_id = ?", (user_id,))
    state = dict(zip(ALL_STATE_FIELDS, current[0] if current else ("",) * len(ALL_STATE_FIELDS), strict=True))
    state.update({name: value for name, value in changes.items() if value is not None})
    columns, marks = ", ".join(ALL_STATE_FIELDS), ", ".join("?" * len(ALL_STATE_FIELDS))
    tx.execute(
        f"INSERT INTO user_state (user_id, {columns}, updated_at) VALUES (?, {marks}, ?)"
        f" ON CONFLICT (user_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in ALL_STATE_FIELDS)},"
        " updated_at = excluded.updated_at",
        (user_id, *(state[c] for c in ALL_STATE_FIELDS), iso(now)),
    )


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] conversations_days``): conversation reviews written before ``before``."""
    return {"conversation_summaries": tx.delete("conversation_summaries", "created_at < ?", (before,))}


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """What session reviews left of the user, in a purge: their state and the conversation summaries (both
    written by scheduler/session_close.py)."""
    return {
        "user_state": tx.delete("user_state", "user_id = ?", (user,)),
        "conversation_summaries": tx.delete("conversation_summaries", "user_id = ?", (user,)),
    }


def rewrite_mentions(db: Database, user_id: str, rewrite: Callable[[str], str | None]) -> dict[str, int]:
    """A forget's part of what session reviews left (issue 35): each field of the user's state and each of their
    conversation reviews' texts that ``rewrite`` changes (None: left alone) is written without the forgotten
    fact. Returns the state fields and reviews changed."""
    fields = reviews = 0
    with db.transaction() as tx:
        found = tx.query(f"SELECT {', '.join(ALL_STATE_FIELDS)} FROM user_state WHERE user_id = ?", (user_id,))
        if found:
            changes = {n: rewrite(v or "") for n, v in zip(ALL_STATE_FIELDS, found[0], strict=True)}
            changes = {n: v for n, v in changes.items() if v is not None}
            for name, value in changes.items():
                tx.execute(f"UPDATE user_state SET {name} = ? WHERE user_id = ?", (value, user_id))
            fields = len(changes)
        texts = ("summary", "feedback_text", "improvement_suggestion")
        for row in tx.query(f"SELECT id, {', '.join(texts)} FROM conversation_summaries WHERE user_id = ?",
                            (user_id,)):  # fmt: skip
            new = {n: rewrite(v or "") for n, v in zip(texts, row[1:], strict=True)}
            new = {n: v for n, v in new.items() if v is not None}
            if new:
                sets = ", ".join(f"{n} = ?" for n in new)
                tx.execute(f"UPDATE conversation_summaries SET {sets} WHERE id = ?", (*new.values(), row[0]))
                reviews += 1
    return {"user_state": fields, "conversation_summaries": reviews}


def reviews_of(db: Database, user_id: str) -> list[dict[str, object]]:
    """The user's conversation reviews, newest first: what the export and the person page show (issue 35)."""
    rows = db.query("SELECT summary, feedback_text, reward_score, improvement_suggestion, created_at"
                    " FROM conversation_summaries WHERE user_id = ? ORDER BY id DESC", (user_id,))  # fmt: skip
    keys = ("summary", "feedback", "reward_score", "suggestion", "date")
    return [dict(zip(keys, row, strict=True)) for row in rows]
