"""Admins with a login token (``token_env``) instead of a password hash: the same login form, the same rate limit,
the same roles, and the token never in a log line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from quinn.config import load_config
from quinn.console.app import Console
from quinn.console.auth import hash_password
from quinn.console.routes import build_app
from quinn.db import Database
from quinn.logs import secret_values
from quinn.memory.store import MemoryStore
from tests.console.conftest import ALICE, CONFIG, PASSWORDS, TEST_COST, csrf_of

TOKENS = {"ops": "Zq3-VYb0nq8p1Gd3t6cH7Xk0RZr2mWl9aJ4yS5uE1oI", "auditor": "a" * 32}
TOKEN_ADMINS = """
[[console.admins]]
name = "ops"
token_env = "Q_CONSOLE_OPS"
[[console.admins]]
name = "auditor"
role = "read-only"
token_env = "Q_CONSOLE_AUDITOR"
"""


@pytest.fixture
def setup(tmp_path) -> Iterator[tuple[TestClient, MemoryStore, int]]:  # type: ignore[no-untyped-def]
    env = {"Q_IMAP": "x", "Q_CONSOLE_OPS": TOKENS["ops"], "Q_CONSOLE_AUDITOR": TOKENS["auditor"]}
    env |= {f"Q_CONSOLE_{name.upper()}": hash_password(pw, **TEST_COST) for name, pw in PASSWORDS.items()}
    path = tmp_path / "quinn.toml"
    path.write_text(CONFIG + TOKEN_ADMINS, encoding="utf-8")
    config = load_config(path, env=env)
    assert set(TOKENS.values()) <= set(secret_values(config))  # the log filter redacts them
    store = MemoryStore(Database.open(config.database.url), None)
    try:
        memory_id = store.add(ALICE, "Alice's sister is called Jo", type="fact", domain="family")
        with TestClient(build_app(Console(config.console, store)), base_url="http://127.0.0.1") as client:
            yield client, store, memory_id
    finally:
        store.close()


def log_in(client: TestClient, name: str, password: str):  # type: ignore[no-untyped-def]
    form = {"csrf": csrf_of(client.get("/login").text), "name": name, "password": password}
    return client.post("/login", data=form, follow_redirects=False)


def test_a_token_admin_logs_in_with_the_token_as_password(setup):
    client, _store, _memory_id = setup
    response = log_in(client, "ops", TOKENS["ops"])
    assert response.status_code == 303 and response.headers["location"] == "/people"
    assert ALICE in client.get("/people").text


def test_a_password_admin_still_logs_in_beside_token_admins(setup):
    client, _store, _memory_id = setup
    assert log_in(client, "root", PASSWORDS["root"]).status_code == 303


def test_a_wrong_token_fails_and_counts_toward_the_rate_limit(setup, caplog):
    client, _store, _memory_id = setup
    caplog.set_level(logging.INFO)
    almost = TOKENS["ops"][:-1] + "J"
    for wrong in (almost, TOKENS["ops"] + " ", TOKENS["auditor"]):  # login_attempts = 3 in the test config
        response = log_in(client, "ops", wrong)
        assert response.status_code == 401 and "Wrong name or password" in response.text
    refused = log_in(client, "ops", TOKENS["ops"])  # even the right token waits now
    assert refused.status_code == 429 and "Too many failed logins" in refused.text
    assert client.get("/people", follow_redirects=False).status_code == 303  # to /login: not logged in
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "login as 'ops' from testclient failed" in logged and "refused: too many failed attempts" in logged
    assert TOKENS["ops"] not in logged and almost not in logged and TOKENS["auditor"] not in logged


def test_a_token_is_no_password_for_another_admin(setup):
    client, _store, _memory_id = setup
    assert log_in(client, "root", TOKENS["ops"]).status_code == 401
    assert log_in(client, "ops", PASSWORDS["root"]).status_code == 401


def test_the_read_only_role_applies_to_a_token_admin(setup):
    client, store, memory_id = setup
    assert log_in(client, "auditor", TOKENS["auditor"]).status_code == 303
    page = client.get(f"/memories/{memory_id}").text
    assert "sister is called Jo" in page and 'action="/memories' not in page  # no edit or forget form
    for action in ("edit", "forget"):
        response = client.post(f"/memories/{memory_id}/{action}", data={"csrf": csrf_of(page), "content": "x"})
        assert response.status_code == 403 and "read-only" in response.text
    assert store.get(memory_id).current and len(store.history(memory_id)) == 1
