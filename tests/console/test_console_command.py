"""``quinn console`` as an operator runs it: a process serving the configured database until SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from quinn.console.auth import hash_password
from quinn.lab.ports import free_port
from quinn.lab.wait import wait_for
from quinn.memory.store import MemoryStore
from tests.console.conftest import CONFIG, PASSWORDS, TEST_COST


@pytest.mark.lab  # runs a process
def test_quinn_console_serves_the_configured_database_until_sigterm(tmp_path):
    port = free_port()
    config = CONFIG.replace("login_attempts = 3", f"port = {port}")
    (tmp_path / "quinn.toml").write_text(config, encoding="utf-8")
    MemoryStore.open(str(tmp_path / "quinn.db"), embedder=None).close()  # `quinn run` made it
    env = {**os.environ, "Q_CONSOLE_ROOT": hash_password(PASSWORDS["root"], **TEST_COST),
           "Q_CONSOLE_VIEWER": hash_password(PASSWORDS["viewer"], **TEST_COST)}  # fmt: skip
    env.pop("Q_IMAP", None)  # the console needs no IMAP password
    process = subprocess.Popen([sys.executable, "-m", "quinn", "console", "-c", str(tmp_path / "quinn.toml")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:

        def login_page() -> httpx.Response:
            assert process.poll() is None, process.communicate()[1].decode()
            return httpx.get(f"http://127.0.0.1:{port}/login", timeout=2)

        # a start-up, not a speed check: a loaded box took > 30 s
        login = wait_for(login_page, "quinn console listening", 120, retry_on=(httpx.TransportError,))
        assert login.status_code == 200 and 'name="csrf"' in login.text
        people = httpx.get(f"http://127.0.0.1:{port}/people", timeout=2)
        assert people.status_code == 303 and people.headers["location"] == "/login"
        assert "server" not in people.headers  # no version banner
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=15)
    assert process.returncode == 0, err.decode()
    assert PASSWORDS["root"] not in err.decode() and "scrypt$" not in err.decode()
