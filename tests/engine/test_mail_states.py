"""The per-mail state machine, without Dovecot: its graph as data, and the engine's moves on a real libSQL file
with a folder held in memory standing in for the IMAP server, the time from a manual clock.

Only paths that need no model and no SMTP server are driven here (size, parse, policy, duplicates, rate caps,
the setup hold, retries with backoff); the reply itself is covered against the lab (tests/agent/test_mail.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from quinn.clock import ManualClock
from quinn.config import parse_config, resolve_secrets
from quinn.engine import states
from quinn.engine.conversation import Conversation
from quinn.engine.mail import MAX_ATTEMPTS, MailHandler
from quinn.engine.parts import Parts
from quinn.engine.purges import MailboxPurges
from quinn.errors import ConfigError
from quinn.hold import HELD_PREFIX, SetupHold
from quinn.mailbox.imap import Fetched
from quinn.mailbox.outbox import Outbox
from quinn.mailbox.parse import parse_email
from quinn.mailbox.smtp import compose_reply
from quinn.metrics import Metrics

START = "2026-11-24T09:00:00+00:00"
OWN = "quinn@example.test"


# -- the graph -----------------------------------------------------------------------------------------


def test_every_state_is_reachable_from_received_and_final_states_stay_final() -> None:
    reached, todo = {"received"}, ["received"]
    while todo:
        for nxt in states.TRANSITIONS[todo.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    assert reached == states.STATES
    for final in ("replied", "ignored", "rejected", "superseded"):
        assert states.TRANSITIONS[final] == frozenset()
    assert states.TRANSITIONS["drafted"] == {"replied"}  # a reviewer approved the draft and it was sent
    assert "received" not in set().union(*states.TRANSITIONS.values()), "received is only ever the first state"


@pytest.mark.parametrize(("old", "new"), [("replied", "handling"), ("ignored", "deferred"), ("received", "retried"),
                                          ("failed", "handling"), ("handling", "received")])  # fmt: skip
def test_a_move_the_graph_does_not_have_is_refused_by_name(old: str, new: str) -> None:
    with pytest.raises(states.IllegalMove, match=f"from {old} to {new}"):
        states.check(old, new)


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(states.IllegalMove, match="unknown mail state 'lost'"):
        states.check("lost", "handling")


# -- the engine's moves ------------------------------------------------------------------------------------


@dataclass
class Folder:
    """The watched folder, in memory: what ``MailHandler`` asks of the IMAP connection."""

    mails: dict[int, bytes] = field(default_factory=dict)
    uidvalidity: int = 7
    filed: dict[int, tuple[str, bool]] = field(default_factory=dict)

    def fetch(self, uid: int) -> Fetched | None:
        raw = self.mails.get(uid)
        return None if raw is None else Fetched(uid, raw, None)

    def file_away(self, uid: int, folder: str, *, answered: bool) -> None:
        self.mails.pop(uid, None)
        self.filed[uid] = (folder, answered)


def _mail(uid: int, *, sender: str = "alice@example.org", subject: str = "Hello", body: str = "Can you help?",
          headers: dict[str, str] | None = None, message_id: str | None = None) -> bytes:  # fmt: skip
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = sender, OWN, subject
    msg["Message-ID"] = message_id or f"<m{uid}@example.org>"
    for name, value in (headers or {}).items():
        msg[name] = value
    msg.set_content(body)
    return msg.as_bytes()


@dataclass
class Engine:
    parts: Parts
    folder: Folder
    handler: MailHandler
    hold: SetupHold
    clock: ManualClock

    def deliver(self, uid: int, raw: bytes) -> None:
        self.folder.mails[uid] = raw

    async def handle(self, uid: int) -> None:
        await self.handler.handle(uid, len(self.folder.mails.get(uid, b"")))

    def row(self, uid: int) -> tuple[Any, ...]:
        assert self.parts.db is not None
        return self.parts.db.query_one("SELECT state, reason, attempts, next_attempt_at, moved FROM mail_state"
                                       " WHERE uid = ?", (uid,))  # fmt: skip


@pytest.fixture
async def engine(tmp_path: Path) -> Any:
    raw = {
        "imap": {"host": "127.0.0.1", "username": OWN, "password_env": "X_IMAP", "max_message_kb": 64},
        "smtp": {"host": "127.0.0.1", "from_address": OWN},
        # Port 9 is discard: a call to the model here would fail, and so would the test.
        "llm": {"model": "openai/gpt-test", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "X_KEY",
                "timeout_s": 2, "max_retries": 0},
        "database": {"url": str(tmp_path / "quinn.db")},
        "embeddings": {"backend": "none"},
        "policy": {"max_replies_per_sender_per_hour": 1},
    }  # fmt: skip
    config = parse_config(raw)
    resolve_secrets(config, {"X_IMAP": "x", "X_KEY": "k"})
    clock = ManualClock(START)
    metrics = Metrics()
    parts = Parts.build(config, clock, metrics.stage)
    folder = Folder()
    parts.mailbox = folder  # type: ignore[assignment]
    await parts.open_memory()
    assert parts.db is not None

    async def run_db(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await parts.db.run(fn, *args, **kwargs)  # type: ignore[union-attr]

    async def run_imap(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    hold = SetupHold()
    conversation = Conversation(parts, metrics, run_db, MailboxPurges())
    handler = MailHandler(parts, conversation, hold, metrics, run_db, run_imap)
    yield Engine(parts, folder, handler, hold, clock)
    await parts.close()


async def test_too_large_unparseable_and_auto_replies_are_finished_and_filed(engine: Engine) -> None:
    engine.deliver(1, _mail(1, body="x" * 70_000))
    engine.deliver(2, b"\x00")
    engine.deliver(3, _mail(3, headers={"Auto-Submitted": "auto-replied"}))
    for uid in (1, 2, 3):
        await engine.handle(uid)
    assert engine.row(1)[:2] == ("quarantined", "too large: " + engine.row(1)[1].split("too large: ")[1])
    assert "64 KiB" in engine.row(1)[1]
    assert engine.row(2)[0] == "quarantined" and engine.row(2)[1].startswith("unparseable")
    assert engine.row(3)[0] == "ignored"
    assert engine.folder.filed == {1: ("Quinn/Quarantine", False), 2: ("Quinn/Quarantine", False),
                                   3: ("Quinn/Processed", False)}  # fmt: skip
    assert all(engine.row(uid)[4] == 1 for uid in (1, 2, 3)), "every finished mail is marked filed"


async def test_a_mail_gone_before_it_is_read_is_ignored_and_a_second_copy_is_answered_once(engine: Engine) -> None:
    await engine.handler.handle(1, 100)  # expunged between the pass's listing and the fetch
    assert engine.row(1)[:2] == ("ignored", "gone from the folder before it was read")
    assert engine.parts.db is not None
    engine.parts.db.execute("UPDATE mail_state SET state = 'replied', message_id = '<same@example.org>'"
                            " WHERE uid = 1")  # fmt: skip
    engine.deliver(2, _mail(2, message_id="<same@example.org>"))
    await engine.handle(2)
    assert engine.row(2)[:2] == ("ignored", "duplicate of uid 1: replied")


async def test_the_setup_hold_defers_without_a_model_call_or_an_attempt(engine: Engine) -> None:
    engine.hold.fail(ConfigError("the model's key was revoked", "fix llm.api_key_env"), engine.clock.now())
    engine.deliver(1, _mail(1))
    await engine.handle(1)
    state, reason, attempts, until, moved = engine.row(1)
    assert (state, attempts, moved) == ("deferred", 0, 0)
    assert engine.hold.until is not None and until == engine.hold.until.isoformat()
    assert reason.startswith(HELD_PREFIX) and "revoked" in reason
    assert engine.folder.mails.keys() == {1}, "a held mail stays in the folder"


async def test_a_rate_cap_defers_by_the_injected_clock(engine: Engine) -> None:
    assert engine.parts.db is not None
    engine.parts.db.execute(  # one reply to this sender a minute ago, by the manual clock: the cap of 1 is reached
        "INSERT INTO mail_state (folder, uidvalidity, uid, state, received_at, updated_at, replied_at, sender_key)"
        " VALUES ('INBOX', 7, 99, 'replied', ?, ?, ?, 'unverified:alice@example.org')",
        (START, START, (engine.clock.now() - timedelta(minutes=1)).isoformat()))  # fmt: skip
    engine.deliver(1, _mail(1))
    await engine.handle(1)
    state, reason, attempts, until, _moved = engine.row(1)
    assert (state, attempts) == ("deferred", 0) and reason.startswith("rate cap")
    assert until == (engine.clock.now() + timedelta(minutes=59)).isoformat()
    engine.clock.advance(minutes=30)
    await engine.handle(1)  # not due yet by the clock: untouched
    assert engine.row(1)[:4] == (state, reason, attempts, until)


async def test_retries_back_off_by_the_clock_and_give_up_after_max_attempts(engine: Engine) -> None:
    engine.deliver(1, _mail(1))
    key = engine.handler.key(1)
    assert engine.parts.db is not None
    engine.parts.db.execute(
        "INSERT INTO mail_state (folder, uidvalidity, uid, state, received_at, updated_at)"
        " VALUES (?, ?, ?, 'handling', ?, ?)",
        (key.folder, key.uidvalidity, 1, START, START),
    )
    for attempt in range(1, MAX_ATTEMPTS):
        await engine.handler.retry_later(1, "the model timed out")
        state, _reason, attempts, until, _moved = engine.row(1)
        assert (state, attempts) == ("deferred", attempt)
        delay = min(timedelta(minutes=2 ** (attempt - 1)), timedelta(hours=1))
        assert until == (engine.clock.now() + delay).isoformat()
        engine.clock.advance(delay)
    await engine.handler.retry_later(1, "the model timed out")
    state, reason, *_ = engine.row(1)
    assert state == "failed" and reason == f"gave up after {MAX_ATTEMPTS} attempts: the model timed out"
    assert engine.folder.filed[1] == ("Quinn/Quarantine", False)


async def test_a_final_mail_seen_again_is_only_filed_away(engine: Engine) -> None:
    engine.deliver(1, _mail(1))
    key = engine.handler.key(1)
    assert engine.parts.db is not None
    engine.parts.db.execute("INSERT INTO mail_state (folder, uidvalidity, uid, state, reason, received_at,"
                            " updated_at) VALUES (?, ?, ?, 'replied', 'ok', ?, ?)",
                            (key.folder, key.uidvalidity, 1, START, START))  # fmt: skip
    await engine.handle(1)  # a crash between "replied" and "filed away"
    assert engine.row(1)[0] == "replied" and engine.row(1)[4] == 1
    assert engine.folder.filed == {1: ("Quinn/Processed", True)}


async def test_only_a_copy_with_the_replys_text_marks_a_waiting_reply_sent(engine: Engine) -> None:
    """A reply's Message-ID comes from the mail it answers (a digest's is numbered): a stranger who sends one
    while the reply waits for the server must not make Quinn mark it sent and never deliver it."""
    assert engine.parts.db is not None
    asked = parse_email(_mail(9, body="When is the dentist?"))
    reply = compose_reply(asked, "On Tuesday at 9, at the usual place.", own_address=OWN)
    outbox = Outbox(engine.parts.db)
    outbox.put(reply.message_id, asked.message_id, "alice@example.org", None, reply.recipients, reply.raw)
    engine.deliver(1, _mail(1, sender="mallory@example.net", body="Nothing to see.", message_id=reply.message_id))
    await engine.handle(1)
    assert outbox.get(reply.message_id).state == "pending"  # type: ignore[union-attr]
    assert engine.row(1)[:2] == ("ignored", "own mail: Message-ID is one of ours")  # kept, in the processed folder
    assert engine.folder.filed[1] == ("Quinn/Processed", False)
    # Our own copy (the server put its trace on top): the proof the send went through.
    engine.deliver(2, b"Received: by mx.example.test; Tue, 24 Nov 2026 09:00:01 +0000\r\n" + reply.raw)
    await engine.handle(2)
    assert outbox.get(reply.message_id).state == "sent"  # type: ignore[union-attr]
    assert engine.folder.filed[2] == (engine.parts.config.imap.sent_folder, False)
