"""``quinn config example`` and ``quinn config unit``: print the files an operator starts from (no config needed).

Both come from the wheel (quinn/packaged.py), so an installed Quinn needs no source tree for them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from quinn.packaged import packaged_file


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``config example`` and ``config unit``."""
    group = sub.add_parser("config", help="print the example quinn.toml or the systemd unit")
    commands = group.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    for name, file, what in (
        ("example", "quinn.example.toml", "print the example quinn.toml (every key, with its default and meaning)"),
        ("unit", "quinn.service", "print the systemd unit (deploy/README.md explains it)"),
    ):
        command = commands.add_parser(name, help=what)
        command.set_defaults(handler=print_file, needs_config=False, file=file)


def print_file(args: argparse.Namespace, config: None) -> int:
    """Write the packaged file to stdout: ``quinn config example > quinn.toml``."""
    sys.stdout.write(packaged_file(args.file).read_text(encoding="utf-8"))
    return 0
