"""How admin commands answer: a rich table for people, JSON for scripts (``--json``), same data either way."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text


def add_json_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give a command ``--json``."""
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of a table")
    return parser


def console() -> Console:
    """stdout; wide when piped, so a table is not cut at 80 columns in a log or a pager. No markup: printed
    text carries mail data."""
    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200, highlight=False, markup=False)


def print_json(data: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def answer(args: argparse.Namespace, data: Any, show: Callable[[Console], object]) -> int:
    """A command's answer: ``data`` as JSON with ``--json``, else ``show`` prints it for people; exit code 0."""
    if args.json:
        print_json(data)
    else:
        show(console())
    return 0


def table(title: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]], *, empty: str = "none") -> Group:
    """A heading and a table of ``rows`` (dicts keyed by column name); None shows as an empty cell.

    Cells are plain ``Text``: mail subjects and bodies like "[URGENT]" must not be read as rich markup.
    """
    t = Table(show_edge=False, pad_edge=False)
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(Text("" if row.get(c) is None else str(row.get(c))) for c in columns))
    if not rows:
        t.caption = empty
    return Group(Text(title, style="bold"), t)


def shorten(text: str | None, limit: int = 160) -> str:
    """One line, at most ``limit`` characters (tables only; ``--json`` keeps everything)."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (drawn only on a terminal); yields the ``progress(done, total)`` callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(file=sys.stderr)
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
