"""`quinn init` (issue 19): a commented quinn.toml from flags or answers, which `quinn check` then passes against
the lab (Dovecot, the SMTP lab, the scripted model)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lab.brain import Brain
from tests.lab.daemon import init_flags
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import ScriptedLLM
from tests.lab.smtp import LAB_AUTHSERV, SmtpLab


def quinn(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "quinn", *args], capture_output=True, text=True, timeout=120,
                          env=full_env, input=stdin)  # fmt: skip


def test_init_writes_a_config_that_quinn_check_passes(
    tmp_path: Path, dovecot: Dovecot, smtp_lab: SmtpLab, llm_server: ScriptedLLM, users: Callable[[str], str],
    brain: Brain,
) -> None:  # fmt: skip
    address = users("quinn")
    path = tmp_path / "etc" / "quinn.toml"
    flags = init_flags(address, dovecot, smtp_lab, llm_server, tmp_path)
    made = quinn("init", "-c", str(path), *flags)
    assert made.returncode == 0, made.stderr
    assert f"next: LAB_LLM_KEY=... LAB_MAIL_PASSWORD=... quinn check -c {path}" in made.stdout
    text = path.read_text()
    assert text.startswith("# Quinn configuration") and "# Folder Quinn watches for new mail." in text  # commented
    config = tomllib.loads(text)
    assert config["imap"]["port"] == dovecot.port and config["imap"]["username"] == address
    assert "username" not in config["smtp"] and config["smtp"]["reply_mode"] == "draft"
    assert config["llm"] == {**config["llm"], "model": "openai/gpt-test", "base_url": llm_server.openai_base_url,
                             "api_key_env": "LAB_LLM_KEY"}  # fmt: skip
    assert config["database"]["url"] == str(tmp_path / "quinn.db")
    assert config["policy"]["authserv_id"] == LAB_AUTHSERV

    env = {"LAB_MAIL_PASSWORD": dovecot.password, "LAB_LLM_KEY": "test-key"}
    check = quinn("check", "-c", str(path), env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert [line.split()[1] for line in check.stdout.splitlines()] == ["ok"] * 8, check.stdout

    again = quinn("init", "-c", str(path), *flags)  # an existing file is kept...
    assert again.returncode == 2 and "pass --force to overwrite it" in again.stderr
    assert path.read_text() == text
    forced = quinn("init", "-c", str(path), *flags, "--force", "--reply-mode", "send")  # ...unless forced
    assert forced.returncode == 0 and tomllib.loads(path.read_text())["smtp"]["reply_mode"] == "send"


@pytest.mark.lab  # runs a process
def test_init_asks_for_what_the_flags_leave_out(tmp_path: Path) -> None:
    path = tmp_path / "quinn.toml"
    # address, then IMAP host/tls/port/login, SMTP host/tls/port/login, reply mode, provider, model, URL, state
    # dir, authserv id: empty answers take the default shown.
    answers = ["quinn@example.test", "127.0.0.1", "none", "1", "", "127.0.0.1", "none", "1", "", "",
               "ollama", "", "http://127.0.0.1:1/v1", str(tmp_path), ""]  # fmt: skip
    made = quinn("init", "-c", str(path), stdin="\n".join(answers) + "\n")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "127.0.0.1:1: not reachable now" in made.stdout  # checked as it goes, not fatal
    config = tomllib.loads(path.read_text())
    assert config["llm"]["model"] == "ollama/llama3.2" and config["llm"]["base_url"] == "http://127.0.0.1:1/v1"
    assert "api_key_env" not in config["llm"] and "authserv_id" not in config["policy"]
    assert (
        config["imap"]["username"] == "quinn@example.test" and config["smtp"]["password_env"] == "QUINN_IMAP_PASSWORD"
    )


@pytest.mark.lab  # runs a process
def test_init_refuses_answers_that_make_no_config(tmp_path: Path) -> None:
    made = quinn("init", "-c", str(tmp_path / "q.toml"), "--non-interactive", "--address", "quinn@example.test",
                 "--provider", "openai-compatible", "--base-url", "http://127.0.0.1:1/v1")  # fmt: skip
    assert made.returncode == 2 and "needs --model" in made.stderr  # no model named for a generic server
    assert not (tmp_path / "q.toml").exists()
    # Every missing flag at once, named as a flag, before any server is probed (issue 34).
    made = quinn("init", "-c", str(tmp_path / "q.toml"), "--non-interactive", "--provider", "openai-compatible")
    assert made.returncode == 2 and "needs --address and --model and --base-url" in made.stderr, made.stderr
    assert "not reachable" not in made.stdout and not (tmp_path / "q.toml").exists()
