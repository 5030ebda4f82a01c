"""``quinn console``: serve the admin console against the configured database; ``quinn console hash-password``:
make the password hash an admin's ``password_hash_env`` variable holds (reads the password from the terminal,
or one line of standard input when it is not a terminal)."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from quinn.config import Config
from quinn.errors import ConfigError


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn console`` and ``quinn console hash-password``."""
    group = with_config(sub.add_parser("console", help="serve the admin console ([console] in quinn.toml)"))
    # The console reads the database and, for an edit, embeds the new text: no IMAP, SMTP or model secrets.
    group.set_defaults(handler=serve_console, secrets_of=("database", "embeddings", "console"))
    commands = group.add_subparsers(dest="console_command", metavar="COMMAND")
    hashing = commands.add_parser("hash-password", help="print a password hash for a [[console.admins]] entry")
    hashing.set_defaults(handler=hash_password, needs_config=False)


def serve_console(args: argparse.Namespace, config: Config) -> int:
    """Serve until interrupted."""
    from quinn.console.serve import serve

    return serve(config)


def hash_password(args: argparse.Namespace, config: None) -> int:
    """Read a password (twice on a terminal) and print its scrypt hash."""
    from quinn.console.auth import hash_password as make_hash

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise ConfigError("the two passwords differ", "run it again")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    print(make_hash(password))
    return 0
