"""`quinn run` when the setup changes under it: a revoked API key holds mail instead of stopping the daemon, and
SIGHUP reaches the background jobs as well as the replies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from quinn.lab.wait import wait_for
from tests.lab.daemon import LabConfig
from tests.lab.llm_server import Error, Json, RecordedRequest, ScriptedLLM
from tests.lab.mails import ledger, make_mail, plain_model, replies_to
from tests.lab.smtp import MailLab

QUIET = '[embeddings]\nbackend = "none"\n'  # no memory model to load: the daemon starts fast


def quinn_check(config: LabConfig) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", **config.env}
    return subprocess.run([sys.executable, "-m", "quinn", "check", "-c", str(config.path)], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


def states(config: LabConfig) -> dict[str, tuple[str, int]]:
    return {mid: (row["state"], row["attempts"]) for mid, row in ledger(config.db_path).items()}


def test_a_revoked_api_key_holds_mail_and_the_daemon_answers_once_it_works(
    mail_lab: MailLab, lab_config, llm_server: ScriptedLLM, quinn_daemon
) -> None:
    alice = mail_lab.new_user("alice")
    config = lab_config(extra=QUIET)
    quinn = config.address
    key_revoked = True

    def model(request: RecordedRequest):
        return Error(401, "Incorrect API key provided: test-key") if key_revoked else plain_model(request)

    llm_server.responder = model
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "First", message_id="<key-1@x.test>"))
    wait_for(lambda: states(config).get("<key-1@x.test>") == ("deferred", 0), "the first mail held", log=daemon.log)
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Second", message_id="<key-2@x.test>"))
    wait_for(lambda: states(config).get("<key-2@x.test>") == ("deferred", 0), "the second mail held", log=daemon.log)

    assert daemon.proc is not None and daemon.proc.poll() is None  # still running
    log = daemon.log()
    assert log.count("rejected our credentials") == 1, log  # said once, with the hint
    assert "(hint: check llm.api_key_env); mail is held" in log
    assert "Traceback" not in log
    assert len(llm_server.requests) == 1  # the second mail was held without asking the model again
    rows = ledger(config.db_path)
    for mid in ("<key-1@x.test>", "<key-2@x.test>"):  # the operator sees why in `quinn mail status`
        assert rows[mid]["reason"].startswith("held until the setup is fixed: LLM openai/gpt-test rejected our")
    assert len(mail_lab.dovecot.messages(quinn)) == 2 and mail_lab.dovecot.messages(alice) == []  # nothing lost

    check = quinn_check(config)
    assert check.returncode == 1
    [llm_line] = [line for line in check.stdout.splitlines() if line.startswith("llm")]
    assert "FAILED" in llm_line and "rejected our credentials" in llm_line

    key_revoked = False  # the operator fixes the key and reloads
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("setup error cleared (configuration reloaded)")

    def answered() -> bool:
        inbox = mail_lab.dovecot.messages(alice)
        return all(len(replies_to(inbox, mid)) == 1 for mid in ("<key-1@x.test>", "<key-2@x.test>"))

    wait_for(answered, "both held mails answered", log=daemon.log)
    wait_for(lambda: {s for s, _n in states(config).values()} == {"replied"}, "both replied", log=daemon.log)
    assert daemon.terminate() == 0


REVIEW = "SessionReview"  # the session-close call's schema: its RecordedRequest.purpose


def session_close_template(directory: Path, mark: str) -> Path:
    directory.mkdir()
    (directory / "session_close.j2").write_text(
        '{% extends "default/session_close.j2" %}\n{% block system %}{{ super() }}\nReview mark: ' + mark
        + ".\n{% endblock %}\n", encoding="utf-8",
    )  # fmt: skip
    return directory


def review_requests(llm_server: ScriptedLLM) -> list[RecordedRequest]:
    return [r for r in llm_server.requests if r.purpose == REVIEW]


def test_sighup_reaches_the_jobs(tmp_path: Path, mail_lab: MailLab, lab_config, llm_server: ScriptedLLM,
                                 quinn_daemon) -> None:  # fmt: skip
    """A new prompts.dir and background_model after SIGHUP: the next session-close run uses both."""
    alice = mail_lab.new_user("alice")
    first, second = session_close_template(tmp_path / "v1", "v1"), session_close_template(tmp_path / "v2", "v2")
    scheduler = ('[scheduler]\nstartup_delay_s = 0\nsession_close_after_min = 0.01\n'
                 'intervals_min = { session_close = 0.02 }\n'
                 'disabled = ["summarize", "consolidate", "decay", "cleanup", "reflect", "improvement"]\n')  # fmt: skip
    config = lab_config(extra=f'{QUIET}[prompts]\ndir = "{first}"\n{scheduler}')
    quinn = config.address

    def model(request: RecordedRequest):
        if request.purpose == REVIEW:
            return Json({"summary": "Alice said hello.", "feedback_text": "", "reward_score": None,
                         "improvement_suggestion": "", "memories": {"new": [], "updated": [], "contradicted": []},
                         "state": {}})  # fmt: skip
        return plain_model(request)

    llm_server.responder = model
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "First topic", message_id="<job-1@x.test>"))
    [before] = wait_for(lambda: review_requests(llm_server), "the first session reviewed", log=daemon.log)
    assert "Review mark: v1." in before.text and before.model == "gpt-test"

    config.path.write_text(config.path.read_text().replace(str(first), str(second))
                           .replace('model = "openai/gpt-test"', 'model = "openai/gpt-test"\n'
                                    'background_model = "openai/gpt-night"'), encoding="utf-8")  # fmt: skip
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log(f"reloaded {config.path}")
    mail_lab.smtp.send(alice, quinn, make_mail(alice, quinn, "Other topic", message_id="<job-2@x.test>"))
    wait_for(lambda: len(review_requests(llm_server)) >= 2, "the second session reviewed", log=daemon.log)
    after = review_requests(llm_server)[-1]
    assert "Review mark: v2." in after.text and "Review mark: v1." not in after.text
    assert after.model == "gpt-night"
    assert daemon.terminate() == 0


def test_setup_hold_logs_once_extends_and_clears(caplog) -> None:
    """The hold's own logic: one error line with the hint, then quiet extensions, and a clear that says so."""
    from datetime import UTC, datetime, timedelta

    from quinn.errors import ConfigError
    from quinn.hold import HELD_PREFIX, SetupHold

    now = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    hold = SetupHold(start_s=60, max_s=600)
    assert not hold.active(now) and not hold.clear("nothing to clear")
    error = ConfigError("LLM openai/x rejected our credentials", "check llm.api_key_env")
    with caplog.at_level("INFO", logger="quinn.hold"):
        first = hold.fail(error, now)
        assert timedelta(seconds=30) <= first - now < timedelta(seconds=90)  # 60 s with jitter
        assert hold.active(now) and not hold.active(first)
        assert hold.reason == f"{HELD_PREFIX}LLM openai/x rejected our credentials (hint: check llm.api_key_env)"
        second = hold.fail(error, first)  # the probe failed: longer
        assert timedelta(seconds=60) <= second - first < timedelta(seconds=180)
        hold.hold()
        assert hold.clear("a reply went through") and not hold.active(now)
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _m in levels] == ["ERROR", "WARNING", "INFO"]
    assert "(hint: check llm.api_key_env)" in levels[0][1] and "hint" not in levels[1][1]
    assert levels[2][1] == "setup error cleared (a reply went through): 1 held mails are taken up again"
