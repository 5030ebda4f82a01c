"""The audit log: who changed what, when, through an operator's tool (the console; the CLI may write it too).

It lives here, not in the console, because it records changes to data other modules own (memories, templates,
mail) and any operator-facing tool that changes them should write the same log: the console is one client of
it. This module owns ``audit_log`` (migration 0016); a row is only ever added, and read newest first.

``detail`` is short (the admin's stated reason, a version): never the memory's text. ``user_id`` is the person
the change concerns; a purge of that person blanks it and the detail, and keeps who did what and when.
DB functions run on the DB thread (``Database.run``).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from datetime import datetime

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction

MAX_DETAIL = 500
MAX_FIELD = 200


@dataclass(frozen=True)
class Entry:
    """One audited change."""

    id: int
    at: str
    actor: str
    action: str
    object: str
    user_id: str | None
    detail: str


def _short(text: str, limit: int) -> str:
    """One line, at most ``limit`` characters."""
    return " ".join(str(text).split())[:limit]


def cli_actor() -> str:
    """Who runs a command-line change: ``cli:<login name>`` (sudo's caller when run through sudo), or ``cli``
    when the process has no login name (a container's uid without a passwd entry)."""
    try:
        name = os.environ.get("SUDO_USER") or getpass.getuser()
    except (KeyError, OSError):  # getpass: no LOGNAME/USER and the uid is not in the passwd database
        name = ""
    return f"cli:{name}" if name else "cli"


def record(db: Database, actor: str, action: str, obj: str = "", *, user_id: str | None = None, detail: str = "",
           now: datetime | None = None) -> int:  # fmt: skip
    """Add one entry; returns its id."""
    return db.execute(
        "INSERT INTO audit_log (at, actor, action, object, user_id, detail) VALUES (?, ?, ?, ?, ?, ?)",
        (iso(now or utcnow()), _short(actor, MAX_FIELD), _short(action, MAX_FIELD), _short(obj, MAX_FIELD),
         user_id, _short(detail, MAX_DETAIL)),
    )  # fmt: skip


def listing(db: Database, *, actor: str | None = None, limit: int = 200) -> list[Entry]:
    """Entries newest first (``actor`` narrows them to one admin)."""
    where, params = ("WHERE actor = ?", [actor]) if actor else ("", [])
    rows = db.query(f"SELECT id, at, actor, action, object, user_id, detail FROM audit_log {where}"
                    " ORDER BY id DESC LIMIT ?", (*params, limit))  # fmt: skip
    return [Entry(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """In a purge: the user's entries lose their link to the user and their detail (the change stays recorded)."""
    count = int(tx.query("SELECT count(*) FROM audit_log WHERE user_id = ?", (user,))[0][0])
    tx.execute("UPDATE audit_log SET user_id = NULL, detail = '' WHERE user_id = ?", (user,))
    return {"audit_log": count}
