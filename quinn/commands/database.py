"""Opening the configured database for an admin command, and ``quinn database copy`` (moving to a server).

``copy`` is how a file database moves to a remote libSQL server (Turso, or a self-hosted sqld): the target's
schema is created by the same migrations, then every row of every table is copied in batches. The full-text
indexes are not copied: the target's triggers rebuild them as the rows arrive. A plain ``sqlite3 .dump`` does not
work for this (measured against sqld: its ``PRAGMA writable_schema`` lines for the FTS5 tables leave the server
with no tables at all, and a dump drops ``PRAGMA user_version``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quinn.commands.output import add_json_flag, console, print_json, table
from quinn.config import Config, read_secret
from quinn.db import Database, is_remote
from quinn.engine import parts
from quinn.errors import ConfigError, QuinnError, StoreError

# Admin commands that only read the database resolve no other secrets (no IMAP password needed).
DATABASE_ONLY = ("database",)
BATCH_ROWS = 500
# Rows of 1 MiB each (attached files' bytes, migration 0013): a batch of them is read whole, so fewer at a time.
BATCH_ROWS_OF = {"document_parts": 8}
# Tables that hold the conversation, memory or mail state: one of them with rows means "not empty".
CONTENT_TABLES = ("memories", "messages", "mail_state", "outbox")


def open_database(config: Config) -> Database:
    """The daemon's database, migrated; a missing local file is an error (a typo must not create a new one)."""
    url = config.database.url
    if not is_remote(url) and not Path(url).expanduser().exists():
        raise ConfigError(
            f"database {url} does not exist",
            "check database.url and -c, or start `quinn run` once to create it",
        )
    return parts.database(config)


@contextmanager
def opened_database(config: Config) -> Iterator[Database]:
    """``with opened_database(config) as db:`` the daemon's database (``open_database``), closed after the block."""
    db = open_database(config)
    try:
        yield db
    finally:
        db.close()


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn database copy`` and ``quinn database vacuum``."""
    group = sub.add_parser("database", help="the database itself")
    commands = group.add_subparsers(dest="database_command", metavar="COMMAND", required=True)
    copy = with_config(add_json_flag(commands.add_parser(
        "copy", help="copy the configured database into an empty one (e.g. a Turso/libSQL server)",
    )))  # fmt: skip
    copy.add_argument("--to", required=True, metavar="URL", help="libsql://, https://, http:// URL or a file path")
    copy.add_argument("--auth-token-env", metavar="VAR", help="environment variable holding the target's token")
    copy.set_defaults(handler=database_copy, secrets_of=DATABASE_ONLY)
    vacuum = with_config(commands.add_parser(
        "vacuum", help="rewrite the file so deleted rows leave its bytes (after a purge a reader blocked)",
    ))  # fmt: skip
    vacuum.set_defaults(handler=database_vacuum, secrets_of=DATABASE_ONLY)


def database_vacuum(args: argparse.Namespace, config: Config) -> int:
    """Merge the full-text indexes and vacuum; exit 1 when a reader still keeps the bytes (issue 35)."""
    with opened_database(config) as db:
        db.merge_text_indexes()
        reached = db.vacuum()
    if not reached:
        raise StoreError("another process holds a read transaction on the database file, so deleted rows' bytes "
                         "are still in it", "end the backup or the other connection (a second `quinn console`, "
                         "Litestream) and run `quinn database vacuum` again")  # fmt: skip
    console().print("Vacuumed: deleted rows left the file's bytes.")
    return 0


def copyable_tables(db: Database) -> list[str]:
    """Ordinary tables, without SQLite's own and without the FTS5 tables (rebuilt by triggers instead)."""
    rows = db.query("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    virtual = [name for name, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")]
    return sorted(
        name for name, _sql in rows if name not in virtual and not any(name.startswith(v + "_") for v in virtual)
    )


def copy_database(source: Database, target: Database) -> dict[str, int]:
    """Copy every row of ``source`` into the empty, migrated ``target``; returns rows per table."""
    busy = [t for t in CONTENT_TABLES if target.query_value(f"SELECT count(*) FROM {t}")]
    if busy:
        raise QuinnError(f"target database is not empty ({', '.join(busy)} have rows)",
                         "copy into a new, empty database")  # fmt: skip
    copied: dict[str, int] = {}
    target_tables = set(copyable_tables(target))
    for name in copyable_tables(source):
        if name not in target_tables:
            raise QuinnError(f"table {name} is missing in the target", "upgrade Quinn where the target is created")
        columns = [row[1] for row in source.query(f"PRAGMA table_info({name})")]
        column_list = ", ".join(columns)
        # OR REPLACE: content tables are checked empty above; bookkeeping rows a migration seeded (the vector stamp)
        # are taken from the source.
        insert = f"INSERT OR REPLACE INTO {name} ({column_list}) VALUES ({', '.join('?' * len(columns))})"
        offset, count, batch_rows = 0, 0, BATCH_ROWS_OF.get(name, BATCH_ROWS)
        while True:
            # rowid order keeps AUTOINCREMENT ids and the FTS rowids the triggers derive from them.
            batch = source.query(f"SELECT {column_list} FROM {name} ORDER BY rowid LIMIT ? OFFSET ?",
                                 (batch_rows, offset))  # fmt: skip
            if not batch:
                break
            with target.transaction() as tx:
                tx.executemany(insert, batch)
            count += len(batch)
            offset += batch_rows
        copied[name] = count
    for name, count in copied.items():
        landed = int(target.query_value(f"SELECT count(*) FROM {name}") or 0)
        if landed != count:
            raise QuinnError(f"table {name}: copied {count} rows but the target holds {landed}")
    return copied


def database_copy(args: argparse.Namespace, config: Config) -> int:
    """Copy the configured database to ``--to``."""
    token = None
    if args.auth_token_env:
        token = read_secret(args.auth_token_env, os.environ)
        if not token:
            raise ConfigError(f"--auth-token-env names {args.auth_token_env}, which is not set",
                              f"export {args.auth_token_env}=... with the target's token")  # fmt: skip
    source = open_database(config)
    try:
        target = Database.open(args.to, token)
        try:
            copied = copy_database(source, target)
            where = target.redacted_url
        finally:
            target.close()
    finally:
        source.close()
    if args.json:
        print_json({"to": where, "tables": copied})
    else:
        rows = [{"table": name, "rows": n} for name, n in copied.items()]
        console().print(table(f"Copied to {where}", ["table", "rows"], rows))
        console().print(f"Now set [database] url = {where!r} (and auth_token_env), then restart Quinn.")
    return 0
