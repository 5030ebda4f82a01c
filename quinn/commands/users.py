"""``quinn users list``: who Quinn knows, with how much memory and conversation each has."""

from __future__ import annotations

import argparse
from typing import Any

from quinn.commands.database import DATABASE_ONLY, opened_database
from quinn.commands.output import add_json_flag, answer, table
from quinn.config import Config
from quinn.memory import list_users, people


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn users list``."""
    group = sub.add_parser("users", help="the people Quinn knows")
    commands = group.add_subparsers(dest="users_command", metavar="COMMAND", required=True)
    listing = with_config(add_json_flag(commands.add_parser("list", help="every user with their counts")))
    listing.set_defaults(handler=users_list, secrets_of=DATABASE_ONLY)


def users_list(args: argparse.Namespace, config: Config) -> int:
    """Print the users."""
    with opened_database(config) as db:
        users = list_users(db)
    return answer(args, users, lambda out: out.print(table(f"Users ({len(users)})", people.COLUMNS, users,
                                                           empty="nobody has written yet")))  # fmt: skip
