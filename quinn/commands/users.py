"""``quinn users list``: who Quinn knows, with how much memory and conversation each has."""

from __future__ import annotations

import argparse
from typing import Any

from quinn.commands.database import DATABASE_ONLY, opened_database
from quinn.commands.output import add_json_flag, answer, table
from quinn.config import Config
from quinn.memory.db import Database
from quinn.memory.filters import current
from quinn.users import USER_IDS

COLUMNS = ["user", "memories", "sessions", "messages", "mails", "last_seen"]


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn users list``."""
    group = sub.add_parser("users", help="the people Quinn knows")
    commands = group.add_subparsers(dest="users_command", metavar="COMMAND", required=True)
    listing = with_config(add_json_flag(commands.add_parser("list", help="every user with their counts")))
    listing.set_defaults(handler=users_list, secrets_of=DATABASE_ONLY)


def list_users(db: Database) -> list[dict[str, Any]]:
    """One row per user Quinn knows (``quinn.users``), most recently seen first."""
    rows = db.query(
        f"""
        WITH ids AS ({USER_IDS})
        SELECT ids.user_id,
            (SELECT count(*) FROM memories m WHERE m.user_id = ids.user_id AND {current("m")}),
            (SELECT count(*) FROM sessions s WHERE s.user_id = ids.user_id AND s.merged_into IS NULL),
            (SELECT count(*) FROM messages g WHERE g.user_id = ids.user_id),
            (SELECT count(*) FROM mail_state l WHERE l.user_id = ids.user_id),
            max(coalesce((SELECT max(last_message_at) FROM sessions s WHERE s.user_id = ids.user_id), ''),
                coalesce((SELECT max(updated_at) FROM mail_state l WHERE l.user_id = ids.user_id), ''))
        FROM ids ORDER BY 6 DESC, 1
        """
    )
    return [dict(zip(COLUMNS, (*row[:5], row[5] or None), strict=True)) for row in rows]


def users_list(args: argparse.Namespace, config: Config) -> int:
    """Print the users."""
    with opened_database(config) as db:
        users = list_users(db)
    return answer(args, users, lambda out: out.print(table(f"Users ({len(users)})", COLUMNS, users,
                                                           empty="nobody has written yet")))  # fmt: skip
