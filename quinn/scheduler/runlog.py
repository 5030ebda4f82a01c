"""The scheduler's state in the database: ``job_runs`` (what ran, when, with what result) and ``leases``.

A lease is one row per job naming the daemon that runs it and until when. Taking it is one conditional upsert,
atomic in SQLite and on a libSQL server alike, so when several daemons share a remote database exactly one of
them runs a given job; a daemon that crashed stops renewing its lease, and the lease simply expires.
All methods are synchronous: call them on the database thread (``Database.run``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from quinn.clock import iso
from quinn.db import Database

RUNNING, OK, FAILED, INTERRUPTED = "running", "ok", "failed", "interrupted"


@dataclass(frozen=True)
class JobRun:
    """One row of ``job_runs``."""

    id: int
    job: str
    started_at: str
    finished_at: str | None
    status: str
    counts: dict[str, Any]
    error: str

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish, when finished."""
        if self.finished_at is None:
            return None
        return (datetime.fromisoformat(self.finished_at) - datetime.fromisoformat(self.started_at)).total_seconds()

    @property
    def started(self) -> datetime:
        """The start as a datetime."""
        return datetime.fromisoformat(self.started_at)


_RUN_COLUMNS = "id, job, started_at, finished_at, status, counts, error"


def _run(row: tuple[Any, ...]) -> JobRun:
    rid, job, started, finished, status, counts, error = row
    return JobRun(int(rid), job, started, finished, status, json.loads(counts or "{}"), error or "")


class RunLog:
    """Reads and writes ``job_runs``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def start(self, job: str, at: datetime, holder: str) -> int:
        """Record a run as started; returns its id."""
        counts = json.dumps({"details": {"holder": holder}})
        return self.db.execute(
            "INSERT INTO job_runs (job, started_at, status, counts) VALUES (?, ?, ?, ?)",
            (job, iso(at), RUNNING, counts),
        )

    def finish(self, run_id: int, at: datetime, status: str, counts: dict[str, Any], error: str = "") -> None:
        """Record how a run ended (ok, failed, interrupted) with its counts."""
        self.db.execute(
            "UPDATE job_runs SET finished_at = ?, status = ?, counts = ?, error = ? WHERE id = ?",
            (iso(at), status, json.dumps(counts, sort_keys=True, default=str), error[:2000], run_id),
        )

    def last(self, job: str) -> JobRun | None:
        """The latest run that was not interrupted (it counts for the interval), or None."""
        row = self.db.query_one(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE job = ? AND status != ? ORDER BY started_at DESC, id DESC"
            " LIMIT 1",
            (job, INTERRUPTED),
        )
        return _run(row) if row else None

    def last_ok(self, job: str) -> JobRun | None:
        """The latest successful run (its cursor is where the next run resumes), or None."""
        row = self.db.query_one(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE job = ? AND status = ? ORDER BY id DESC LIMIT 1", (job, OK)
        )
        return _run(row) if row else None

    def runs(self, job: str | None = None, limit: int = 50) -> list[JobRun]:
        """The newest runs, of one job or of all, newest first."""
        where, params = ("WHERE job = ?", (job,)) if job else ("", ())
        rows = self.db.query(
            f"SELECT {_RUN_COLUMNS} FROM job_runs {where} ORDER BY started_at DESC, id DESC LIMIT {int(limit)}",
            params,
        )
        return [_run(r) for r in rows]

    def interrupt_stale(self, job: str, at: datetime, reason: str) -> int:
        """Close runs left ``running`` by a daemon that lost its lease (it crashed); returns how many."""
        count = int(self.db.query_value("SELECT count(*) FROM job_runs WHERE job = ? AND status = ?", (job, RUNNING)))
        if count:
            self.db.execute(
                "UPDATE job_runs SET status = ?, finished_at = ?, error = ? WHERE job = ? AND status = ?",
                (INTERRUPTED, iso(at), reason, job, RUNNING),
            )
        return count


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease and until when."""

    holder: str
    expires_at: str


class Leases:
    """Named leases in the ``leases`` table, held by one daemon (``holder``) at a time."""

    def __init__(self, db: Database, holder: str) -> None:
        self.db = db
        self.holder = holder

    def acquire(self, name: str, now: datetime, ttl_s: float) -> LeaseHolder:
        """Take the lease when it is free, expired or already ours; returns whoever holds it afterwards."""
        expires = iso(now + timedelta(seconds=ttl_s))
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at"
                " WHERE leases.expires_at <= ? OR leases.holder = excluded.holder",
                (name, self.holder, expires, iso(now)),
            )
            holder, expires_at = tx.query("SELECT holder, expires_at FROM leases WHERE name = ?", (name,))[0]
        return LeaseHolder(holder, expires_at)

    def renew(self, name: str, now: datetime, ttl_s: float) -> bool:
        """Extend our lease; False when it is no longer ours (it expired and another daemon took it)."""
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
                (iso(now + timedelta(seconds=ttl_s)), name, self.holder),
            )
            rows = tx.query("SELECT holder FROM leases WHERE name = ?", (name,))
        return bool(rows) and rows[0][0] == self.holder

    def take_over(self, name: str, dead_holder: str, now: datetime, ttl_s: float) -> bool:
        """Take a lease from a holder known to be dead (compare-and-swap on its name); True when taken."""
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE leases SET holder = ?, expires_at = ? WHERE name = ? AND holder = ?",
                (self.holder, iso(now + timedelta(seconds=ttl_s)), name, dead_holder),
            )
            rows = tx.query("SELECT holder FROM leases WHERE name = ?", (name,))
        return bool(rows) and rows[0][0] == self.holder

    def release(self, name: str) -> None:
        """Give the lease up (only if it is still ours)."""
        self.db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, self.holder))

    def current(self, name: str) -> LeaseHolder | None:
        """Who holds the lease (possibly expired), or None."""
        row = self.db.query_one("SELECT holder, expires_at FROM leases WHERE name = ?", (name,))
        return LeaseHolder(*row) if row else None
