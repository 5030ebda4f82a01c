"""The database: one libSQL connection (an embedded file or a remote sqld URL), the numbered migrations that
build every package's tables, and the one thread all database work runs on. memory, mailbox, agent, documents,
scheduler and the commands sit on it; it imports none of them."""

from quinn.db.connection import (
    REMOTE_SCHEMES,
    Database,
    DriverError,
    Row,
    Transaction,
    is_remote,
)
from quinn.db.executor import DbThread
from quinn.db.schema import migration_scripts, split_statements

__all__ = [
    "REMOTE_SCHEMES",
    "Database",
    "DbThread",
    "DriverError",
    "Row",
    "Transaction",
    "is_remote",
    "migration_scripts",
    "split_statements",
]
