"""A safe first start (issue 19): mail already in the folder when Quinn first watches it is left alone unless
the operator asks, against the real Dovecot, SMTP lab and scripted model."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from quinn.lab.wait import wait_for
from quinn.mailbox.backlog import WatchMark, first_uid
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.llm_server import ScriptedLLM
from tests.lab.mails import ledger, make_mail, plain_model, query, replies_to
from tests.lab.smtp import MailLab

QUIET = '[embeddings]\nbackend = "none"\n'
HINT = "run `quinn run --backlog` once"


def _mark(skipped: int) -> WatchMark:
    return WatchMark("INBOX", 7, 40, "2026-11-24T10:00:00Z", skipped)


@pytest.mark.parametrize(
    ("previous", "seen_before", "answer", "expected"),
    [
        (None, False, False, 100),  # a first watch: everything now in the folder is the backlog
        (None, False, True, 1),  # the operator asked for it to be answered
        (None, True, False, 1),  # an older Quinn watched it and answered everything: nothing changes for it
        (_mark(0), True, False, 1),  # new UIDVALIDITY, nothing was waiting: all of it came after the first watch
        (_mark(3), True, False, 100),  # new UIDVALIDITY while 3 waited: they cannot be told apart, none is answered
        (_mark(3), True, True, 1),
    ],
)
def test_first_uid_decides_what_the_backlog_is(
    previous: WatchMark | None, seen_before: bool, answer: bool, expected: int
) -> None:
    first, why = first_uid(previous, seen_before, 100, answer)
    assert first == expected and why


def _check(config: LabConfig) -> str:
    env = {**os.environ, **config.env, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "quinn", "check", "-c", str(config.path)], capture_output=True,
                            text=True, timeout=120, env=env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("backlog"))


@pytest.mark.timeout(600)  # three daemon starts and three checks: minutes on a loaded 2-core machine
def test_first_start_leaves_the_backlog_alone_until_asked(
    lab_config: Callable[..., LabConfig], mail_lab: MailLab, llm_server: ScriptedLLM,
    quinn_daemon: Callable[..., QuinnProcess],
) -> None:  # fmt: skip
    llm_server.responder = plain_model
    config = lab_config(extra=QUIET, backlog="skip")
    box, dovecot = config.address, mail_lab.dovecot
    alice = mail_lab.new_user("alice")
    mail_lab.smtp.send(alice, box, make_mail(alice, box, "From last year", message_id="<old@example.test>"))
    assert len(dovecot.messages(box)) == 1
    assert "1 mails in INBOX now: the first start leaves them there unanswered" in _check(config)

    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    mail_lab.smtp.send(alice, box, make_mail(alice, box, "New", message_id="<new@example.test>"))
    wait_for(lambda: len(replies_to(dovecot.messages(alice), "<new@example.test>")) == 1, "a reply to the new mail",
             timeout_s=90, log=daemon.log)  # fmt: skip
    daemon.wait_for_log("1 mails in INBOX arrived before Quinn first watched it")
    assert HINT in daemon.log()
    assert daemon.terminate() == 0
    # The old mail: still in INBOX, neither read nor answered nor flagged, unknown to the ledger, not answered.
    assert [b"old@example.test" in raw for raw in dovecot.messages(box)] == [True]
    [flags] = dovecot.flags(box, "INBOX")
    assert b"\\Seen" not in flags and b"\\Answered" not in flags, flags
    assert replies_to(dovecot.messages(alice), "<old@example.test>") == []
    assert set(ledger(config.db_path)) == {"<new@example.test>"}
    [(first_uid_, skipped)] = query(config.db_path, "SELECT first_uid, skipped FROM watched_folders")
    assert first_uid_ > 1 and skipped == 1
    assert "1 mails from before Quinn first watched INBOX" in _check(config)

    # A restart without --backlog still leaves it; with --backlog it is answered, once, and filed away.
    daemon = quinn_daemon(config)
    daemon.wait_for_log("1 mails in INBOX arrived before Quinn first watched it", timeout_s=90)
    assert daemon.terminate() == 0
    assert replies_to(dovecot.messages(alice), "<old@example.test>") == []
    daemon = quinn_daemon(config, "run", "--backlog")
    wait_for(lambda: len(replies_to(dovecot.messages(alice), "<old@example.test>")) == 1, "a reply to the old mail",
             timeout_s=90, log=daemon.log)  # fmt: skip
    wait_for(lambda: dovecot.messages(box) == [], "INBOX emptied", log=daemon.log)
    assert daemon.terminate() == 0
    assert ledger(config.db_path)["<old@example.test>"]["state"] == "replied"
    assert query(config.db_path, "SELECT first_uid FROM watched_folders") == [(1,)]
    assert "no mail from before Quinn first watched INBOX" in _check(config)
