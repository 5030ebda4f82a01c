"""``quinn jobs list`` and ``quinn jobs run NAME``: the scheduler's jobs from the command line.

``run`` runs one job now, whatever its interval, through the same lease as the daemons: if a daemon on the same
database is running that job at the moment, it says so and exits 1 instead of running it twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from quinn.clock import Clock
from quinn.commands.database import DATABASE_ONLY
from quinn.config import JOB_NAMES, Config
from quinn.engine import parts

if TYPE_CHECKING:  # the scheduler pulls in the model SDKs: imported when a jobs command runs, not at CLI start
    from quinn.db import Database
    from quinn.scheduler import JobOutcome, JobStatus

EXIT_OK, EXIT_FAILED = 0, 1


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``jobs list`` and ``jobs run NAME``."""
    jobs = sub.add_parser("jobs", help="background jobs: list them with their last and next run, or run one now")
    commands = jobs.add_subparsers(dest="jobs_command", metavar="SUBCOMMAND", required=True)
    listing = with_config(commands.add_parser("list", help="every job: interval, last run, counts, next run"))
    listing.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    listing.set_defaults(handler=list_jobs, secrets_of=DATABASE_ONLY)  # reads the run log only
    run = with_config(commands.add_parser("run", help="run one job now (waits for it; exit 1 if it failed)"))
    run.add_argument("name", choices=JOB_NAMES, help="the job to run")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.set_defaults(handler=run_job)


def _open(config: Config) -> Database:
    return parts.database(config)


def list_jobs(args: argparse.Namespace, config: Config) -> int:
    """Print every job with its settings, its last run and when it runs next."""
    from quinn.scheduler import job_statuses

    db = _open(config)
    try:
        statuses = job_statuses(db, config.scheduler, Clock().now())
    finally:
        db.close()
    if args.json:
        print(json.dumps([_status_record(s) for s in statuses], indent=2))
        return EXIT_OK
    rows = [("JOB", "EVERY", "LIMIT", "LLM", "LAST RUN", "RESULT", "COUNTS", "NEXT RUN")]
    for s in statuses:
        last = s.last
        result = "-" if last is None else last.status + (f" {last.duration_s:.1f}s" if last.duration_s else "")
        if last is not None and last.error:
            result += f" ({last.error[:60]})"
        counts = ", ".join(f"{k} {v}" for k, v in (last.counts if last else {}).items() if k not in ("details",))
        if not s.enabled:
            upcoming = "disabled"
        elif s.lease is not None:
            upcoming = f"running now in {s.lease.holder}"
        else:
            upcoming = s.next_run.isoformat(" ", "minutes") if s.next_run else "at daemon start"
        rows.append((s.name, _every(s.interval_min), _every(s.timeout_min), "yes" if s.needs_llm else "no",
                     last.started_at.replace("T", " ")[:16] if last else "never", result, counts or "-",
                     upcoming))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print("\nSettings ([scheduler]) by job:")
    for s in statuses:
        if s.tunables:
            print(f"  {s.name}: " + ", ".join(f"{key} = {value}" for key, value in s.tunables.items()))
    return EXIT_OK


def run_job(args: argparse.Namespace, config: Config) -> int:
    """Run one job now and print what it did; exit 1 when it failed or another daemon holds it."""
    from quinn.scheduler import job

    spec = job(args.name)
    prompts = parts.prompts(config, checked=False)
    llm = parts.llm(config) if spec.needs_llm else None
    db = _open(config)
    try:
        embedder = None
        if spec.uses_embeddings:
            embedder = parts.embedder(config.embeddings)
        with _quiet("quinn.memory.store"):  # "no embedder" is expected for jobs that never touch vectors
            store = parts.store(db, embedder)
        runner = parts.scheduler(config, store, llm, prompts)
        outcome = asyncio.run(runner.run_job(spec.name, force=True))
    finally:
        db.close()
    if args.json:
        print(json.dumps(_outcome_record(outcome), indent=2))
    else:
        print(_outcome_line(outcome))
    return EXIT_OK if outcome.status == "ok" else EXIT_FAILED


def _outcome_line(outcome: JobOutcome) -> str:
    if outcome.status == "skipped":
        return f"{outcome.job}: not run: {outcome.reason}"
    counts = ", ".join(f"{k} {v}" for k, v in outcome.counts.items() if k != "details") or "nothing to do"
    line = f"{outcome.job}: {outcome.status} in {outcome.duration_s or 0:.1f}s: {counts}"
    return f"{line} ({outcome.error})" if outcome.error else line


def _outcome_record(outcome: JobOutcome) -> dict[str, Any]:
    return {"job": outcome.job, "status": outcome.status, "counts": outcome.counts, "error": outcome.error,
            "reason": outcome.reason, "run_id": outcome.run_id, "duration_s": outcome.duration_s}  # fmt: skip


def _status_record(s: JobStatus) -> dict[str, Any]:
    last = s.last
    return {
        "name": s.name, "enabled": s.enabled, "interval_min": s.interval_min, "timeout_min": s.timeout_min,
        "tunables": s.tunables, "needs_llm": s.needs_llm,
        "description": s.description,
        "last_run": None if last is None else {
            "id": last.id, "started_at": last.started_at, "finished_at": last.finished_at, "status": last.status,
            "duration_s": last.duration_s, "counts": last.counts, "error": last.error,
        },
        "next_run": s.next_run.isoformat() if s.next_run else None,
        "lease": None if s.lease is None else {"holder": s.lease.holder, "expires_at": s.lease.expires_at},
    }  # fmt: skip


def _every(minutes: float) -> str:
    if minutes >= 60 and minutes % 60 == 0:
        return f"{minutes / 60:g}h"
    return f"{minutes:g}min"


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    target = logging.getLogger(logger)
    level = target.level
    target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        target.setLevel(level)
