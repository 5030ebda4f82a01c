"""`quinn run` against the real lab: polling, size limit and quarantine, every IMAP failure mode, a password
rejected while running, draft mode, SMTP refusals, reply-all, rate caps and a UIDVALIDITY change."""

from __future__ import annotations

import email
import email.policy
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from quinn.lab.wait import wait_for
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import Error, RecordedRequest, ScriptedLLM
from tests.lab.mails import ledger, ledger_rows, make_mail, plain_model, query, replies_to
from tests.lab.smtp import SmtpLab, mx_stamp

FIXTURES = Path(__file__).parents[1] / "fixtures" / "mail"
QUIET = '[embeddings]\nbackend = "none"\n'  # no memory model to load: restarts stay cheap
Start = Callable[..., QuinnProcess]


class PrivateLab(NamedTuple):
    """A Dovecot of the test's own (to stop, restart, kick or re-password), its SMTP server, a config for them."""

    server: Dovecot
    smtp: SmtpLab
    config: LabConfig


MakeLab = Callable[..., PrivateLab]
Users = Callable[[str], str]


@pytest.fixture
def private_lab(
    make_dovecot: Callable[..., Dovecot], lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM
) -> Iterator[MakeLab]:
    """``private_lab(idle=True, imap_extra=...)``: a private mail lab and a quiet config (no embedding model);
    the scripted model answers plainly unless the test sets another responder."""
    llm_server.responder = plain_model
    smtps: list[SmtpLab] = []

    def make(*, idle: bool = True, **config: Any) -> PrivateLab:
        server = make_dovecot(idle=idle)
        smtp = SmtpLab(server)
        smtp.start()
        smtps.append(smtp)
        return PrivateLab(server, smtp, lab_config(server=server, smtp=smtp, extra=QUIET, **config))

    try:
        yield make
    finally:
        for smtp in smtps:
            smtp.stop()


def started(quinn_daemon: Start, config: LabConfig) -> QuinnProcess:
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    return daemon


def answered_once(server: Dovecot, user: str, message_ids: list[str], daemon: QuinnProcess) -> None:
    """Wait until `user` holds one reply to each id; fail if any has two."""

    def done() -> bool:
        inbox = server.messages(user)
        counts = [len(replies_to(inbox, mid)) for mid in message_ids]
        assert max(counts, default=0) <= 1, f"a mail was answered twice: {dict(zip(message_ids, counts, strict=True))}"
        return all(c == 1 for c in counts)

    wait_for(done, f"one reply to each of {message_ids}", timeout_s=90, log=daemon.log)


def test_polling_folders_size_limit_and_quarantine(private_lab: MakeLab, users: Users, quinn_daemon: Start) -> None:
    server, smtp, config = private_lab(
        idle=False, imap_extra='max_message_kb = 20\nprocessed_folder = "Archive/Quinn"\nquarantine_folder = "Bad"'
    )
    daemon = started(quinn_daemon, config)
    assert "polling" in daemon.log()
    assert {"Archive", "Archive.Quinn", "Bad", "Drafts", "Quinn", "Quinn.Sent"} <= set(server.folders(config.address))
    alice = users("alice")
    big = make_mail(alice, config.address, "Big", "word " * 10_000, message_id="<big@example.test>")
    smtp.send(alice, config.address, big)
    server.append(config.address, (FIXTURES / "garbage.eml").read_bytes())
    smtp.send(alice, config.address, make_mail(alice, config.address, message_id="<small@example.test>"))
    answered_once(server, alice, ["<small@example.test>"], daemon)
    wait_for(lambda: len(server.messages(config.address, "Bad")) == 2, "two mails in quarantine", log=daemon.log)
    assert daemon.terminate() == 0
    rows = ledger_rows(config.db_path)
    states = sorted((r["state"], r["reason"].split(":")[0]) for r in rows)
    assert states == [
        ("quarantined", "too large"),
        ("quarantined", "unparseable"),
        ("replied", "authenticated"),
    ]
    assert next(r for r in rows if r["reason"].startswith("too large"))["message_id"] == ""  # never downloaded
    assert all(b"\\Seen" not in f for f in server.flags(config.address, "Bad"))
    assert replies_to(server.messages(alice), "<big@example.test>") == []
    assert len(server.messages(config.address, "Archive.Quinn")) == 1
    assert server.messages(config.address) == []


def test_reconnects_through_every_failure(private_lab: MakeLab, users: Users, quinn_daemon: Start) -> None:
    server, smtp, config = private_lab(imap_extra="timeout_s = 2\nreconnect_max_s = 1\nidle_renew_s = 2")
    alice = users("alice")
    sent: list[str] = []

    def lost() -> int:
        return daemon.log().count("IMAP connection lost")

    def mail_and_wait(n: int) -> None:
        mid = f"<step{n}@example.test>"
        sent.append(mid)
        smtp.send(alice, config.address, make_mail(alice, config.address, f"Step {n}", message_id=mid))
        answered_once(server, alice, sent, daemon)
        # Also wait for the reply's copy to be filed: the lab delivers to one recipient after the other, so
        # stopping Dovecot in the middle would be a partial delivery no real server makes.
        wait_for(lambda: ledger(config.db_path).get(mid, {}).get("moved"), f"{mid} filed", log=daemon.log)

    server.stop()  # refused at startup: the daemon says so and keeps trying
    daemon = quinn_daemon(config)
    daemon.wait_for_log("will keep trying", timeout_s=90)
    wait_for(lambda: lost() >= 2, "two refused reconnects", log=daemon.log)
    server.start()
    daemon.wait_for_log("IMAP reconnected")
    mail_and_wait(1)

    before = lost()
    server.kick(config.address)  # BYE / abort mid-IDLE
    wait_for(lambda: lost() > before, "the kick noticed", log=daemon.log)
    mail_and_wait(2)

    before = lost()
    server.restart()  # a full restart: EOF without BYE
    wait_for(lambda: lost() > before, "the restart noticed", log=daemon.log)
    mail_and_wait(3)

    before = lost()
    server.stop()  # refused for several tries
    wait_for(lambda: lost() >= before + 3, "three refused reconnects", log=daemon.log)
    server.start()
    mail_and_wait(4)

    before = lost()
    assert server._proc is not None
    os.killpg(server._proc.pid, signal.SIGSTOP)  # hung, not dead: only a timeout can tell
    try:
        wait_for(lambda: lost() >= before + 2 and "timed out" in daemon.log(), "timeouts noticed", log=daemon.log)
    finally:
        os.killpg(server._proc.pid, signal.SIGCONT)
    mail_and_wait(5)
    assert daemon.terminate() == 0
    assert [r["state"] for r in ledger(config.db_path).values() if r["message_id"] in sent] == ["replied"] * 5
    assert "Traceback" not in daemon.log()


def test_password_rejected_while_running_is_retried_slowly(
    private_lab: MakeLab, users: Users, quinn_daemon: Start
) -> None:
    server, smtp, config = private_lab(imap_extra="login_retry_s = 1\nreconnect_max_s = 1")
    good = server.password
    daemon = started(quinn_daemon, config)
    server.set_password("changed-by-the-admin")
    server.restart()
    wait_for(
        lambda: daemon.log().count("IMAP login rejected while running") >= 2, "two rejected logins", log=daemon.log
    )
    assert daemon.proc is not None and daemon.proc.poll() is None  # still running: no crash loop
    alice = users("alice")
    server.set_password(good)
    server.restart()
    daemon.wait_for_log("IMAP reconnected")
    smtp.send(alice, config.address, make_mail(alice, config.address, message_id="<after@example.test>"))
    answered_once(server, alice, ["<after@example.test>"], daemon)
    assert daemon.terminate() == 0
    log = daemon.log()
    line = next(x for x in log.splitlines() if "IMAP login rejected while running" in x)
    assert config.address in line and "QUINN_TEST_IMAP_PASSWORD" in line
    assert good not in log and "changed-by-the-admin" not in log


def test_draft_mode_sends_nothing(
    mail_lab: Any, lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM, quinn_daemon: Start
) -> None:
    llm_server.responder = plain_model
    config = lab_config(extra=QUIET, smtp_extra='reply_mode = "draft"')
    daemon = started(quinn_daemon, config)
    alice = mail_lab.new_user("alice")
    mail_lab.smtp.send(alice, config.address, make_mail(alice, config.address, "Plan", message_id="<plan@x.test>"))
    dovecot = mail_lab.dovecot
    [draft] = wait_for(lambda: dovecot.messages(config.address, "Drafts"), "a draft", log=daemon.log)
    wait_for(lambda: ledger(config.db_path).get("<plan@x.test>", {}).get("moved"), "filed", log=daemon.log)
    assert daemon.terminate() == 0
    msg = email.message_from_bytes(draft, policy=email.policy.default)
    assert (msg["To"], msg["In-Reply-To"], msg["Subject"]) == (alice, "<plan@x.test>", "Re: Plan")
    assert all(b"\\Draft" in f for f in dovecot.flags(config.address, "Drafts"))
    assert dovecot.messages(alice) == []
    assert [r.data for r in mail_lab.smtp.received if r.mail_from == config.address] == []
    assert ledger(config.db_path)["<plan@x.test>"]["state"] == "drafted"
    assert [b"\\Answered" in f for f in dovecot.flags(config.address, "Quinn.Processed")] == [True]


def test_smtp_refusals_and_reply_all(
    mail_lab: Any, lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM, quinn_daemon: Start
) -> None:
    llm_server.responder = plain_model
    config = lab_config(extra=QUIET, smtp_extra="send_attempts = 2\nretry_delay_s = 0\nreply_all = true")
    daemon = started(quinn_daemon, config)
    dovecot, smtp, quinn = mail_lab.dovecot, mail_lab.smtp, config.address
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    # Inbound mail goes straight into the mailbox, so the scripted SMTP failures hit Quinn's own sends only.
    smtp.fail_next(1, 451)
    dovecot.append(quinn, mx_stamp(make_mail(alice, quinn, "Temporary", message_id="<t@x.test>"), alice))
    answered_once(dovecot, alice, ["<t@x.test>"], daemon)
    smtp.fail_next(1, 550, "5.7.1 Relay denied")
    dovecot.append(quinn, mx_stamp(make_mail(alice, quinn, "Permanent", message_id="<p@x.test>"), alice))
    wait_for(lambda: ledger(config.db_path).get("<p@x.test>", {}).get("moved"), "the refused one filed", log=daemon.log)
    dovecot.append(quinn, mx_stamp(make_mail(alice, quinn, "Everyone", message_id="<all@x.test>", cc=[bob]), alice))
    answered_once(dovecot, bob, ["<all@x.test>"], daemon)
    assert daemon.terminate() == 0
    rows = ledger(config.db_path)
    assert rows["<t@x.test>"]["state"] == "replied"
    assert (rows["<p@x.test>"]["state"], rows["<p@x.test>"]["reason"]) == (
        "failed",
        "SMTP rejected the message permanently: 550 5.7.1 Relay denied",
    )
    assert query(config.db_path, "SELECT state, last_error FROM outbox WHERE in_reply_to = '<p@x.test>'") == [
        ("failed", "SMTP rejected the message permanently: 550 5.7.1 Relay denied")
    ]
    assert replies_to(dovecot.messages(alice), "<p@x.test>") == []
    assert len(dovecot.messages(quinn, "Quinn.Quarantine")) == 1  # for the operator, with the reason in the ledger
    [to_all] = replies_to(dovecot.messages(alice), "<all@x.test>")
    msg = email.message_from_bytes(to_all, policy=email.policy.default)
    assert (msg["To"], msg["Cc"]) == (alice, bob)
    assert query(config.db_path, "SELECT attempts FROM outbox WHERE in_reply_to = '<t@x.test>'") == [(2,)]


def test_rate_caps_defer_and_never_drop(
    mail_lab: Any, lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM, quinn_daemon: Start
) -> None:
    llm_server.responder = plain_model
    config = lab_config(
        extra=QUIET + "\n[policy]\nmax_replies_per_sender_per_hour = 3\nmax_replies_per_thread_per_hour = 2\n"
    )
    daemon = started(quinn_daemon, config)
    dovecot, quinn = mail_lab.dovecot, config.address
    alice, bob, carol = (mail_lab.new_user(n) for n in ("alice", "bob", "carol"))
    for n in range(4):
        dovecot.append(quinn, mx_stamp(make_mail(alice, quinn, f"Topic {n}", message_id=f"<a{n}@x.test>"), alice))
    for n in range(3):  # one thread: each mail answers the previous one
        refs = [f"<b{i}@x.test>" for i in range(n)]
        dovecot.append(
            quinn,
            mx_stamp(
                make_mail(
                    bob,
                    quinn,
                    "Re: Loop",
                    message_id=f"<b{n}@x.test>",
                    references=refs,
                    in_reply_to=refs[-1] if refs else None,
                ),
                bob,
            ),
        )
    wait_for(
        lambda: len([r for r in ledger(config.db_path).values() if r["state"] == "deferred"]) == 2,
        "two mails deferred",
        log=daemon.log,
    )
    rows = ledger(config.db_path)
    assert rows["<a3@x.test>"]["reason"] == "rate cap: 3 replies to this sender in the last hour (cap 3)"
    assert rows["<b2@x.test>"]["reason"] == "rate cap: 2 replies to this thread in the last hour (cap 2)"
    assert rows["<a3@x.test>"]["attempts"] == 0  # waiting for a cap is not a failed attempt
    assert len(dovecot.messages(quinn)) == 2  # kept in the inbox, not dropped
    assert len(dovecot.messages(alice)) == 3 and len(dovecot.messages(bob)) == 2
    # An hour passes (in the ledger): the deferred mails are answered at the next look at the folder.
    query(config.db_path, "SELECT 1")  # the file is shared; writes go through a second connection below
    _age_replies(config.db_path)
    dovecot.append(quinn, mx_stamp(make_mail(carol, quinn, "Unrelated", message_id="<c@x.test>"), carol))
    answered_once(dovecot, alice, [f"<a{n}@x.test>" for n in range(4)], daemon)
    answered_once(dovecot, bob, [f"<b{n}@x.test>" for n in range(3)], daemon)
    assert daemon.terminate() == 0


def _age_replies(db_path: Path) -> None:
    from quinn.db import Database

    db = Database.open(str(db_path), migrate=False)
    try:
        db.execute("UPDATE mail_state SET replied_at = '2000-01-01T00:00:00+00:00' WHERE replied_at IS NOT NULL")
        db.execute("UPDATE mail_state SET next_attempt_at = '2000-01-01T00:00:00+00:00' WHERE state = 'deferred'")
    finally:
        db.close()


def test_uidvalidity_change_neither_loses_nor_reanswers(
    private_lab: MakeLab, users: Users, llm_server: ScriptedLLM, quinn_daemon: Start
) -> None:
    server, _smtp, config = private_lab()
    alice = users("alice")

    def model(request: RecordedRequest) -> Any:
        # The new email itself asks to wait: the earlier mails in the prompt (alice's whole history, issue 32)
        # may hold "please wait" too.
        new = request.text.rsplit("New email from", 1)[-1]
        return Error(500, "model overloaded") if "please wait" in new else plain_model(request)

    llm_server.responder = model
    quinn = config.address
    # 1. A reply is sent and recorded, then the daemon dies before filing the mail away.
    config.env["QUINN_FAULT"] = "before_move:1"
    crashing = quinn_daemon(config)
    server.append(quinn, mx_stamp(make_mail(alice, quinn, "First", message_id="<first@x.test>"), alice))
    assert crashing.proc is not None and crashing.proc.wait(timeout=90) == -signal.SIGKILL
    assert len(replies_to(server.messages(alice), "<first@x.test>")) == 1
    del config.env["QUINN_FAULT"]
    # 2. While it is down the folder gets a new UIDVALIDITY: the answered mail is back under a new UID.
    old = ledger(config.db_path)["<first@x.test>"]["uidvalidity"]
    server.doveadm("mailbox", "update", "-u", quinn, "--uid-validity", str(old + 1000), "INBOX")
    daemon = started(quinn_daemon, config)
    # 3. A mail waits for the model (deferred); then another UIDVALIDITY change, noticed at the next look at
    #    the folder (here: new mail wakes the IDLE; otherwise the next renewal).
    server.append(
        quinn, mx_stamp(make_mail(alice, quinn, "Second", "please wait", message_id="<second@x.test>"), alice)
    )
    wait_for(
        lambda: ledger(config.db_path).get("<second@x.test>", {}).get("state") == "deferred",
        "deferred",
        log=daemon.log,
    )
    server.doveadm("mailbox", "update", "-u", quinn, "--uid-validity", str(old + 2000), "INBOX")
    server.append(quinn, mx_stamp(make_mail(alice, quinn, "Third", message_id="<third@x.test>"), alice))
    daemon.wait_for_log("unfinished mails will be taken up again")
    answered_once(server, alice, ["<first@x.test>", "<third@x.test>"], daemon)
    assert daemon.terminate() == 0
    rows = ledger_rows(config.db_path)
    first = [(r["uidvalidity"] - old, r["state"], r["reason"]) for r in rows if r["message_id"] == "<first@x.test>"]
    assert first == [
        (0, "replied", "authenticated: dmarc=pass header.from=example.test"),
        (1000, "ignored", "duplicate of uid 1: replied"),
    ]
    second = [(r["uidvalidity"] - old, r["state"], r["attempts"]) for r in rows if r["message_id"] == "<second@x.test>"]
    assert second == [(1000, "superseded", 1), (2000, "deferred", 1)]  # carried on, its retry time kept
    assert len(replies_to(server.messages(alice), "<first@x.test>")) == 1
    assert replies_to(server.messages(alice), "<second@x.test>") == []
    assert [b"\\Answered" in f for f in server.flags(quinn, "Quinn.Processed")] == [True, True]
    assert len(server.messages(quinn)) == 1  # the waiting one, still in the inbox
