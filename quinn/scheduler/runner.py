"""The scheduler: APScheduler 3.x inside the daemon's asyncio loop, leases, and the run log.

``JobRunner.start`` registers every enabled job of ``JOBS`` with an interval trigger. The first run of each is
computed from the database: a job last run at T runs next at T + interval; one that was due while the daemon
was down runs once, ``startup_delay_s`` after start (missed runs are coalesced, never replayed one by one), and
jobs run one at a time, so a restart does not stampede the model.

Every run, scheduled or by hand (``quinn jobs run``), takes the job's lease first: when several daemons share a
database only the holder runs it, and a scheduled run is skipped when any daemon ran the job within the current
interval, so each job runs once per interval however many daemons there are. The lease is renewed while the
job runs and released after; a crashed holder's lease expires after ``lease_s`` and the run it left ``running``
is marked ``interrupted``. A run still going after its job's time limit (``JobSpec.timeout``) is stopped and
recorded ``failed``; jobs are resumable, so the next run goes on. Time comes from a ``Clock`` (a ``ManualClock``
in tests), never from a global.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from quinn.agent import LLM, PromptStore, TemplateTrials
from quinn.clock import Clock
from quinn.config import RetentionConfig, SchedulerConfig
from quinn.db import Database
from quinn.errors import QuinnError
from quinn.memory import MemoryStore
from quinn.scheduler.context import JobContext, JobCounts
from quinn.scheduler.jobs import JOBS, JobSpec, job
from quinn.scheduler.runlog import FAILED, INTERRUPTED, OK, JobRun, LeaseHolder, Leases, RunLog

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

JITTER_SHARE, JITTER_MAX_S = 0.1, 60.0  # a run this early still counts as "this interval's run" (timer jitter)
SKIPPED = "skipped"


def _pid_namespace() -> str:
    """This process's pid namespace (containers on one host have their own): pids only compare within one."""
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "?"


def default_holder() -> str:
    """This daemon's name in the leases table: host, pid namespace, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}:{_pid_namespace()}:{os.getpid()}:{secrets.token_hex(3)}"


def holder_is_dead(holder: str) -> bool:
    """True only for a holder on this host and pid namespace whose process is gone (or a zombie).

    A daemon that crashed and was restarted (or ``quinn jobs run`` after a kill) need not wait ``lease_s``:
    its dead predecessor provably runs nothing. Holders elsewhere are never judged: their lease expires.
    """
    parts = holder.split(":")
    if len(parts) != 4 or parts[0] != socket.gethostname() or parts[1] != _pid_namespace() or parts[1] == "?":
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False  # this process under another runner: alive by definition
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    try:  # a zombie answers kill(0) but runs nothing
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def lease_name(job_name: str) -> str:
    """The lease row of a job."""
    return f"job:{job_name}"


@dataclass(frozen=True)
class JobOutcome:
    """What one attempt to run a job did: ok, failed, interrupted, or skipped (with the reason)."""

    job: str
    status: str
    counts: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    reason: str = ""
    run_id: int | None = None
    duration_s: float | None = None


class JobRunner:
    """Runs the jobs of one daemon (or one ``quinn jobs run``): schedule, leases, run log."""

    def __init__(
        self,
        store: MemoryStore,
        llm: LLM | None,
        prompts: PromptStore,
        settings: SchedulerConfig,
        *,
        clock: Clock | None = None,
        holder: str | None = None,
        jobs: Sequence[JobSpec] = JOBS,
        retention: RetentionConfig | None = None,
    ) -> None:
        self.store = store
        self.llm = llm
        self.prompts = prompts
        self.settings = settings
        self.clock = clock or Clock()
        self.holder = holder or default_holder()
        self.jobs = tuple(jobs)
        self.retention = retention or RetentionConfig()
        self.leases = Leases(store.db, self.holder)
        self.runs = RunLog(store.db)
        self._scheduler: AsyncIOScheduler | None = None
        self._one_at_a_time = asyncio.Lock()
        self.trials = TemplateTrials(slots=1)  # jobs run one at a time: one template trial at a time too
        self._ticks: set[asyncio.Task[Any]] = set()

    async def _db(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.store.db.run(fn, *args, **kwargs)

    def use(self, llm: LLM | None, prompts: PromptStore) -> None:
        """Run the next jobs with this model seam and these templates (SIGHUP); a running job keeps its own."""
        self.llm = llm
        self.prompts = prompts

    # -- the schedule ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register every enabled job with APScheduler on the running loop; first runs come from the run log."""
        scheduler = AsyncIOScheduler(
            timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
        )
        now = self.clock.now()
        startup = now + timedelta(seconds=self.settings.startup_delay_s)
        planned = []
        for spec in self.jobs:
            if not spec.enabled(self.settings):
                continue
            interval = spec.interval(self.settings)
            last = await self._db(self.runs.last, spec.name)
            first = max(last.started + interval, startup) if last else startup
            # APScheduler keeps real time; the delay is worked out on our clock and applied to it.
            at = datetime.now(UTC) + (first - now)
            scheduler.add_job(self._tick, IntervalTrigger(seconds=interval.total_seconds(), timezone=UTC),
                              args=(spec.name,), id=spec.name, name=spec.name, next_run_time=at)  # fmt: skip
            planned.append(f"{spec.name} every {_minutes(interval)}")
        scheduler.start()
        self._scheduler = scheduler
        log.info("scheduler started as %s: %s", self.holder, ", ".join(planned) or "no job enabled")

    def next_run(self, name: str) -> datetime | None:
        """When APScheduler will next run ``name`` (real time), or None when not scheduled."""
        if self._scheduler is None:
            return None
        entry = self._scheduler.get_job(name)
        return entry.next_run_time if entry is not None else None

    async def _tick(self, name: str) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._ticks.add(task)
        try:
            await self.run_job(name)
        finally:
            if task is not None:
                self._ticks.discard(task)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop scheduling; a job in flight gets ``grace_s`` to finish, then it is cancelled (and logged so)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.pause()
        in_flight = {t for t in self._ticks if not t.done()}
        if in_flight:
            log.info("waiting up to %.0fs for %d running job(s)", grace_s, len(in_flight))
            _done, late = await asyncio.wait(in_flight, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the next loop iteration
        log.info("scheduler stopped")

    # -- one run ---------------------------------------------------------------------------------------

    async def run_due(self) -> list[JobOutcome]:
        """Try every enabled job once, as the schedule would (skipping those run in this interval)."""
        return [await self.run_job(spec.name) for spec in self.jobs if spec.enabled(self.settings)]

    async def run_job(self, name: str, *, force: bool = False) -> JobOutcome:
        """Run ``name`` once if this daemon gets its lease; ``force`` ignores the interval (``quinn jobs run``)."""
        spec = job(name, self.jobs)
        async with self._one_at_a_time:
            now = self.clock.now()
            lease = lease_name(name)
            try:
                held = await self._db(self.leases.acquire, lease, now, self.settings.lease_s)
            except Exception as exc:  # the database is unreachable: nothing ran, the next tick tries again
                log.warning("job %s: cannot take its lease: %s", name, exc)
                return JobOutcome(name, SKIPPED, reason=f"lease not taken: {exc}")
            if held.holder != self.holder and holder_is_dead(held.holder):
                log.warning("job %s: lease holder %s is dead on this host; taking the lease over", name, held.holder)
                if await self._db(self.leases.take_over, lease, held.holder, now, self.settings.lease_s):
                    held = LeaseHolder(self.holder, "")
            if held.holder != self.holder:
                return JobOutcome(name, SKIPPED, reason=_busy(held))
            try:
                return await self._run_leased(spec, now, force)
            finally:
                with contextlib.suppress(Exception):  # an unreleased lease simply expires
                    await self._db(self.leases.release, lease)

    async def _run_leased(self, spec: JobSpec, now: datetime, force: bool) -> JobOutcome:
        name = spec.name
        why = "interrupted: its daemon stopped before finishing (its lease expired or it died)"
        stale = await self._db(self.runs.interrupt_stale, name, now, why)
        if stale:
            log.warning("job %s: %d run(s) left running by a stopped daemon marked interrupted", name, stale)
        last = await self._db(self.runs.last, name)
        if not force and last is not None and last.started > now - _counted(spec.interval(self.settings)):
            return JobOutcome(name, SKIPPED, reason=f"already ran at {last.started_at} in this interval")
        previous_ok = await self._db(self.runs.last_ok, name)
        cursor = int((previous_ok.counts.get("cursor") if previous_ok else 0) or 0)
        counts = JobCounts(cursor=None, details={"holder": self.holder})
        ctx = JobContext(name, self.store, self.llm, self.prompts, self.settings, self.clock, counts, cursor,
                         retention=self.retention, trials=self.trials)  # fmt: skip
        run_id = await self._db(self.runs.start, name, now, self.holder)
        log.info("job %s started (run %d)", name, run_id)
        started = time.monotonic()
        work = asyncio.ensure_future(spec.run(ctx))
        lost = asyncio.Event()
        heartbeat = asyncio.ensure_future(self._renew(name, work, lost))
        status, error = OK, ""
        limit = spec.timeout(self.settings)
        try:
            async with asyncio.timeout(limit.total_seconds()) as deadline:
                await work
        except TimeoutError as exc:
            if not deadline.expired():  # the job's own TimeoutError (a socket, say): a failure like any other
                status, error = FAILED, f"{exc.__class__.__name__}: {exc}"
                log.exception("job %s failed", name)
            else:
                status = FAILED
                error = (f"timed out after {_minutes(limit)} ([scheduler] timeouts_min): stopped; what it did "
                         "stays and the next run goes on")  # fmt: skip
                log.warning("job %s %s", name, error)
        except asyncio.CancelledError:
            status = INTERRUPTED
            error = "interrupted: the lease was lost to another daemon" if lost.is_set() else "interrupted: stopped"
            if not lost.is_set():
                await self._finish(name, run_id, status, counts, error, started)
                raise
        except QuinnError as exc:
            status, error = FAILED, str(exc)
            log.warning("job %s failed: %s", name, exc)
        except Exception as exc:  # a bug: keep the traceback in the log, the run log gets one line
            status, error = FAILED, f"{exc.__class__.__name__}: {exc}"
            log.exception("job %s failed", name)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        return await self._finish(name, run_id, status, counts, error, started)

    async def _finish(
        self, name: str, run_id: int, status: str, counts: JobCounts, error: str, started: float
    ) -> JobOutcome:
        stored = counts.as_dict()
        await self._db(self.runs.finish, run_id, self.clock.now(), status, stored, error)
        duration = time.monotonic() - started
        shown = {k: v for k, v in stored.items() if k != "details"}
        log.info("job %s %s in %.1fs: %s%s", name, status, duration, shown or "nothing to do",
                 f" ({error})" if error else "")  # fmt: skip
        return JobOutcome(name, status, stored, error, run_id=run_id, duration_s=duration)

    async def _renew(self, name: str, work: asyncio.Future[Any], lost: asyncio.Event) -> None:
        """Keep the lease while the job runs; if another daemon took it (ours expired), stop the job."""
        every_s = max(1.0, self.settings.lease_s / 3)
        while not work.done():
            await asyncio.sleep(every_s)
            try:
                ours = await self._db(self.leases.renew, lease_name(name), self.clock.now(), self.settings.lease_s)
            except Exception as exc:  # the database is away for a moment: try again at the next beat
                log.warning("job %s: lease renewal failed: %s", name, exc)
                continue
            if not ours:
                log.error("job %s: lease lost to another daemon; stopping this run", name)
                lost.set()
                work.cancel()
                return


def _counted(interval: timedelta) -> timedelta:
    """How far back a run counts as this interval's: the interval less a little timer jitter (at most 60 s)."""
    return interval - min(interval * JITTER_SHARE, timedelta(seconds=JITTER_MAX_S))


def _busy(held: LeaseHolder) -> str:
    return f"running in another daemon ({held.holder}, lease until {held.expires_at})"


def _minutes(interval: timedelta) -> str:
    minutes = interval.total_seconds() / 60
    return f"{minutes / 60:g}h" if minutes >= 60 and minutes % 60 == 0 else f"{minutes:g}min"


@dataclass(frozen=True)
class JobStatus:
    """A job as ``quinn jobs list`` shows it."""

    name: str
    enabled: bool
    interval_min: float
    needs_llm: bool
    description: str
    last: JobRun | None
    next_run: datetime | None  # None: at the next daemon start (never ran, or disabled)
    lease: LeaseHolder | None
    timeout_min: float = 0.0
    tunables: dict[str, Any] = field(default_factory=dict)  # the [scheduler] settings it reads, with their values


def job_statuses(db: Database, settings: SchedulerConfig, now: datetime,
                 jobs: Sequence[JobSpec] = JOBS) -> list[JobStatus]:  # fmt: skip
    """Every job with its last run, its next run as the schedule computes it, and a live lease if any."""
    runs = RunLog(db)
    leases = Leases(db, holder="")
    out = []
    for spec in jobs:
        interval = spec.interval(settings)
        latest = runs.runs(spec.name, limit=1)
        counted = runs.last(spec.name)
        enabled = spec.enabled(settings)
        next_run = max(counted.started + interval, now) if (enabled and counted) else None
        lease = leases.current(lease_name(spec.name))
        if lease is not None and datetime.fromisoformat(lease.expires_at) <= now:
            lease = None  # expired: its holder is gone
        out.append(JobStatus(spec.name, enabled, interval.total_seconds() / 60, spec.needs_llm, spec.description,
                             latest[0] if latest else None, next_run, lease,
                             spec.timeout(settings).total_seconds() / 60,
                             {key: getattr(settings, key) for key in spec.tunables}))  # fmt: skip
    return out
