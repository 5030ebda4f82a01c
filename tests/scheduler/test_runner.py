"""The scheduler's wiring: jobs as data, the run log, intervals, leases, coalesced missed runs, shutdown.

Real libSQL file (and a real sqld for the shared-database cases), the real JobRunner with APScheduler on the
test's event loop, and a ManualClock: no test sleeps for the time it checks.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from quinn.agent.prompts import PromptStore
from quinn.clock import iso
from quinn.config import JOB_NAMES
from quinn.lab.wait import wait_for_async
from quinn.scheduler.context import JobContext
from quinn.scheduler.jobs import JOBS, JobSpec
from quinn.scheduler.runner import JobRunner
from tests.lab.llm_server import Error
from tests.lab.scheduler import open_bench
from tests.lab.sqld import Sqld

OTHER_JOBS = [name for name in JOB_NAMES if name != "decay"]


@pytest.fixture
def bench(tmp_path, llm_server):
    bench = open_bench(llm_server.openai_base_url, str(tmp_path / "quinn.db"), None)
    try:
        yield bench
    finally:
        bench.close()


def add_summary_row(bench, session: str, reward: float | None, version: str, at: str) -> None:
    bench.db.execute(
        "INSERT INTO conversation_summaries (session_id, user_id, summary, reward_score, prompt_version,"
        " improvement_suggestion, created_at) VALUES (?, 'a@example.test', 's', ?, ?, 'shorter', ?)",
        (session, reward, version, at),
    )


def test_jobs_are_declared_once_as_data():
    assert tuple(spec.name for spec in JOBS) == JOB_NAMES
    assert len({spec.name for spec in JOBS}) == len(JOBS)
    prompts = PromptStore()
    for name in ("summarize", "session_close", "consolidate", "reflect", "entities"):
        assert prompts.load(name).version.startswith(f"{name}@")


async def test_run_is_recorded_with_counts_times_and_duration(bench):
    add_summary_row(bench, "s1", 1.0, "reply@aaa", "2026-11-20T10:00:00+00:00")
    add_summary_row(bench, "s2", 0.0, "reply@aaa", "2026-11-20T11:00:00+00:00")
    add_summary_row(bench, "s3", -1.0, "reply@bbb", "2026-11-21T10:00:00+00:00")
    assert bench.runs() == []
    outcome = await bench.runner(holder="me").run_job("improvement")
    assert outcome.status == "ok"
    [run] = bench.runs()
    assert run["job"] == "improvement" and run["status"] == "ok" and run["error"] == ""
    assert run["started_at"] == run["finished_at"] == "2026-11-22T09:00:00+00:00"  # the ManualClock's time
    assert run["counts"]["processed"] == 3
    versions = {v["prompt_version"]: v for v in run["counts"]["details"]["versions"]}
    assert versions["reply@aaa"]["conversations"] == 2 and versions["reply@aaa"]["mean_reward"] == 0.5
    assert versions["reply@bbb"]["mean_reward"] == -1.0
    assert run["counts"]["details"]["holder"] == "me"
    assert bench.db.query("SELECT * FROM leases") == []  # released after the run


async def test_once_per_interval_unless_forced(bench):
    runner = bench.runner()
    assert (await runner.run_job("decay")).status == "ok"
    bench.clock.advance(minutes=30)  # decay runs hourly
    skipped = await runner.run_job("decay")
    assert skipped.status == "skipped" and "already ran at 2026-11-22T09:00:00+00:00" in skipped.reason
    assert (await runner.run_job("decay", force=True)).status == "ok"  # `quinn jobs run decay`
    bench.clock.advance(minutes=60)
    assert (await runner.run_job("decay")).status == "ok"
    assert [r["started_at"][11:16] for r in bench.runs("decay")] == ["09:00", "09:30", "10:30"]


async def test_live_lease_of_another_daemon_is_respected(bench):
    bench.db.execute("INSERT INTO leases (name, holder, expires_at) VALUES ('job:decay', 'other-daemon', ?)",
                     (iso(bench.clock.now() + timedelta(minutes=5)),))  # fmt: skip
    outcome = await bench.runner(holder="me").run_job("decay", force=True)
    assert outcome.status == "skipped"
    assert "other-daemon" in outcome.reason
    assert bench.runs() == []
    assert bench.db.query("SELECT holder FROM leases") == [("other-daemon",)]  # not taken, not released


async def test_crashed_holders_lease_expires_and_its_run_is_marked_interrupted(bench):
    now = bench.clock.now()
    bench.db.execute("INSERT INTO leases (name, holder, expires_at) VALUES ('job:cleanup', 'crashed', ?)",
                     (iso(now + timedelta(seconds=600)),))  # fmt: skip
    bench.db.execute("INSERT INTO job_runs (job, started_at, status) VALUES ('cleanup', ?, 'running')", (iso(now),))
    runner = bench.runner(holder="me")
    assert (await runner.run_job("cleanup")).status == "skipped"
    bench.clock.advance(seconds=601)  # the crashed daemon never renewed its lease
    outcome = await runner.run_job("cleanup")
    assert outcome.status == "ok"
    crashed, mine = bench.runs("cleanup")
    assert crashed["status"] == "interrupted" and "lease expired" in crashed["error"]
    assert mine["status"] == "ok" and mine["counts"]["details"]["holder"] == "me"
    assert bench.db.query("SELECT * FROM leases") == []


async def test_failure_is_recorded_and_leaves_data_alone(bench, local_embedder, llm_server):
    bench.store.embedder = local_embedder
    user = "carol@example.test"
    facts = ["grows beans", "has a pond", "owns a wheelbarrow", "keeps bees", "planted a hedge"]
    ids = [bench.store.add(user, f"Carol {fact}.", tags=[tag]) for tag in ("garden", "yard") for fact in facts]
    llm_server.script(Error(500, "model down"), Error(500, "model down"))  # twice in a row: the model is down
    outcome = await bench.runner().run_job("consolidate")
    assert outcome.status == "failed"
    assert "model down" in outcome.error
    [run] = bench.runs("consolidate")
    assert run["status"] == "failed" and "model down" in run["error"]
    assert len(run["counts"]["details"]["failed_items"]) == 2
    assert all(bench.store.get(i).current for i in ids)
    assert bench.db.query("SELECT * FROM leases") == []


async def test_start_registers_jobs_and_coalesces_missed_runs(bench):
    now = bench.clock.now()
    # decay last ran ten days ago (240 hourly runs missed while down); consolidate an hour ago (every 6 h).
    bench.db.execute("INSERT INTO job_runs (job, started_at, finished_at, status) VALUES ('decay', ?, ?, 'ok')",
                     (iso(now - timedelta(days=10)), iso(now - timedelta(days=10))))  # fmt: skip
    bench.db.execute("INSERT INTO job_runs (job, started_at, finished_at, status) VALUES ('consolidate', ?, ?, 'ok')",
                     (iso(now - timedelta(hours=1)), iso(now - timedelta(hours=1))))  # fmt: skip
    runner = bench.runner(disabled=["summarize", "session_close", "cleanup", "reflect", "improvement"])
    before = datetime.now(UTC)
    await runner.start()
    try:
        consolidate_at = runner.next_run("consolidate")
        assert consolidate_at is not None
        assert timedelta(hours=4, minutes=59) < consolidate_at - before < timedelta(hours=5, minutes=1)
        assert runner.next_run("cleanup") is None  # disabled: not registered
        await wait_for_async(lambda: len(bench.runs("decay")) >= 2, "two runs of decay", 30, interval_s=0.05)
        decay_at = runner.next_run("decay")
    finally:
        await runner.stop()
    runs = bench.runs("decay")
    assert [r["status"] for r in runs] == ["ok", "ok"]  # one run for the whole downtime, not 240
    assert decay_at is not None and timedelta(minutes=59) < decay_at - before < timedelta(minutes=61)


def slow_job(started: asyncio.Event, timeout_min: float = 60, stopped: list[str] | None = None):
    async def run(ctx: JobContext) -> None:
        ctx.counts.processed = 1
        started.set()
        try:
            await asyncio.Event().wait()  # never finishes on its own
        finally:
            if stopped is not None:
                stopped.append("cancelled")

    return JobSpec("slow", run, "interval", 60, needs_llm=False, uses_embeddings=False, description="test job",
                   default_timeout_min=timeout_min)  # fmt: skip


async def test_a_run_over_its_time_limit_is_stopped_and_recorded_failed(bench):
    started, stopped = asyncio.Event(), []
    runner = JobRunner(bench.store, None, bench.prompts, bench.config.scheduler, clock=bench.clock,
                       jobs=[slow_job(started, timeout_min=0.005, stopped=stopped)])  # fmt: skip
    outcome = await asyncio.wait_for(runner.run_job("slow"), 30)
    assert outcome.status == "failed" and outcome.error.startswith("timed out after 0.005min")
    assert stopped == ["cancelled"]  # the job itself was stopped, not left running behind the record
    [run] = bench.runs("slow")
    assert run["status"] == "failed" and run["counts"]["processed"] == 1  # what it did is kept
    assert bench.db.query("SELECT * FROM leases") == []
    # The operator's limit wins over the declaration's.
    settings = bench.config.scheduler.model_copy(update={"timeouts_min": {"slow": 0.001}})
    stopped.clear()
    runner = JobRunner(bench.store, None, bench.prompts, settings, clock=bench.clock,
                       jobs=[slow_job(asyncio.Event(), timeout_min=600, stopped=stopped)])  # fmt: skip
    outcome = await asyncio.wait_for(runner.run_job("slow", force=True), 30)
    assert outcome.error.startswith("timed out after 0.001min") and stopped == ["cancelled"]


async def test_a_jobs_own_timeout_error_is_an_ordinary_failure(bench):
    async def run(ctx: JobContext) -> None:
        raise TimeoutError("the socket timed out")

    spec = JobSpec("sock", run, "interval", 60, needs_llm=False, uses_embeddings=False, description="test job",
                   default_timeout_min=60)  # fmt: skip
    runner = JobRunner(bench.store, None, bench.prompts, bench.config.scheduler, clock=bench.clock, jobs=[spec])
    outcome = await runner.run_job("sock")
    assert outcome.status == "failed" and outcome.error == "TimeoutError: the socket timed out"


GENERAL_SETTINGS = {"enabled", "disabled", "intervals_min", "timeouts_min", "startup_delay_s", "lease_s"}


def test_each_job_declares_the_settings_its_module_reads():
    import inspect
    import re
    import sys

    from quinn.config import SchedulerConfig

    fields = set(SchedulerConfig.model_fields)
    claimed: set[str] = set()
    for spec in JOBS:
        source = inspect.getsource(sys.modules[spec.run.__module__])
        read = set(re.findall(r"settings\.(\w+)", source)) & fields
        assert read == set(spec.tunables), f"{spec.name} reads {sorted(read)}, declares {sorted(spec.tunables)}"
        assert spec.timeout(SchedulerConfig()).total_seconds() > 0
        claimed |= read
    assert fields - GENERAL_SETTINGS == claimed  # every job setting belongs to a job that reads it


async def test_stop_gives_running_jobs_a_grace_period_then_records_them_interrupted(bench):
    started = asyncio.Event()
    runner = JobRunner(bench.store, None, bench.prompts, bench.config.scheduler, clock=bench.clock,
                       jobs=[slow_job(started)])  # fmt: skip
    await runner.start()
    await asyncio.wait_for(started.wait(), 30)
    await runner.stop(grace_s=0.1)
    [run] = bench.runs("slow")
    assert run["status"] == "interrupted" and run["error"] == "interrupted: stopped"
    assert run["counts"]["processed"] == 1
    assert bench.db.query("SELECT * FROM leases") == []


async def test_a_run_that_loses_its_lease_stops(bench):
    started = asyncio.Event()
    settings = bench.config.scheduler.model_copy(update={"lease_s": 3.0})  # renewed every second
    runner = JobRunner(bench.store, None, bench.prompts, settings, clock=bench.clock, jobs=[slow_job(started)])
    task = asyncio.ensure_future(runner.run_job("slow"))
    await asyncio.wait_for(started.wait(), 30)
    # Another daemon took the lease (ours expired while, say, the machine was suspended).
    bench.db.execute("UPDATE leases SET holder = 'other-daemon' WHERE name = 'job:slow'")
    outcome = await asyncio.wait_for(task, 30)
    assert outcome.status == "interrupted" and "lease was lost" in outcome.error
    assert bench.runs("slow")[0]["status"] == "interrupted"
    assert bench.db.query("SELECT holder FROM leases") == [("other-daemon",)]


@pytest.fixture
def private_sqld():
    server = Sqld()
    server.start()
    try:
        yield server
    finally:
        server.close()


async def test_two_daemons_on_one_sqld_database_share_the_interval(private_sqld, llm_server):
    # Sequential on purpose: two connections in ONE process deadlock on the GIL while one waits for the other's
    # write lock (FACTS.md). Concurrent daemons are separate processes: test_scheduler_crash.py runs them so.
    first = open_bench(llm_server.openai_base_url, private_sqld.url, None)
    second = open_bench(llm_server.openai_base_url, private_sqld.url, None)  # its own connection and clock
    try:
        a, b = first.runner(holder="daemon-a"), second.runner(holder="daemon-b")
        assert (await a.run_job("decay")).status == "ok"
        second.clock.advance(minutes=20)
        later = await b.run_job("decay")
        assert later.status == "skipped" and "already ran" in later.reason
        second.clock.advance(minutes=45)
        assert (await b.run_job("decay")).status == "ok"
        holders = [r["counts"]["details"]["holder"] for r in first.runs("decay")]
        assert holders == ["daemon-a", "daemon-b"]
    finally:
        first.close()
        second.close()


def test_config_rejects_unknown_jobs(tmp_path):
    from quinn.config import parse_config
    from quinn.errors import ConfigError

    base = {"imap": {"host": "h", "username": "u", "password_env": "P"}, "smtp": {"host": "h", "from_address": "q@x.y"},
            "llm": {"model": "ollama/m", "base_url": "http://127.0.0.1:1/v1"}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"scheduler\.disabled: unknown job reflection"):
        parse_config({**base, "scheduler": {"disabled": ["reflection"]}})
    with pytest.raises(ConfigError, match=r"scheduler\.intervals_min: unknown job sumarize"):
        parse_config({**base, "scheduler": {"intervals_min": {"sumarize": 5}}})
    with pytest.raises(ConfigError, match="intervals must be positive minutes: decay"):
        parse_config({**base, "scheduler": {"intervals_min": {"decay": 0}}})
    with pytest.raises(ConfigError, match=r"scheduler\.timeouts_min: unknown job reflection"):
        parse_config({**base, "scheduler": {"timeouts_min": {"reflection": 5}}})
    with pytest.raises(ConfigError, match="time limits must be positive minutes: reflect"):
        parse_config({**base, "scheduler": {"timeouts_min": {"reflect": -1}}})
    assert parse_config({**base, "scheduler": {"timeouts_min": {"reflect": 360}}}).scheduler.timeouts_min == {
        "reflect": 360
    }


async def test_a_dead_holder_on_this_host_is_taken_over_without_waiting(bench):
    import subprocess

    from quinn.scheduler.runner import default_holder

    gone = subprocess.Popen(["true"])
    gone.wait()
    host, namespace, _pid, _rand = default_holder().split(":")
    dead = f"{host}:{namespace}:{gone.pid}:abcdef"
    now = bench.clock.now()
    bench.db.execute("INSERT INTO leases (name, holder, expires_at) VALUES ('job:cleanup', ?, ?)",
                     (dead, iso(now + timedelta(seconds=600))))  # fmt: skip
    bench.db.execute("INSERT INTO job_runs (job, started_at, status) VALUES ('cleanup', ?, 'running')", (iso(now),))
    outcome = await bench.runner().run_job("cleanup")
    assert outcome.status == "ok"  # no waiting for the 600 s lease: its holder provably runs nothing
    assert [r["status"] for r in bench.runs("cleanup")] == ["interrupted", "ok"]
    # A live holder elsewhere (another host) is never judged: its lease is respected until it expires.
    bench.db.execute("INSERT INTO leases (name, holder, expires_at) VALUES ('job:decay', ?, ?)",
                     (f"elsewhere:{namespace}:{gone.pid}:abcdef", iso(now + timedelta(seconds=600))))  # fmt: skip
    assert (await bench.runner().run_job("decay")).status == "skipped"
