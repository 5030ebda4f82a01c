"""A scheduler test bench: a real database, store, LLM seam (pointed at the scripted server) and a ManualClock.

Everything is the production code path (config parsed by ``parse_config``, the ``LLM`` seam over HTTP, the real
``MemoryStore``); only the model's answers are scripted. Also used by ``tests/lab/job_driver.py``, which runs a
``JobRunner`` in a separate process for the multi-daemon lease test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quinn.agent.llm import LLM
from quinn.agent.prompts import PromptStore
from quinn.clock import ManualClock
from quinn.config import Config, parse_config, resolve_secrets
from quinn.db import Database
from quinn.memory.embed import Embedder
from quinn.memory.store import MemoryStore
from quinn.scheduler.runner import JobRunner

START = "2026-11-22T09:00:00+00:00"


def bench_config(llm_base_url: str, db_url: str, scheduler: dict[str, Any] | None = None) -> Config:
    """A validated Config for the bench (mail servers are never contacted by the scheduler)."""
    raw = {
        "imap": {"host": "127.0.0.1", "username": "quinn@example.test", "password_env": "QUINN_TEST_IMAP_PASSWORD"},
        "smtp": {"host": "127.0.0.1", "from_address": "quinn@example.test"},
        "llm": {"model": "openai/gpt-test", "base_url": llm_base_url, "api_key_env": "QUINN_TEST_LLM_KEY",
                "timeout_s": 20, "max_retries": 0},
        "database": {"url": db_url},
        "scheduler": {"startup_delay_s": 0, **(scheduler or {})},
    }  # fmt: skip
    config = parse_config(raw)
    resolve_secrets(config, {"QUINN_TEST_IMAP_PASSWORD": "x", "QUINN_TEST_LLM_KEY": "test-key"})
    return config


@dataclass
class JobBench:
    """The dependencies of a JobRunner, with a clock the test moves."""

    config: Config
    db: Database
    store: MemoryStore
    llm: LLM
    prompts: PromptStore
    clock: ManualClock

    def runner(self, holder: str | None = None, **settings: Any) -> JobRunner:
        """A JobRunner over this bench; ``settings`` override ``[scheduler]`` keys."""
        section = self.config.scheduler.model_copy(update=settings) if settings else self.config.scheduler
        return JobRunner(self.store, self.llm, self.prompts, section, clock=self.clock, holder=holder)

    def runs(self, job: str | None = None) -> list[dict[str, Any]]:
        """Rows of job_runs, oldest first, counts decoded."""
        where, params = ("WHERE job = ?", (job,)) if job else ("", ())
        rows = self.db.query(
            f"SELECT id, job, started_at, finished_at, status, counts, error FROM job_runs {where} ORDER BY id", params
        )
        keys = ("id", "job", "started_at", "finished_at", "status", "counts", "error")
        return [dict(zip(keys, (*r[:5], json.loads(r[5]), r[6]), strict=True)) for r in rows]

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def open_bench(
    llm_base_url: str, db_url: str, embedder: Embedder | None, *, start: datetime | str = START,
    scheduler: dict[str, Any] | None = None,
) -> JobBench:  # fmt: skip
    """Open (and migrate) the database and build the bench."""
    config = bench_config(llm_base_url, db_url, scheduler)
    db = Database.open(db_url)
    return JobBench(config, db, MemoryStore(db, embedder), LLM(config.llm), PromptStore(), ManualClock(start))


def inbound_mail(sender: str, to: str, subject: str, body: str, message_id: str, *, in_reply_to: str | None = None,
                 date: datetime | None = None, cc: str | None = None) -> bytes:  # fmt: skip
    """An RFC 5322 message from ``sender`` (threaded under ``in_reply_to``, ``cc`` on it), as bytes."""
    from email.message import EmailMessage
    from email.utils import format_datetime

    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    if cc:
        msg["Cc"] = cc
    msg["Subject"] = subject if in_reply_to is None else f"Re: {subject}"
    msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
        msg["References"] = in_reply_to
    msg["Date"] = format_datetime(date or datetime.now().astimezone())
    msg.set_content(body)
    return msg.as_bytes()


@dataclass(frozen=True)
class Thread:
    """A conversation written into the store: its session and the Message-IDs in order."""

    session_id: str
    message_ids: list[str]


def write_thread(db: Database, user: str, quinn: str, subject: str, bodies: list[str], start: datetime,
                 step_min: float = 5.0, prefix: str = "t") -> Thread:  # fmt: skip
    """Store ``bodies`` as one thread through the real parser and ``Sessions``: even ones from ``user``,
    odd ones Quinn's replies; message i is dated ``start + i * step_min``."""
    from datetime import timedelta

    from quinn.mailbox.parse import parse_email
    from quinn.mailbox.threads import Sessions

    sessions = Sessions(db)
    ids: list[str] = []
    session_id = ""
    for index, body in enumerate(bodies):
        at = start + timedelta(minutes=step_min * index)
        message_id = f"<{prefix}-{index + 1}@example.test>"
        parent = ids[-1] if ids else None
        if index % 2 == 0:
            email = parse_email(inbound_mail(user, quinn, subject, body, message_id, in_reply_to=parent, date=at))
            session_id = sessions.assign(email, user, now=at)
            sessions.store_inbound(session_id, user, email)
        else:
            assert parent is not None
            sessions.store_outbound(session_id, user, message_id, parent, f"Re: {subject}", quinn, [user], body)
            sessions.link(session_id, message_id)
            # The conversation store dates a reply when it is stored; back-date it so the thread reads in order.
            db.execute("UPDATE messages SET sent_at = ? WHERE message_id = ? AND direction = 'out'",
                       (at.isoformat(), message_id))  # fmt: skip
        ids.append(message_id)
    return Thread(session_id, ids)
