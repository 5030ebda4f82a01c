"""Who Quinn knows (the one definition of a user, ``quinn.users``), with their counts.

Read by ``quinn users list`` and the console's People page (which adds each user's passages).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quinn.db import Database
from quinn.memory.filters import current
from quinn.users import USER_IDS

COLUMNS = ["user", "memories", "sessions", "messages", "mails", "last_seen"]
LIKE_ESCAPE = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def list_users(db: Database, matching: str | None = None, *, limit: int | None = None,
               offset: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """One row per user (``COLUMNS``), most recently seen first; ``matching``: only addresses containing it;
    ``limit``/``offset``: one page of them. Every user is ranked by when last seen, but the counts are read for
    the page's users only (1,000 users x 100 memories: counting everyone's took most of the page's time)."""
    where = ""
    params: list[Any] = []
    if matching and matching.strip():
        where = "WHERE ids.user_id LIKE ? ESCAPE '\\'"
        params.append(f"%{matching.strip().lower().translate(LIKE_ESCAPE)}%")
    page = ""
    if limit:
        page = " LIMIT ? OFFSET ?"
        params += [int(limit), max(int(offset), 0)]
    sql = f"""
        WITH ids AS ({USER_IDS}),
        seen AS (
            SELECT ids.user_id AS user_id,
                max(coalesce((SELECT max(last_message_at) FROM sessions s WHERE s.user_id = ids.user_id), ''),
                    coalesce((SELECT max(updated_at) FROM mail_state l WHERE l.user_id = ids.user_id), ''))
                    AS last_seen
            FROM ids {where} ORDER BY 2 DESC, 1{page})
        SELECT seen.user_id,
            (SELECT count(*) FROM memories m WHERE m.user_id = seen.user_id AND {current("m")}),
            (SELECT count(*) FROM sessions s WHERE s.user_id = seen.user_id AND s.merged_into IS NULL),
            (SELECT count(*) FROM messages g WHERE g.user_id = seen.user_id),
            (SELECT count(*) FROM mail_state l WHERE l.user_id = seen.user_id),
            seen.last_seen
        FROM seen ORDER BY 6 DESC, 1
        """
    rows = db.query(sql, params)
    return [dict(zip(COLUMNS, (*row[:5], row[5] or None), strict=True)) for row in rows]


def passage_counts(db: Database, users: Sequence[str]) -> dict[str, dict[str, int]]:
    """How many conversation-recall passages each of ``users`` has, split into those of mail (``conversation``)
    and those of their files (``document``), in one grouped query; a user without any is absent."""
    if not users:
        return {}
    marks = ", ".join("?" * len(users))
    rows = db.query(
        "SELECT user_id, sum(document_id IS NULL), sum(document_id IS NOT NULL) FROM passages"
        f" WHERE user_id IN ({marks}) GROUP BY user_id",
        list(users),
    )
    return {user: {"conversation": int(mail or 0), "document": int(files or 0)} for user, mail, files in rows}
