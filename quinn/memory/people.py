"""Who Quinn knows (the one definition of a user, ``quinn.users``), with their counts.

Read by ``quinn users list`` and the console's People page.
"""

from __future__ import annotations

from typing import Any

from quinn.db import Database
from quinn.memory.filters import current
from quinn.users import USER_IDS

COLUMNS = ["user", "memories", "sessions", "messages", "mails", "last_seen"]
LIKE_ESCAPE = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def list_users(db: Database, matching: str | None = None, *, limit: int | None = None) -> list[dict[str, Any]]:
    """One row per user (``COLUMNS``), most recently seen first; ``matching``: only addresses containing it."""
    where = ""
    params: list[Any] = []
    if matching and matching.strip():
        where = "WHERE ids.user_id LIKE ? ESCAPE '\\'"
        params.append(f"%{matching.strip().lower().translate(LIKE_ESCAPE)}%")
    sql = f"""
        WITH ids AS ({USER_IDS})
        SELECT ids.user_id,
            (SELECT count(*) FROM memories m WHERE m.user_id = ids.user_id AND {current("m")}),
            (SELECT count(*) FROM sessions s WHERE s.user_id = ids.user_id AND s.merged_into IS NULL),
            (SELECT count(*) FROM messages g WHERE g.user_id = ids.user_id),
            (SELECT count(*) FROM mail_state l WHERE l.user_id = ids.user_id),
            max(coalesce((SELECT max(last_message_at) FROM sessions s WHERE s.user_id = ids.user_id), ''),
                coalesce((SELECT max(updated_at) FROM mail_state l WHERE l.user_id = ids.user_id), ''))
        FROM ids {where} ORDER BY 6 DESC, 1
        """
    if limit:
        sql += " LIMIT ?"
        params.append(int(limit))
    rows = db.query(sql, params)
    return [dict(zip(COLUMNS, (*row[:5], row[5] or None), strict=True)) for row in rows]
