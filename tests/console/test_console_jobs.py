"""The Jobs and health page in-process over a real libSQL file: the jobs with their last runs, "run now" (admin
role, CSRF, audited) through the runner ``quinn jobs run`` uses, and the memory-health figures from what the
reply path, learning and the reflect job record."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log, reply_trace
from quinn.agent.reply_trace import ShownMemory, ShownPassage, Trace
from quinn.clock import utcnow
from quinn.config import load_config
from quinn.console.routes import build_app
from quinn.console.serve import job_parts
from quinn.lab.wait import wait_for
from quinn.scheduler.jobs import JOBS
from quinn.scheduler.runlog import OK, RunLog
from tests.console.conftest import ALICE, csrf_of, log_in


@pytest.fixture
def client(world, monkeypatch):
    env = {"Q_IMAP": "x", "Q_CONSOLE_ROOT": "x", "Q_CONSOLE_VIEWER": "x"}
    config = load_config(world.config_path, env=env)
    for key, value in job_parts(config, world.store).items():
        setattr(world.console, key, value)
    with TestClient(build_app(world.console), base_url="http://127.0.0.1") as client:
        yield client


def figure(page: str, name: str) -> str:
    match = re.search(rf'id="figure-{name}">([^<]*)<', page)
    assert match, name
    return match.group(1)


def test_health_figures_come_from_what_replies_learning_and_reflect_recorded(world, client):
    db, now = world.store.db, utcnow()
    log_in(client)
    page = client.get("/jobs").text
    assert all(f'id="job-{spec.name}"' in page for spec in JOBS) and "never" in page
    assert figure(page, "gate-rejection-rate") == "no data" and figure(page, "core-stability") == "100%"
    searched = Trace(memories=(ShownMemory(world.memory_id, "search", 0.8, 0.7),))
    recalled = Trace(passages=(ShownPassage(1, 0.5, 0.4),))
    for n, (trace, gate, learnt) in enumerate([(searched, reply_trace.PASSED, 2), (Trace(), reply_trace.REJECTED, None),
                                               (recalled, reply_trace.PASSED, 0), (Trace(), "", None)]):  # fmt: skip
        # All today (the chart has a bar a day): minutes after midnight, so a run just after midnight passes too.
        at = now.replace(hour=0, minute=n, second=0)
        reply_trace.record(db, ALICE, f"<m{n}@x>", "reply", "reply@abc", trace, at)
        if gate:
            reply_trace.learnt(db, f"<m{n}@x>", gate, learnt)
    runs = RunLog(db)
    runs.finish(runs.start("reflect", now, "test"), now, OK, {"processed": 4, "promoted": 1})
    world.store.update(world.memory_id, "Alice's sister is called Joanna")  # one of 3 current profile memories
    page = client.get("/jobs").text
    assert figure(page, "gate-rejection-rate") == "33%"  # 1 of the 3 mails learning decided on
    assert figure(page, "extraction-yield") == "1.00 per mail"  # 2 memories from 2 extracted mails
    assert figure(page, "retrieval-hit-rate") == "50%"  # 2 of 4 replies got something from search
    assert figure(page, "promotion-rate") == "25%"
    assert figure(page, "core-stability") == "67%"  # 1 change per 3 current profile memories
    assert page.count("<svg") == 5 and "<script" not in page
    assert f"{now.date().isoformat()}: 33%" in page  # today's bar of the gate chart


def test_run_now_runs_the_job_audited_and_only_for_the_admin_role(world, client):
    log_in(client, "viewer")
    page = client.get("/jobs").text
    assert "Run now" not in page
    refused = client.post("/jobs/decay/run", data={"csrf": csrf_of(page)})
    assert refused.status_code == 403 and "read-only" in refused.text
    client.post("/logout", data={"csrf": csrf_of(page)})
    log_in(client)
    page = client.get("/jobs").text
    assert 'id="run-decay"' in page
    assert client.post("/jobs/decay/run", data={}).status_code == 403  # no CSRF token
    assert client.post("/jobs/nosuchjob/run", data={"csrf": csrf_of(page)}).status_code == 400
    started = client.post("/jobs/decay/run", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"] == "/jobs?started=decay"
    runs = RunLog(world.store.db)
    wait_for(lambda: [r for r in runs.runs("decay") if r.status != "running"], "the decay run finished", 30)
    [run] = runs.runs("decay")
    assert run.status == OK, run.error
    [entry] = audit_log.listing(world.store.db)
    assert (entry.actor, entry.action, entry.object) == ("root", "run job", "job decay")
    page = client.get("/jobs").text
    assert re.search(r'id="job-decay">.*?status-ok', page, re.S)
    assert "run job" in client.get("/audit").text
