"""``quinn run`` as a service: sd_notify over a real datagram socket, SIGTERM grace, SIGHUP reload.

Every test runs the real daemon (a subprocess) against the lab. The embedder is off (``backend = "none"``):
these tests are about the process, not retrieval, and it saves the model load on every start.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from quinn.db import Database
from quinn.lab.wait import wait_for
from quinn.notify import Notifier, watchdog_usec
from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import Delay, Json, RecordedRequest, Text
from tests.lab.mails import make_mail

FAST = '[embeddings]\nbackend = "none"\n'


def model(reply_delay_s: float = 0.0, text: str = "Thanks, noted."):
    """Text for replies (after ``reply_delay_s``), an empty extraction for the memory prompt."""

    def respond(request: RecordedRequest):
        if request.purpose == EXTRACTION:
            return Json({"new": [], "updated": [], "contradicted": []})
        return Delay(reply_delay_s, Text(text)) if reply_delay_s else Text(text)

    return respond


def ledger(db_path: Path) -> dict[str, str]:
    """message_id -> state, read from the daemon's own database file."""
    db = Database.open(str(db_path))
    try:
        return {mid: state for mid, state in db.query("SELECT message_id, state FROM mail_state")}
    finally:
        db.close()


class NotifyListener:
    """What systemd does: a bound AF_UNIX datagram socket collecting the daemon's notifications."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []

    def drain(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return
            self.messages.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def wait_for(self, key: str, value: str | None = None, timeout_s: float = 30.0) -> dict[str, str]:
        def sent() -> dict[str, str] | None:
            self.drain()  # blocks up to the socket's 0.2 s: no sleep between checks
            return next((m for m in self.messages if key in m and (value is None or value in m[key])), None)

        return wait_for(sent, f"a {key}={value or '*'} notification", timeout_s, interval_s=0,
                        log=lambda: f"notifications: {self.messages}")  # fmt: skip

    def close(self) -> None:
        self.sock.close()


# -- the protocol itself -----------------------------------------------------------------------------------


def test_notifier_speaks_to_path_and_abstract_sockets(tmp_path):
    listener = NotifyListener(tmp_path / "n.sock")
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"quinn-test-{time.monotonic_ns()}"
    abstract.bind("\0" + name)
    try:
        notifiers = [Notifier(str(listener.path)), Notifier("@" + name), Notifier(str(tmp_path / "missing.sock"))]
        path, abstract_name, missing = notifiers
        assert path.ready("line one\nline two")
        listener.wait_for("READY", "1")
        # A newline inside STATUS would start a new assignment: it is folded into one line.
        assert listener.wait_for("STATUS")["STATUS"] == "line one line two"
        assert abstract_name.stopping()
        assert abstract.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
        assert not Notifier(None).ready("nobody listens")  # outside systemd: a quiet no-op
        assert not missing.watchdog()  # a gone socket never raises
        for notifier in notifiers:
            notifier.close()
    finally:
        listener.close()
        abstract.close()


def test_watchdog_is_only_ours_when_the_pid_matches():
    import os

    assert watchdog_usec({"WATCHDOG_USEC": "2000000"}) == 2_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}) == 2_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None  # meant for another process
    assert watchdog_usec({"WATCHDOG_USEC": "soon"}) is None
    assert Notifier("/run/x", 2_000_000).watchdog_interval_s == 1.0
    assert Notifier(None, 2_000_000).watchdog_interval_s is None


# -- quinn run under a fake systemd ------------------------------------------------------------------------


def test_quinn_run_notifies_ready_watchdog_status_and_stopping(
    mail_lab, lab_config, llm_server, quinn_daemon, tmp_path
):
    alice = mail_lab.new_user("alice")
    listener = NotifyListener(tmp_path / "notify.sock")
    config = lab_config(extra=FAST)
    config.env.update({"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "400000"})
    llm_server.responder = model()
    try:
        daemon = quinn_daemon(config)
        ready = listener.wait_for("READY", "1", timeout_s=60)
        assert ready["STATUS"].startswith("running: 0 mails done")
        assert not any("WATCHDOG" in m for m in listener.messages[: listener.messages.index(ready)]), (
            "the watchdog must not be fed before startup completed"
        )
        listener.wait_for("WATCHDOG", "1")
        assert "metrics on" not in daemon.log()  # the endpoint is off unless [metrics] enabled
        mail_lab.smtp.send(
            alice, config.address, make_mail(alice, config.address, "Hi", "Hello there", message_id="<n-1@x.test>")
        )
        mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
        listener.wait_for("STATUS", "replied 1")
        pings = sum("WATCHDOG" in m for m in listener.messages)
        listener.wait_for("WATCHDOG")
        wait_for(
            lambda: (listener.drain(), sum("WATCHDOG" in m for m in listener.messages))[1] > pings + 1,
            "more watchdog pings",
        )
        assert daemon.terminate() == 0
        stopping = listener.wait_for("STOPPING", "1")
        assert "finishing the mail in flight" in stopping["STATUS"]
    finally:
        listener.close()


# -- SIGTERM ---------------------------------------------------------------------------------------------


def test_sigterm_finishes_the_mail_in_flight(mail_lab, lab_config, llm_server, quinn_daemon):
    alice = mail_lab.new_user("alice")
    config = lab_config(extra=FAST)
    llm_server.responder = model(reply_delay_s=3.0, text="Slow but complete.")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    mail_lab.smtp.send(
        alice, config.address, make_mail(alice, config.address, "Slow", "Take your time", message_id="<slow-1@x.test>")
    )
    wait_for(lambda: any("Take your time" in r.text for r in llm_server.requests), "the reply request")
    assert daemon.terminate(timeout_s=60) == 0  # SIGTERM while the model is still answering
    [reply] = mail_lab.dovecot.messages(alice)
    assert b"Slow but complete." in reply
    assert ledger(config.db_path)["<slow-1@x.test>"] == "replied"
    assert "finishing the mail in flight" in daemon.log()
    assert "grace period over" not in daemon.log()


def test_sigterm_past_the_grace_period_resumes_at_next_start(mail_lab, lab_config, llm_server, quinn_daemon):
    alice = mail_lab.new_user("alice")
    config = lab_config(extra=FAST + "[service]\nshutdown_grace_s = 1\n")
    llm_server.responder = model(reply_delay_s=60.0)
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    mail_lab.smtp.send(
        alice, config.address, make_mail(alice, config.address, "Stuck", "Model hangs", message_id="<stuck-1@x.test>")
    )
    wait_for(lambda: any("Model hangs" in r.text for r in llm_server.requests), "the reply request")
    assert daemon.terminate(timeout_s=30) == 0
    assert "grace period over" in daemon.log()
    assert ledger(config.db_path)["<stuck-1@x.test>"] == "handling"  # cut off, not lost
    assert mail_lab.dovecot.messages(alice) == []

    llm_server.responder = model(text="Answered after the restart.")
    daemon = quinn_daemon(config)
    [reply] = mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    assert b"Answered after the restart." in reply
    wait_for(lambda: ledger(config.db_path)["<stuck-1@x.test>"] == "replied", "replied in the ledger")
    assert daemon.terminate() == 0
    assert len(mail_lab.dovecot.messages(alice)) == 1  # exactly once


# -- SIGHUP ----------------------------------------------------------------------------------------------


def reply_template(marker: str) -> str:
    """An admin's reply template (standalone: both blocks, no ``extends``)."""
    return (
        "{% block system %}" + marker + " You are {{ assistant.name }}.{% endblock %}\n"
        "{% block user %}From {{ email.sender }}: {{ email.text }}{% endblock %}\n"
    )


def test_sighup_reloads_templates_policy_and_refuses_a_broken_file(
    mail_lab, lab_config, llm_server, quinn_daemon, tmp_path
):
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    for name, marker in (("one", "MARKER-ONE"), ("two", "MARKER-TWO")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "reply.j2").write_text(reply_template(marker))
    config = lab_config(extra=FAST + f'[prompts]\ndir = "{tmp_path / "one"}"\n')
    original = config.path.read_text()
    llm_server.responder = model()
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    quinn = config.address

    def ask(sender: str, n: int) -> RecordedRequest:
        body = f"Question number {n}"
        mail_lab.smtp.send(sender, quinn, make_mail(sender, quinn, f"Q{n}", body, message_id=f"<q-{n}@x.test>"))
        wait_for(lambda: any(body in r.text for r in llm_server.requests), f"question {n} at the model", log=daemon.log)
        return next(r for r in llm_server.requests if body in r.text)

    assert "MARKER-ONE" in ask(alice, 1).text

    # New template directory, a policy that only answers bob, and a key that needs a restart.
    config.path.write_text(
        original.replace(str(tmp_path / "one"), str(tmp_path / "two")).replace(
            "[policy]\n", f'[policy]\nallow = ["{bob}"]\n'
        )
        + "\n[metrics]\nport = 9999\n"
    )
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("reloaded")
    assert "changed but only applied after a restart: metrics.port" in daemon.log()
    assert "policy.allow" in daemon.log() and "prompts.dir" in daemon.log()

    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Q2", "Question number 2", message_id="<q-2@x.test>"))
    wait_for(lambda: ledger(config.db_path).get("<q-2@x.test>") == "rejected", "alice rejected")
    request = ask(bob, 3)
    assert "MARKER-TWO" in request.text and "MARKER-ONE" not in request.text

    # A broken file is refused; the running configuration stays.
    config.path.write_text(original.replace("[policy]\n", "[policy]\nallow = 42\n"))
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("reload failed, keeping the running configuration")
    assert "MARKER-TWO" in ask(bob, 4).text
    wait_for(lambda: ledger(config.db_path).get("<q-4@x.test>") == "replied", "q4 replied")
    assert daemon.terminate() == 0
    assert "Question number 2" not in "".join(r.text for r in llm_server.requests)


@pytest.mark.parametrize("broken", ["{% block system %}{{ unclosed {% endblock %}"])
def test_sighup_with_a_broken_template_keeps_the_last_good_one(
    mail_lab, lab_config, llm_server, quinn_daemon, tmp_path, broken
):
    alice = mail_lab.new_user("alice")
    (tmp_path / "prompts").mkdir()
    template = tmp_path / "prompts" / "reply.j2"
    template.write_text(reply_template("MARKER-GOOD"))
    config = lab_config(extra=FAST + f'[prompts]\ndir = "{tmp_path / "prompts"}"\n')
    llm_server.responder = model()
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    template.write_text(broken)
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("rejected, keeping the last good version")
    assert "reply.j2:1" in daemon.log()  # the file and line of the mistake
    quinn = config.address
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Hi", "Still there?", message_id="<t-1@x.test>"))
    mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    assert "MARKER-GOOD" in next(r for r in llm_server.requests if "Still there?" in r.text).text
    assert daemon.terminate() == 0


def test_remote_database_survives_idle_time(mail_lab, lab_config, llm_server, quinn_daemon):
    """sqld expires a connection's stream after ~10 s of silence: an idle daemon must still answer after that."""
    from tests.lab.sqld import INSTALL_HINT, Sqld, find_sqld

    if find_sqld() is None:
        pytest.fail(f"sqld is not installed: {INSTALL_HINT}", pytrace=False)
    alice = mail_lab.new_user("alice")
    llm_server.responder = model(text="Answered from a remote database.")
    with Sqld() as server:
        config = lab_config(extra=FAST, db_path=server.url)
        Database.open(server.url).close()  # the schema exists: quinn's start then only reads (stream left open)
        daemon = quinn_daemon(config)
        daemon.wait_for_log("quinn started", timeout_s=60)
        # Idle longer than the server's stream expiry. Measured: a read left the stream open (the schema check
        # at start), 12 s of silence, then "The stream has expired due to inactivity" and a crash.
        time.sleep(15)
        quinn = config.address
        mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Idle", "Still there?", message_id="<idle-1@x.test>"))
        [reply] = mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
        assert b"Answered from a remote database." in reply
        assert daemon.terminate() == 0
        assert "Traceback" not in daemon.log()
