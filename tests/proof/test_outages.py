"""Outages: the model failing (HTTP 500s, then timeouts), the SMTP server down, Dovecot restarted and the
session kicked, while mail keeps arriving. Through ``quinn run`` on a private Dovecot and SMTP server.

After recovery every legitimate mail is answered exactly once (read from the users' inboxes), none is lost,
automatic mail is never answered, and what the operator sees explains it: during the outage
``quinn mail status`` lists each waiting mail as deferred with the failure as its reason and a retry time, the
log shows every reconnect; afterwards the status shows nothing waiting, and the ledger keeps the failed attempt
of each mail that waited. A reply already written when SMTP failed is sent as it was: the model is not asked
again.
"""

from __future__ import annotations

import email
import email.policy
from collections import Counter
from typing import Any

import pytest

from quinn.db import Database
from quinn.lab.wait import wait_for
from tests.commands.test_admin_cli import as_json
from tests.commands.test_admin_cli import quinn as quinn_cli
from tests.lab.llm_server import REPLY, Delay, Error, RecordedRequest, Text
from tests.lab.mails import ledger, plain_model
from tests.lab.smtp import SmtpLab
from tests.proof.test_kill_storm import automatic, legit

LLM_TIMEOUT_S = 2.0
QUIET = '[embeddings]\nbackend = "none"\n'  # no memory model to load: this suite is about the mail path


class Model:
    """The scripted model with an outage switch: ``ok``, ``500`` (server errors) or ``timeout`` (no answer in
    time)."""

    def __init__(self) -> None:
        self.mode = "ok"

    def __call__(self, request: RecordedRequest) -> Any:
        if self.mode == "500":
            return Error(500, "The model is overloaded (lab outage).")
        if self.mode == "timeout":
            return Delay(LLM_TIMEOUT_S + 3, Text("Too late."))
        return plain_model(request)


def states_of(db_path, message_ids: list[str]) -> dict[str, str]:
    rows = ledger(db_path)
    return {mid: rows.get(mid, {}).get("state", "unseen") for mid in message_ids}


def all_deferred(db_path, message_ids: list[str]):
    states = states_of(db_path, message_ids)
    return all(state == "deferred" for state in states.values()) and states


@pytest.mark.timeout(420)
def test_outages(make_dovecot, llm_server, lab_config, quinn_daemon, users):
    server = make_dovecot()
    smtp = SmtpLab(server)
    smtp.start()
    model = Model()
    llm_server.responder = model
    config = lab_config(server=server, smtp=smtp, extra=QUIET, llm_timeout_s=LLM_TIMEOUT_S,
                        smtp_extra="retry_delay_s = 0.2")  # fmt: skip
    quinn = config.address
    senders = [users(f"user{i}") for i in range(6)]
    expected: dict[str, str] = {}  # message id -> sender: must be answered exactly once
    never: set[str] = set()
    sent = Counter[str]()
    questions: dict[str, tuple[str, int]] = {}  # message id -> (sender, question number in the text)

    def mail(sender: str, *, by_smtp: bool = True) -> str:
        message_id, raw = legit(sender, quinn, sent[sender])
        questions[message_id] = (sender, sent[sender])
        sent[sender] += 1
        expected[message_id] = sender
        smtp.send(sender, quinn, raw) if by_smtp else server.append(quinn, raw)
        return message_id

    def machine(kind: str, sender: str) -> None:
        message_id, raw = automatic(kind, sender, quinn)
        never.add(message_id)
        server.append(quinn, raw)

    daemon = quinn_daemon(config)
    try:
        daemon.wait_for_log("quinn started", timeout_s=120)
        # 1. The model answers 500: the mails wait (deferred, one attempt counted), none is answered.
        model.mode = "500"
        llm_500 = [mail(s) for s in senders[:3]]
        machine("auto-reply", senders[0])
        wait_for(lambda: all_deferred(config.db_path, llm_500), "mails deferred on model 500s", log=daemon.log)
        # 2. The model times out.
        model.mode = "timeout"
        llm_timeout = [mail(s) for s in senders[3:5]]
        machine("bounce", senders[1])
        wait_for(lambda: all_deferred(config.db_path, llm_timeout), "mails deferred on model timeouts",
                 timeout_s=90, log=daemon.log)  # fmt: skip
        # 3. The model is back, the SMTP server is down: replies are written but cannot leave. Mail still arrives
        #    (delivered into the mailbox by the MTA, here an APPEND).
        model.mode = "ok"
        smtp.down()
        smtp_down = [mail(s, by_smtp=False) for s in (senders[5], senders[0])]
        machine("list", senders[2])
        wait_for(lambda: all_deferred(config.db_path, smtp_down), "mails deferred on SMTP down", log=daemon.log)
        # What the operator sees during the outage.
        during = as_json(quinn_cli(config.path, "mail", "status", "--json"))
        # 4. SMTP comes back; Dovecot restarts under the daemon, then its session is kicked; mail keeps coming.
        smtp.up()
        server.restart()
        after_restart = [mail(senders[1])]
        daemon.wait_for_log("IMAP reconnected", timeout_s=60)
        server.kick(quinn)
        after_kick = [mail(senders[2])]
        machine("bulk", senders[3])
        wait_for(lambda: daemon.log().count("IMAP reconnected") >= 2, "a second reconnect after the kick",
                 log=daemon.log)  # fmt: skip
        # 5. Recovery: the deferred mails come due (the first retry waits a minute) and everything is answered.
        wait_for(lambda: not server.messages(quinn), "the inbox emptied", timeout_s=200, log=daemon.log)
        after = as_json(quinn_cli(config.path, "mail", "status", "--json"))
        assert daemon.terminate() == 0
    finally:
        daemon.kill()
        smtp.stop()

    replies: Counter[str] = Counter()
    for sender in senders:
        for raw in server.messages(sender):
            replies[str(email.message_from_bytes(raw, policy=email.policy.default)["In-Reply-To"])] += 1
    once = sum(1 for mid in expected if replies[mid] == 1)
    twice = {mid: n for mid, n in replies.items() if n > 1}
    missing = [mid for mid in expected if not replies[mid]]
    answered_machine = [mid for mid in never if replies[mid]]
    rows = ledger(config.db_path)
    waited = llm_500 + llm_timeout + smtp_down
    reasons = {mid: row["reason"] for mid, row in rows.items()}
    db = Database.open(str(config.db_path), migrate=False)
    try:
        replies_written = dict(db.query("SELECT in_reply_to, count(*) FROM outbox GROUP BY in_reply_to"))
    finally:
        db.close()
    log = daemon.log()
    print(f"outages: {len(expected)} legitimate + {len(never)} automatic mails; model 500s {len(llm_500)}, model "
          f"timeouts {len(llm_timeout)}, SMTP down {len(smtp_down)}, after the Dovecot restart {len(after_restart)}, "
          f"after the kick {len(after_kick)}; answered once {once}, twice {len(twice)}, missing {len(missing)}, "
          f"automatic answered {len(answered_machine)}; status during the outage {during['counts']}, after "
          f"{after['counts']}; IMAP reconnects {log.count('IMAP reconnected')}, "
          f"connection-lost lines {log.count('IMAP connection lost')}")  # fmt: skip
    assert not missing and not twice and not answered_machine
    assert once == len(expected)
    # During the outage: each waiting mail is listed as deferred, with the failure and a retry time.
    waiting = {item["message_id"]: item for item in during["attention"] if item["state"] == "deferred"}
    assert set(waited) <= set(waiting), during
    for mid in waited:
        assert waiting[mid]["attempts"] == 1 and waiting[mid]["next_attempt_at"], waiting[mid]
    for mid in llm_500:
        assert "LLM" in waiting[mid]["reason"] and "500" in waiting[mid]["reason"], waiting[mid]["reason"]
    for mid in llm_timeout:
        assert "LLM" in waiting[mid]["reason"] and "imeout" in waiting[mid]["reason"], waiting[mid]["reason"]
    for mid in smtp_down:
        assert "SMTP" in waiting[mid]["reason"] and "unreachable" in waiting[mid]["reason"], waiting[mid]["reason"]
    # After recovery: nothing waits or failed; the ledger still counts the attempt each waiting mail lost.
    assert not after["attention"], after["attention"]
    assert set(after["counts"]) <= {"replied", "ignored"} and after["outbox"] == {"sent": len(expected)}, after
    assert all(rows[mid]["state"] == "replied" and rows[mid]["attempts"] == 1 for mid in waited), reasons
    assert all(rows[mid]["state"] == "ignored" for mid in never), reasons
    # A reply written before SMTP failed was sent as it was, not written anew by the model.
    assert all(replies_written[mid] == 1 for mid in expected)
    for mid in smtp_down:
        sender, number = questions[mid]
        asked = [r for r in llm_server.requests if r.purpose == REPLY and sender in r.text
                 and f"Question number {number}:" in r.text]  # fmt: skip
        assert len(asked) == 1, f"{mid}: the model was asked {len(asked)} times for its reply"
    assert "IMAP connection lost" in log and log.count("IMAP reconnected") >= 2
