"""Crash safety: `quinn run` killed (SIGKILL, by the test-only QUINN_FAULT hook) inside every window that
exactly-once delivery must survive, across many mails; afterwards every legitimate mail has exactly one reply in
its sender's inbox, machine mail has none, and nothing is lost.

Windows: after the fetch (nothing recorded yet), after the LLM call (reply not in the outbox), before the send
(outbox written), after the send (the server accepted, the outbox does not know), before the move (done, not filed).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

from quinn.lab.wait import wait_for
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.llm_server import Json, RecordedRequest
from tests.lab.mails import ledger, make_mail, plain_model, query, replies_to

# (fault point, pass on which the process kills itself); each run dies there, the next one starts clean. A
# daemon start costs seconds (Python imports), so the CI plan hits each window once and one of them twice.
SHORT_PLAN = [
    ("after_fetch", 3),
    ("after_llm", 2),
    ("before_send", 2),
    ("after_send", 2),
    ("before_move", 3),
    ("after_send", 4),
]
LONG_PLAN = [(point, nth) for nth in (1, 3, 5, 8) for point, _ in SHORT_PLAN[:5]]


def run_crash_storm(
    mail_lab: Any,
    lab_config: Callable[..., LabConfig],
    llm_server: Any,
    quinn_daemon: Callable[..., QuinnProcess],
    *,
    users_n: int,
    per_user: int,
    plan: list[tuple[str, int]],
) -> None:
    llm_server.responder = plain_model
    config = lab_config(idle=False, extra='[embeddings]\nbackend = "none"\n')
    dovecot, smtp, quinn = mail_lab.dovecot, mail_lab.smtp, config.address
    people = [mail_lab.new_user(f"user{i}") for i in range(users_n)]
    legit: dict[str, str] = {}  # Message-ID -> sender
    machine: dict[str, str] = {}
    for n in range(per_user):
        for i, person in enumerate(people):
            mid = f"<m{n}-{i}@example.test>"
            legit[mid] = person
            smtp.send(
                person, quinn, make_mail(person, quinn, f"Question {n}", f"Question {n} from {i}", message_id=mid)
            )
        robot = mail_lab.new_user("robot")
        mid = f"<auto{n}@example.test>"
        machine[mid] = robot
        smtp.send(
            robot,
            quinn,
            make_mail(robot, quinn, "Out of office", message_id=mid, headers={"Auto-Submitted": "auto-replied"}),
        )

    for point, nth in plan:
        config.env["QUINN_FAULT"] = f"{point}:{nth}"
        daemon = quinn_daemon(config)
        assert daemon.proc is not None
        code = daemon.proc.wait(timeout=100)
        assert code == -signal.SIGKILL, f"quinn exited with {code} instead of dying at {point}:{nth}\n{daemon.log()}"
        assert f"fault injected: SIGKILL at {point} (pass {nth})" in daemon.log()
    config.env.pop("QUINN_FAULT")
    daemon = quinn_daemon(config)

    def all_filed() -> bool:
        rows = ledger(config.db_path)
        return all(rows.get(mid, {}).get("moved") for mid in [*legit, *machine]) and not dovecot.messages(quinn)

    wait_for(all_filed, "every mail handled and filed", timeout_s=100, log=daemon.log)
    assert daemon.terminate() == 0

    inboxes = {person: dovecot.messages(person) for person in {*legit.values(), *machine.values()}}
    counts = {mid: len(replies_to(inboxes[person], mid)) for mid, person in legit.items()}
    assert [mid for mid, c in counts.items() if c != 1] == [], counts
    assert all(replies_to(inboxes[robot], mid) == [] for mid, robot in machine.items())
    rows = ledger(config.db_path)
    assert {rows[mid]["state"] for mid in legit} == {"replied"}
    assert {rows[mid]["state"] for mid in machine} == {"ignored"}
    # Nothing lost: every mail is in the processed folder, every reply's copy in the sent folder, once.
    assert len(dovecot.messages(quinn, "Quinn.Processed")) == len(legit) + len(machine)
    assert len(dovecot.messages(quinn, "Quinn.Sent")) == len(legit)
    assert query(config.db_path, "SELECT state, count(*) FROM outbox GROUP BY 1") == [("sent", len(legit))]
    sent_by_quinn = [r for r in smtp.received if r.mail_from == quinn]
    assert len(sent_by_quinn) == len(legit)  # not one SMTP send more than replies


@pytest.mark.timeout(300)  # seven daemon starts; each costs 3-15 s of imports depending on the machine's load
def test_crash_at_every_window_answers_each_mail_once(mail_lab, lab_config, llm_server, quinn_daemon) -> None:
    run_crash_storm(mail_lab, lab_config, llm_server, quinn_daemon, users_n=5, per_user=10, plan=SHORT_PLAN)


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_crash_storm_long(mail_lab, lab_config, llm_server, quinn_daemon) -> None:
    run_crash_storm(mail_lab, lab_config, llm_server, quinn_daemon, users_n=10, per_user=20, plan=LONG_PLAN)


def _learning_model(request: RecordedRequest) -> Any:
    """Replies with text; every extraction finds the one fact (so a second application would store it twice)."""
    answer = plain_model(request)
    if isinstance(answer, Json):
        return Json({"new": [{"content": "Alice keeps bees on her roof in Porto.", "type": "fact"}], "updated": [],
                     "contradicted": []})  # fmt: skip
    return answer


@pytest.mark.timeout(240)
@pytest.mark.parametrize("point", ["before_learn", "after_learn"])
def test_a_crash_between_a_reply_and_its_learning_loses_nothing_and_learns_once(
    point: str, mail_lab, lab_config, llm_server, quinn_daemon
) -> None:
    """Killed after the reply was filed but before the extraction ran (before_learn), or after it stored its
    memory but before the mail left the learning queue (after_learn): the next start learns it exactly once."""
    llm_server.responder = _learning_model
    config = lab_config(idle=False, extra='[embeddings]\nbackend = "none"\n')
    alice, quinn = mail_lab.new_user("alice"), config.address
    mid = "<bees@example.test>"
    body = "I keep bees on my roof in Porto. Any advice on harvesting honey in spring?"
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Bees", body, message_id=mid))

    config.env["QUINN_FAULT"] = f"{point}:1"
    daemon = quinn_daemon(config)
    assert daemon.proc is not None and daemon.proc.wait(timeout=100) == -signal.SIGKILL, daemon.log()
    assert query(config.db_path, "SELECT message_id FROM learning_queue") == [(mid,)]  # the crash left it queued
    config.env.pop("QUINN_FAULT")
    daemon = quinn_daemon(config)

    def learnt() -> bool:
        return query(config.db_path, "SELECT count(*) FROM learning_queue") == [(0,)]

    wait_for(learnt, "the queued mail learnt from", timeout_s=60, log=daemon.log)
    assert daemon.terminate() == 0
    stored = query(config.db_path, "SELECT content FROM memories WHERE user_id = ?", (alice,))
    assert stored == [("Alice keeps bees on her roof in Porto.",)], stored
    assert len(replies_to(mail_lab.dovecot.messages(alice), mid)) == 1
    extractions = [r for r in llm_server.requests_of("chat") if isinstance(plain_model(r), Json)]
    # before_learn: the first run never asked; after_learn: the restart did not ask again.
    assert len(extractions) == 1, "learnt twice"
