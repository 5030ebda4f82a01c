"""The user's short-term state (table ``user_state``): what the last conversations left open.

The session-close job writes it (scheduler/session_close.py) when a thread goes quiet; the reply prompt reads it
as "Recent context with this person", so someone who comes back with "can we pick up where we left off?" finds
the last conversation's summary, their goal and its status, and what Quinn must keep in mind (issue 15).
"""

from __future__ import annotations

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
