"""``quinn sessions list|show``: the conversations (threads) Quinn keeps, and one of them in full."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.text import Text

from quinn.commands.database import DATABASE_ONLY, opened_database
from quinn.commands.output import add_json_flag, answer, shorten, table
from quinn.config import Config
from quinn.db import Database
from quinn.errors import QuinnError
from quinn.mailbox import Sessions

LIST_COLUMNS = ["id", "user", "subject", "messages", "last_message_at", "status"]


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn sessions list`` and ``quinn sessions show ID``."""
    group = sub.add_parser("sessions", help="conversations (threads) and their messages")
    commands = group.add_subparsers(dest="sessions_command", metavar="COMMAND", required=True)
    listing = with_config(add_json_flag(commands.add_parser("list", help="recent sessions, newest first")))
    listing.add_argument("--user", help="only this user's sessions (their address)")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.set_defaults(handler=sessions_list, secrets_of=DATABASE_ONLY)
    show = with_config(add_json_flag(commands.add_parser("show", help="one session with its messages")))
    show.add_argument("id", help="the session id (from `quinn sessions list`)")
    show.set_defaults(handler=sessions_show, secrets_of=DATABASE_ONLY)


def list_sessions(db: Database, user: str | None, limit: int) -> list[dict[str, Any]]:
    """Sessions (merged ones included, marked by status), newest first."""
    rows = Sessions(db).listing(user and user.lower(), limit)
    return [dict(zip(LIST_COLUMNS, row, strict=True)) for row in rows]


def show_session(db: Database, session_id: str) -> dict[str, Any]:
    """The session, its summary and every message in order; ``QuinnError`` when there is no such session."""
    sessions = Sessions(db)
    row = sessions.header(session_id)
    if row is None:
        raise QuinnError(f"no session {session_id}", "list them with `quinn sessions list [--user ADDRESS]`")
    keys = ["id", "user", "subject", "created_at", "last_message_at", "status", "merged_into", "summary"]
    session: dict[str, Any] = dict(zip(keys, row, strict=True))
    message_keys = ["direction", "message_id", "in_reply_to", "from", "sent_at", "subject", "body"]
    session["messages"] = [dict(zip(message_keys, r, strict=True)) for r in sessions.all_messages(session_id)]
    session["message_ids"] = sessions.message_ids(session_id)
    return session


def sessions_list(args: argparse.Namespace, config: Config) -> int:
    """Print recent sessions."""
    with opened_database(config) as db:
        sessions = list_sessions(db, args.user, args.limit)
    rows = [{**s, "subject": shorten(s["subject"], 60)} for s in sessions]
    return answer(args, sessions, lambda out: out.print(table(f"Sessions ({len(sessions)})", LIST_COLUMNS, rows,
                                                              empty="no sessions")))  # fmt: skip


def sessions_show(args: argparse.Namespace, config: Config) -> int:
    """Print one session with its messages."""
    with opened_database(config) as db:
        session = show_session(db, args.id)

    def show(out: Console) -> None:
        out.print(Text(session["subject"] or "(no subject)", style="bold"),
                  f" session {session['id']}, user {session['user']}")  # fmt: skip
        out.print(f"started {session['created_at']}, last message {session['last_message_at']}, {session['status']}"
                  + (f", merged into {session['merged_into']}" if session["merged_into"] else ""))  # fmt: skip
        if session["summary"]:
            out.print(f"summary: {session['summary']}")
        rows = [{**m, "dir": "→ in" if m["direction"] == "in" else "← out", "body": shorten(m["body"], 300)}
                for m in session["messages"]]  # fmt: skip
        out.print(table("Messages", ["dir", "sent_at", "from", "body"], rows, empty="no stored messages"))

    return answer(args, session, show)
