"""``quinn console``: serve the admin console against the configured database; ``quinn console hash-password``:
make the password hash an admin's ``password_hash_env`` variable holds (reads the password from the terminal,
or one line of standard input when it is not a terminal); ``quinn console enable --admin NAME``: turn the console
on in an existing quinn.toml (issue 34: a snippet appended by hand broke the file ``quinn init`` wrote)."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quinn.config import Config, parse_config
from quinn.errors import ConfigError

MIN_PASSWORD_CHARS = 12  # an admin password guards every user's memory


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn console`` and ``quinn console hash-password``."""
    group = with_config(sub.add_parser("console", help="serve the admin console ([console] in quinn.toml)"))
    # The console reads the database and, for an edit, embeds the new text: no IMAP, SMTP or model secrets.
    group.set_defaults(handler=serve_console, secrets_of=("database", "embeddings", "console"))
    commands = group.add_subparsers(dest="console_command", metavar="COMMAND")
    hashing = commands.add_parser("hash-password", help="print a password hash for a [[console.admins]] entry")
    hashing.set_defaults(handler=hash_password, needs_config=False)
    enable = with_config(commands.add_parser(
        "enable", help="turn the console on in quinn.toml, with one admin (edits the file in place, safely)",
        description="Set [console] enabled = true and add a [[console.admins]] table for NAME to the existing "
        "quinn.toml, keeping every other line and comment. The result is parsed and validated before it replaces "
        "the file; nothing is written when it would not load.",
    ))  # fmt: skip
    enable.add_argument("--admin", required=True, metavar="NAME", help="the admin's login name (lower case)")
    enable.add_argument("--role", choices=("admin", "read-only"), default="admin", help="default: admin")
    enable.add_argument("--password-env", metavar="VAR", help="the variable that will hold the admin's password "
                        "hash (default: QUINN_CONSOLE_<NAME>)")  # fmt: skip
    enable.set_defaults(handler=enable_console, needs_config=False)


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
    if len(password) < MIN_PASSWORD_CHARS:
        raise ConfigError(f"the password has {len(password)} characters, fewer than {MIN_PASSWORD_CHARS}",
                          "choose a longer one (a few words make a good one)")  # fmt: skip
    print(make_hash(password))
    return 0


def password_env_for(name: str) -> str:
    """QUINN_CONSOLE_ALICE for alice (what the README and the example config name)."""
    return "QUINN_CONSOLE_" + re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def with_console(text: str, name: str, role: str, password_env: str) -> str:
    """``text`` (a quinn.toml) with ``[console] enabled = true`` and one more ``[[console.admins]]`` table; every
    other line as it was. Line edits, not a TOML rewrite: the comments ``quinn init`` wrote stay."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if re.match(r"\s*\[console\]", line)), None)
    admin = ["", "[[console.admins]]  # added by `quinn console enable`", f'name = "{name}"', f'role = "{role}"',
             f'password_hash_env = "{password_env}"']  # fmt: skip
    if header is None:
        return "\n".join([*lines, "", "[console]", "enabled = true", *admin]) + "\n"
    # The section ends at the next table that is not one of its own [[console.admins]].
    others = re.compile(r"\s*\[(?!\[console\.)")
    end = next((i for i in range(header + 1, len(lines)) if others.match(lines[i])), len(lines))
    for i in range(header + 1, end):
        if re.match(r"\s*admins\s*=", lines[i]):
            raise ConfigError(
                "[console] lists its admins inline (admins = [...])",
                "add the admin to that list by hand, or write it as [[console.admins]] tables",
            )
    enabled = next((i for i in range(header + 1, end) if re.match(r"\s*#?\s*enabled\s*=", lines[i])), None)
    if enabled is None:
        lines.insert(header + 1, "enabled = true")
        end += 1
    else:
        lines[enabled] = "enabled = true"
    while end > header + 1 and not lines[end - 1].strip():
        end -= 1  # the new table goes before the blank lines that end the section
    return "\n".join([*lines[:end], *admin, *lines[end:]]) + "\n"


def enable_console(args: argparse.Namespace, config: None) -> int:
    """Write the console's section into the existing config, check it, say what is left to do."""
    path = Path(args.config)
    name = args.admin.strip().lower()
    password_env = args.password_env or password_env_for(name)
    try:
        text = path.read_text(encoding="utf-8")
        current = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found", "run quinn init first, or pass -c PATH") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}", "fix it first; nothing was changed") from None
    admins = current.get("console", {}).get("admins", [])
    if any(isinstance(a, dict) and a.get("name") == name for a in admins):
        raise ConfigError(f"{name} is already an admin in {path}", "nothing was changed")
    changed = with_console(text, name, args.role, password_env)
    try:
        parse_config(tomllib.loads(changed), source=str(path))  # the keys and values, not the secrets yet
    except (tomllib.TOMLDecodeError, ConfigError) as exc:
        raise ConfigError(f"enabling the console would break {path}: {exc}", "nothing was changed; edit it by "
                          "hand as deploy/quinn.example.toml shows") from None  # fmt: skip
    fd, temporary = tempfile.mkstemp(prefix=".quinn-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(changed)
        os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)  # whole or not at all
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    print(f"the console is on in {path}, with {args.role} {name}; the admin's password hash goes in {password_env}:")
    print(f"  {password_env}=$(quinn console hash-password)   (or a credential file named {password_env})")
    print(f"then, if not done yet, {Path(sys.prefix) / 'bin' / 'pip'} install 'quinn-mail[console]'; restart quinn "
          "run; quinn check tests it all")  # fmt: skip
    return 0
