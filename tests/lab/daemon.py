"""Run ``quinn`` as a real subprocess against the lab, with its log in a file for assertions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quinn.lab.wait import wait_for
from tests.lab.process import kill_group, track, untrack


def write_config(path: Path, text: str) -> Path:
    """Write a config file and return its path."""
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class LabConfig:
    """A quinn.toml for the lab, and the environment that holds its secrets."""

    path: Path
    env: dict[str, str]
    address: str
    db_path: Path


@dataclass
class QuinnProcess:
    """``quinn run -c CONFIG`` in its own process group; ``stop()`` sends SIGTERM and waits for exit."""

    config: LabConfig
    log_path: Path
    args: tuple[str, ...] = ("run",)
    proc: subprocess.Popen[bytes] | None = None
    returncodes: list[int] = field(default_factory=list)

    def start(self) -> QuinnProcess:
        env = {**os.environ, **self.config.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "quinn", *self.args, "-c", str(self.config.path)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        log.close()
        track(self)
        return self

    def wait_for_log(self, text: str, timeout_s: float = 60.0) -> None:
        """Block until ``text`` appears in the log; fail with the log tail when the process dies or time runs out."""

        def logged() -> bool:
            if text in self.log():
                return True
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"quinn exited with {self.proc.returncode} before {text!r}:\n{self.log()[-3000:]}")
            return False

        wait_for(logged, f"{text!r} in quinn's log", timeout_s, log=self.log)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout_s)
        self.returncodes.append(code)
        untrack(self)
        return code

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc)
            self.returncodes.append(self.proc.wait())
        untrack(self)

    def stop(self) -> None:
        """Safety net for the lab: kill whatever is left."""
        self.kill()


def init_flags(address: str, dovecot: Any, smtp: Any, llm: Any, state: Path) -> list[str]:
    """``quinn init --non-interactive`` flags for the lab: Dovecot, the SMTP lab (no login), the scripted model
    as an OpenAI-compatible server; the mail password in LAB_MAIL_PASSWORD, the model key in LAB_LLM_KEY."""
    from tests.lab.smtp import LAB_AUTHSERV

    return [
        "--non-interactive", "--address", address,
        "--imap-host", "127.0.0.1", "--imap-port", str(dovecot.port), "--imap-tls", "none",
        "--smtp-host", "127.0.0.1", "--smtp-port", str(smtp.port), "--smtp-tls", "none", "--smtp-user", "",
        "--password-env", "LAB_MAIL_PASSWORD", "--provider", "openai-compatible", "--model", "gpt-test",
        "--base-url", llm.openai_base_url, "--api-key-env", "LAB_LLM_KEY",
        "--state-dir", str(state), "--authserv-id", LAB_AUTHSERV,
    ]  # fmt: skip


def seconds_to_ready(command: list[str], env: dict[str, str], log: Path, timeout_s: float = 120) -> float:
    """Seconds from spawning ``quinn run`` (``command``) to its "quinn started" line; then SIGTERM, exit 0."""
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:

        def ready() -> bool:
            assert proc.poll() is None, f"quinn exited with {proc.returncode}:\n{log.read_text()[-2000:]}"
            return "quinn started" in log.read_text()

        wait_for(ready, "quinn started", timeout_s, interval_s=0.01, log=log.read_text)
        return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
