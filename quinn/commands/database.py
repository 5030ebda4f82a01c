"""Opening the configured database for an admin command."""

from __future__ import annotations

from pathlib import Path

from quinn.config import Config
from quinn.errors import ConfigError
from quinn.memory.db import Database, is_remote

# Admin commands that only read the database resolve no other secrets (no IMAP password needed).
DATABASE_ONLY = ("database",)


def open_database(config: Config) -> Database:
    """The daemon's database, migrated; a missing local file is an error (a typo must not create a new one)."""
    url = config.database.url
    if not is_remote(url) and not Path(url).expanduser().exists():
        raise ConfigError(
            f"database {url} does not exist",
            "check database.url and -c, or start `quinn run` once to create it",
        )
    return Database.open(url, config.database.secret("auth_token"))
