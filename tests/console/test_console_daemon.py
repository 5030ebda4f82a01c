"""``quinn run`` with ``[console] enabled``: the daemon serves the console over its own store, from READY on, and
an edit made there is a new version in the daemon's database; SIGTERM stops both (exit 0)."""

from __future__ import annotations

import re

import httpx

from quinn.console.auth import hash_password
from quinn.memory.store import MemoryStore
from tests.console.conftest import ALICE, DAEMON_CONSOLE, PASSWORDS, TEST_COST, csrf_of


def test_the_daemon_serves_the_console_on_its_own_store(lab_config, quinn_daemon):
    config = lab_config(extra=DAEMON_CONSOLE)
    config.env["Q_CONSOLE_ROOT"] = hash_password(PASSWORDS["root"], **TEST_COST)
    store = MemoryStore.open(str(config.db_path), embedder=None)
    memory_id = store.add(ALICE, "Alice keeps bees")
    store.close()
    daemon = quinn_daemon(config)
    daemon.wait_for_log("console on http://127.0.0.1:", timeout_s=90)
    url = re.search(r"console on (http://127\.0\.0\.1:\d+)/", daemon.log()).group(1)
    with httpx.Client(base_url=url, timeout=30) as client:
        form = {"csrf": csrf_of(client.get("/login").text), "name": "root", "password": PASSWORDS["root"]}
        assert client.post("/login", data=form).status_code == 303
        page = client.get(f"/memories/{memory_id}")
        assert "Alice keeps bees" in page.text
        edit = client.post(f"/memories/{memory_id}/edit", data={"csrf": csrf_of(page.text), "content": "Alice keeps "
                           "two hives of bees"})  # fmt: skip
        assert edit.status_code == 303
        assert "two hives" in client.get(edit.headers["location"]).text
    assert daemon.terminate() == 0
    store = MemoryStore.open(str(config.db_path), embedder=None)
    try:
        assert [m.content for m in store.history(memory_id)] == ["Alice keeps bees", "Alice keeps two hives of bees"]
    finally:
        store.close()


def test_quinn_check_reports_the_console_and_a_hash_that_does_not_parse(lab_config):
    from tests.commands.test_cli import quinn

    config = lab_config(extra=DAEMON_CONSOLE + '[embeddings]\nbackend = "none"\n')
    config.env["Q_CONSOLE_ROOT"] = hash_password(PASSWORDS["root"], **TEST_COST)
    result = quinn(config, "check")
    [line] = [line for line in result.stdout.splitlines() if line.startswith("console")]
    assert " ok " in line and "1 admin (0 read-only), every password hash parses" in line, result.stdout
    config.env["Q_CONSOLE_ROOT"] = "the-password-itself"
    result = quinn(config, "check")
    [line] = [line for line in result.stdout.splitlines() if line.startswith("console")]
    assert result.returncode == 1 and "FAILED" in line and "is not a password hash" in line
    assert "the-password-itself" not in result.stdout + result.stderr
