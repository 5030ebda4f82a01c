"""``quinn import SOURCE``: a person's history (an mbox, a Maildir, imap:FOLDER) taken in without answering it.

The mails go through the daemon's own path with the reply switched off (quinn/engine/importing.py): threaded,
stored, searchable, their files read, then learnt per thread and reviewed by the session jobs. Run it again at
any time: what was imported is skipped, and a run that was stopped carries on. ``--dry-run`` reads and judges
every mail and writes nothing. Trust is as for live mail (the Authentication-Results of ``[policy]
authserv_id``); ``--vouch SENDER`` trusts an address or a domain whose archive the operator knows to be genuine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from quinn.commands.output import add_json_flag, answer, table
from quinn.config import Config, resolve_secrets

if TYPE_CHECKING:
    from quinn.db import Database
    from quinn.engine.importing import ImportReport

SECRETS = ("database", "llm", "embeddings")  # an imap: source needs the [imap] password too, asked for then
DEFAULT_QUARANTINE = "quinn-import-quarantine"


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn import``."""
    parser = with_config(add_json_flag(sub.add_parser(
        "import", help="take in a history (mbox, Maildir or imap:FOLDER) without answering it: threads, "
        "recall, files and memory, as if the mail had come in",
    )))  # fmt: skip
    parser.add_argument("source", help="an mbox file, a Maildir directory, or imap:FOLDER (a folder of [imap])")
    parser.add_argument("--vouch", action="append", default=[], metavar="SENDER",
                        help="trust mail From this address or @domain as if your server had authenticated it "
                        "(repeatable); without it only mail your server stamped is taken in")  # fmt: skip
    parser.add_argument("--sent", action="store_true",
                        help="the source is a Sent folder: each mail joins its first To recipient's conversation "
                        "as the outbound side (threads, recall), never learnt as the recipient's words")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="read and judge every mail, write nothing")
    parser.add_argument("--no-jobs", action="store_true",
                        help="do not run the session jobs (summarize, session close) at the end: the daemon's "
                        "scheduler runs them on its interval")  # fmt: skip
    parser.add_argument("--quarantine-dir", type=Path, default=None,
                        help=f"where copies of mails that cannot be parsed go (default: {DEFAULT_QUARANTINE}/ "
                        "beside the database file, or in the current directory for a remote database)")  # fmt: skip
    parser.set_defaults(handler=import_mail, secrets_of=SECRETS)


def quarantine_dir(config: Config, given: Path | None) -> Path:
    """The quarantine directory: as given, else beside a local database file, else here."""
    if given is not None:
        return given
    url = config.database.url
    return (Path(url).parent if "://" not in url else Path.cwd()) / DEFAULT_QUARANTINE


def import_mail(args: argparse.Namespace, config: Config) -> int:
    """Import one source; exit 0 when every mail was taken in or judged, 1 when some are deferred, waiting or
    could not be read."""
    if args.source.startswith("imap:"):
        resolve_secrets(config, os.environ, ("imap",))
    report = asyncio.run(_import(args, config))
    data = summary(report)
    answer(args, data, lambda out: show(out, report))
    unfinished = (report.outcomes["deferred"] + report.outcomes["waiting"] + report.outcomes["unreadable"]
                  + report.learning_deferred)  # fmt: skip
    return 1 if unfinished else 0


async def _import(args: argparse.Namespace, config: Config) -> ImportReport:
    from quinn.engine.importing import Importer
    from quinn.engine.parts import Parts
    from quinn.mailbox import open_source

    source = await asyncio.to_thread(open_source, args.source, config.imap)  # a source that is not mail fails here
    parts = Parts.build(config)
    try:
        if args.dry_run:  # nothing is written, not even a schema: an existing database is only read
            parts.db = await asyncio.to_thread(_existing_database, config)
        else:
            await parts.open_memory()
        with _progress(quiet=args.json) as bar:
            importer = Importer(parts, vouch=args.vouch, quarantine_dir=quarantine_dir(config, args.quarantine_dir),
                                run_jobs=not args.no_jobs and not args.dry_run, progress=bar,
                                sent=args.sent)  # fmt: skip
            return await importer.run(source, dry_run=args.dry_run)
    finally:
        await asyncio.to_thread(source.close)
        await parts.close()


class _progress:
    """A rich progress bar on stderr, one task per phase (listing, mails, learning, each session job)."""

    def __init__(self, *, quiet: bool) -> None:
        console = Console(stderr=True, highlight=False, markup=False)
        self.bar = Progress(TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, disable=quiet or not console.is_terminal,
                            transient=False)  # fmt: skip
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> _progress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self.tasks:
            self.tasks[what] = self.bar.add_task(what, total=total or None)
        self.bar.update(self.tasks[what], completed=done, total=total or None)


def _existing_database(config: Config) -> Database | None:
    """The configured database opened as it is (no migration), or None when a local file does not exist yet."""
    from quinn.db import Database, is_remote

    url = config.database.url
    if not is_remote(url) and not Path(url).exists():
        return None
    return Database.open(url, config.database.secret("auth_token"), migrate=False)


def summary(report: ImportReport) -> dict[str, Any]:
    """The report as data (``--json``)."""
    return {
        "source": report.source,
        "dry_run": report.dry_run,
        "mails": report.seen,
        "outcomes": {name: report.outcomes[name] for name in report.outcomes},
        "reasons": dict(report.reasons.most_common()),
        "not_vouched_senders": dict(report.untrusted.most_common()),
        "quarantined": [{"where": w, "reason": r, "copy": c} for w, r, c in report.quarantined],
        "unreadable": [{"where": w, "reason": r} for w, r in report.unreadable],
        "people": sorted(report.people),
        "learning": {"batches": report.batches, "mails": report.learnt, "memories_new": report.memories_new,
                     "memories_updated": report.memories_updated, "deferred": report.learning_deferred},
        "jobs": report.jobs,
    }  # fmt: skip


def show(out: Console, report: ImportReport) -> None:
    """The summary for people."""
    verb = "would be" if report.dry_run else "were"
    out.print(f"{report.source}: {report.seen} mails{' (dry run: nothing written)' if report.dry_run else ''}")
    rows = [{"outcome": name, "mails": n} for name, n in report.outcomes.most_common()]
    out.print(table("What became of them", ["outcome", "mails"], rows))
    if report.people:
        out.print(f"{len(report.people)} people {verb} imported: {', '.join(sorted(report.people)[:10])}"
                  + (" ..." if len(report.people) > 10 else ""))  # fmt: skip
    if report.reasons:
        rows = [{"reason": r, "mails": n} for r, n in report.reasons.most_common(15)]
        out.print(table("Not imported, and why", ["reason", "mails"], rows))
    if report.untrusted:
        senders = ", ".join(f"{s} ({n})" for s, n in report.untrusted.most_common(10))
        out.print(f"Not trusted: {senders}. If you know these senders wrote them, run again with --vouch ADDRESS "
                  "(or --vouch DOMAIN).")  # fmt: skip
    for where, reason, copy in report.quarantined:
        out.print(f"quarantined: {where}: {reason}; a copy: {copy} (the source still holds it). Fix or remove "
                  "it there, then run the import again.")  # fmt: skip
    from quinn.engine.importing import UNREADABLE_HINT

    for where, reason in report.unreadable:
        out.print(f"could not be read: {where}: {reason}. {UNREADABLE_HINT[:1].upper()}{UNREADABLE_HINT[1:]}.")
    if not report.dry_run:
        out.print(
            f"learning: {report.learnt} mails in {report.batches} extraction calls: {report.memories_new} "
            f"memories new, {report.memories_updated} updated"
            + (f"; {report.learning_deferred} mails deferred (run again)" if report.learning_deferred else "")
        )
        for name, outcome in report.jobs.items():
            out.print(f"{name}: {outcome}")
