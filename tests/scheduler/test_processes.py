"""The scheduler across processes: two daemons on one sqld database, a job killed half way, the daemon and CLI.

Separate processes on purpose: that is how daemons share a database, and two libSQL connections in one
process deadlock on the GIL while one waits for the other's write lock (FACTS.md).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quinn.db import Database
from quinn.lab.wait import wait_for
from quinn.scheduler.jobs import JOBS
from tests.lab.llm_server import Delay, RecordedRequest, Text
from tests.lab.process import kill_group
from tests.lab.scheduler import open_bench
from tests.lab.sqld import Sqld

ROOT = Path(__file__).resolve().parents[2]
MERGE = "consolidate"  # the purpose the consolidation call is tagged with


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(extra or {})}


def default_interval(spec) -> timedelta:
    """The drivers run with default settings."""
    return timedelta(minutes=spec.default_interval_min)


class Driver:
    """tests/lab/job_driver.py in its own process group."""

    def __init__(self, db_url: str, llm_url: str, holder: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.job_driver", db_url, llm_url, holder], cwd=ROOT, env=child_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self):
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"job driver exited with {self.proc.wait()}:\n{stderr[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.timeout(300)  # subprocesses each import the model SDKs (and torch): slow on a busy box
def test_two_daemons_on_one_sqld_database_run_each_job_once_per_interval(llm_server):
    server = Sqld()
    server.start()
    drivers: list[Driver] = []
    try:
        Database.open(server.url).close()  # migrate once, before the two daemons start
        drivers = [Driver(server.url, llm_server.openai_base_url, holder) for holder in ("daemon-a", "daemon-b")]
        assert [d.answer() for d in drivers] == [{"ready": "daemon-a"}, {"ready": "daemon-b"}]
        start = datetime.fromisoformat("2026-11-22T10:00:00+00:00")
        step = timedelta(minutes=5)  # the shortest interval (session_close)
        ticks = [start + step * k for k in range(37)]  # three hours
        for at in ticks:
            for driver in drivers:  # both get the tick at once and compete for every job
                driver.send(f"tick {at.isoformat()}")
            answers = [driver.answer() for driver in drivers]
            for spec in JOBS:
                statuses = sorted(o["status"] for answer in answers for o in answer if o["job"] == spec.name)
                due = (at - start) % default_interval(spec) == timedelta(0)
                assert statuses == (["ok", "skipped"] if due else ["skipped", "skipped"]), (at, spec.name, answers)
        for driver in drivers:
            driver.send("quit")
            assert driver.answer() == {"bye": True}
        db = Database.open(server.url)
        rows = db.query("SELECT job, started_at, status, json_extract(counts, '$.details.holder') FROM job_runs")
        db.close()
        for spec in JOBS:
            runs = sorted(r[1] for r in rows if r[0] == spec.name)
            expected = [at.isoformat() for at in ticks if (at - start) % default_interval(spec) == timedelta(0)]
            assert runs == expected, spec.name  # exactly once per interval, never twice
        assert {r[2] for r in rows} == {"ok"} and {r[3] for r in rows} <= {"daemon-a", "daemon-b"}
    finally:
        for driver in drivers:
            driver.close()
        server.close()


TOPICS = {
    "garden": ["Dana grows tomatoes in raised beds.", "Dana's roses won a prize at the fair.",
               "Dana composts her kitchen scraps.", "Dana wants a greenhouse next spring.",
               "Dana lost her apple tree in a storm."],
    "work": ["Dana is a structural engineer.", "Dana's office moved to the harbour district.",
             "Dana leads a team of six.", "Dana presents to the board every quarter.",
             "Dana's contract renews in April."],
    "travel": ["Dana flew to Lisbon last spring.", "Dana prefers window seats.", "Dana has a Japan rail pass.",
               "Dana hates overnight buses.", "Dana plans a trip to Iceland in winter."],
    "music": ["Dana plays the cello.", "Dana sings in a choir on Thursdays.", "Dana's favourite composer is Bach.",
              "Dana collects jazz vinyl.", "Dana went to a Radiohead concert in 2019."],
}  # fmt: skip


def seed_groups(lab, llm_server, embedder, topics: dict[str, list[str]]) -> list[int]:
    bench = open_bench(llm_server.openai_base_url, str(lab.db_path), embedder)
    try:
        return [bench.store.add("dana@example.test", text, scope="episodic", tags=[tag])
                for tag, texts in topics.items() for text in texts]  # fmt: skip
    finally:
        bench.close()


def check_consolidation_state(db_path: Path, originals: list[int]) -> tuple[int, int]:
    """No memory both current and merged away; every merge complete. Returns (merged originals, merges)."""
    db = Database.open(str(db_path))
    try:
        assert db.query("SELECT id FROM memories WHERE superseded_by IS NOT NULL AND valid_to IS NULL") == []
        merges = db.query("SELECT id, metadata FROM memories WHERE json_extract(metadata, '$.merged_ids') IS NOT NULL"
                          " AND active = 1 AND superseded_by IS NULL")  # fmt: skip
        covered: list[int] = []
        for merged_id, metadata in merges:
            for source in json.loads(metadata)["merged_ids"]:
                row = db.query_one("SELECT superseded_by, valid_to FROM memories WHERE id = ?", (source,))
                assert row is not None and row[0] == merged_id and row[1] is not None
                covered.append(source)
        assert len(covered) == len(set(covered))  # no memory merged twice
        placeholders = ",".join("?" * len(originals))
        current = db.query(f"SELECT id FROM memories WHERE id IN ({placeholders}) AND superseded_by IS NULL"
                           " AND active = 1", originals)  # fmt: skip
        assert len(current) + len(covered) == len(originals)  # every original is either current or merged
        return len(covered), len(merges)
    finally:
        db.close()


def merge_responder(hold_at: int | None):
    seen: list[int] = []

    def respond(request: RecordedRequest):
        if request.purpose != MERGE:
            return None
        seen.append(1)
        first = request.text.split("] ", 1)[1].split("\n", 1)[0].split(") ", 1)[1]
        answer = Text(f"Merged: {first} And more.")
        return Delay(120, answer) if len(seen) == hold_at else answer

    return respond, seen


@pytest.mark.timeout(300)  # subprocesses each import the model SDKs (and torch): slow on a busy box
def test_killed_consolidation_leaves_no_memory_both_current_and_merged(lab_config, llm_server, local_embedder,
                                                                     quinn_daemon):  # fmt: skip
    lab = lab_config()
    originals = seed_groups(lab, llm_server, local_embedder, TOPICS)
    respond, seen = merge_responder(hold_at=3)
    llm_server.responder = respond
    first = quinn_daemon(lab, "jobs", "run", "consolidate")

    def third_group_held() -> bool:
        assert first.proc is not None and first.proc.poll() is None, first.log()[-3000:]
        return len(seen) >= 3

    wait_for(third_group_held, "the third group at the model", 120, interval_s=0.05, log=first.log)
    first.kill()  # SIGKILL while the third group waits for the model
    assert check_consolidation_state(lab.db_path, originals) == (10, 2)  # two groups merged, two untouched

    llm_server.responder, seen = merge_responder(hold_at=None)
    second = quinn_daemon(lab, "jobs", "run", "consolidate")
    assert second.proc is not None and second.proc.wait(timeout=120) == 0, second.log()[-3000:]
    assert "consolidate: ok" in second.log() and "merged 10" in second.log()
    assert check_consolidation_state(lab.db_path, originals) == (20, 4)
    db = Database.open(str(lab.db_path))
    runs = db.query("SELECT status, error FROM job_runs WHERE job = 'consolidate' ORDER BY id")
    db.close()
    assert [r[0] for r in runs] == ["interrupted", "ok"] and "died" in runs[0][1]


@pytest.mark.long
@pytest.mark.timeout(900)
def test_consolidation_killed_at_random_points_always_stays_consistent(lab_config, llm_server, local_embedder,
                                                                       quinn_daemon):  # fmt: skip
    lab = lab_config()
    topics = {f"{tag}{n}": texts for n in range(3) for tag, texts in TOPICS.items()}
    originals = seed_groups(lab, llm_server, local_embedder, topics)
    rng = random.Random(4)
    llm_server.responder, _seen = merge_responder(hold_at=None)
    for _attempt in range(6):
        proc = quinn_daemon(lab, "jobs", "run", "consolidate")
        proc.wait_for_log("job consolidate started", timeout_s=120)
        time.sleep(rng.uniform(0.0, 1.5))  # anywhere: model call, embedding, the supersede transaction
        proc.kill()
        check_consolidation_state(lab.db_path, originals)
    last = quinn_daemon(lab, "jobs", "run", "consolidate")
    assert last.proc is not None and last.proc.wait(timeout=300) == 0, last.log()[-3000:]
    merged, _merges = check_consolidation_state(lab.db_path, originals)
    assert merged == len(originals)  # (identical sentences under three tags merge as near-duplicates first)


def quinn_cli(lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quinn", *args, "-c", str(lab.path)], capture_output=True,
                          text=True, timeout=180, env=child_env(lab.env), cwd=ROOT)  # fmt: skip


@pytest.mark.timeout(300)  # subprocesses each import the model SDKs (and torch): slow on a busy box
def test_the_daemon_runs_every_job_and_the_cli_lists_and_runs_them(lab_config, quinn_daemon):
    lab = lab_config(extra='[embeddings]\nbackend = "none"\n[scheduler]\nstartup_delay_s = 0\n'
                           'disabled = ["reflect"]\nintervals_min = { cleanup = 720 }\n')  # fmt: skip
    daemon = quinn_daemon(lab)
    daemon.wait_for_log("scheduler started", timeout_s=120)

    expected = sorted((s.name, "ok") for s in JOBS if s.name != "reflect")

    def finished() -> list[tuple[str, str]]:
        db = Database.open(str(lab.db_path))
        try:
            done = db.query("SELECT job, status FROM job_runs WHERE finished_at IS NOT NULL")
        finally:
            db.close()
        return done if len(done) >= len(expected) else []  # every enabled job, not a fixed count

    done = wait_for(finished, f"{len(expected)} jobs finished", 120, interval_s=0.2, log=daemon.log)
    assert sorted(done) == expected, daemon.log()[-3000:]

    listed = quinn_cli(lab, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = {j["name"]: j for j in json.loads(listed.stdout)}
    assert list(jobs) == [s.name for s in JOBS]
    assert jobs["reflect"]["enabled"] is False and jobs["reflect"]["last_run"] is None
    cleanup = jobs["cleanup"]
    assert cleanup["interval_min"] == 720 and cleanup["last_run"]["status"] == "ok"
    assert cleanup["timeout_min"] == 15 and cleanup["tunables"]["cleanup_unused_days"] == 30
    started = datetime.fromisoformat(cleanup["last_run"]["started_at"])
    assert datetime.fromisoformat(cleanup["next_run"]) == started + timedelta(minutes=720)
    assert daemon.terminate() == 0
    assert "scheduler stopped" in daemon.log()

    table = quinn_cli(lab, "jobs", "list")
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["JOB", "EVERY", "LIMIT", "LLM", "LAST", "RUN", "RESULT", "COUNTS", "NEXT", "RUN"]
    assert [line.split()[0] for line in lines[1 : len(JOBS) + 1]] == [s.name for s in JOBS]
    assert "  reflect: reflect_min_episodes = 3, reflect_similarity = 0.6, core_update_min_days = 7.0" in lines
    assert "disabled" in next(line for line in lines if line.startswith("reflect"))

    ran = quinn_cli(lab, "jobs", "run", "reflect")  # disabled jobs still run by hand
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("reflect: ok in ")
    db = Database.open(str(lab.db_path))
    db.execute("INSERT INTO leases (name, holder, expires_at) VALUES ('job:decay', 'other-host:1:2:3', ?)",
               ((datetime.now(UTC) + timedelta(minutes=5)).isoformat(),))  # fmt: skip
    db.close()
    busy = quinn_cli(lab, "jobs", "run", "decay")
    assert busy.returncode == 1
    assert busy.stdout.strip().startswith("decay: not run: running in another daemon (other-host:1:2:3")
    unknown = quinn_cli(lab, "jobs", "run", "nap")
    assert unknown.returncode == 2 and "invalid choice: 'nap'" in unknown.stderr
