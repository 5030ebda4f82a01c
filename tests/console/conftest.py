"""Fixtures of the console tests: a real libSQL file with a few people, memories and mails, and the console
built from a real config (admins' hashes in environment variables, as an operator sets them)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from quinn.config import load_config
from quinn.console.app import Console
from quinn.console.auth import hash_password
from quinn.console.routes import build_app
from quinn.console.serve import ConsoleServer
from quinn.db import Database
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.parse import parse_email
from quinn.mailbox.threads import Sessions
from quinn.memory.store import MemoryStore
from tests.lab.require import missing
from tests.test_config import MINIMAL  # [imap], [smtp], [llm]; the database is quinn.db beside the file

ALICE = "alice@example.org"
BOB = "bob@example.org"
PASSWORDS = {"root": "correct horse battery", "viewer": "read only please"}
# A reply template that extends the default (MARK: a word to find), and the same with an undefined name.
EXTEND = """{% extends "default/reply.j2" %}
{% block system %}{{ super() }}
Sign as "Quinn from MARK".
{% endblock %}
"""
BROKEN = EXTEND.replace("super()", "supper()")  # undefined: the sample render catches it
# Cheapest scrypt the parser accepts: the tests log in often, and the cost is not what they test.
TEST_COST = {"n": 2**14, "r": 8, "p": 1}

CONFIG = (
    MINIMAL
    + """
[embeddings]
backend = "none"
[console]
enabled = true
login_attempts = 3
[[console.admins]]
name = "root"
password_hash_env = "Q_CONSOLE_ROOT"
[[console.admins]]
name = "viewer"
role = "read-only"
password_hash_env = "Q_CONSOLE_VIEWER"
"""
)


@dataclass
class World:
    """The console under test and what the database holds."""

    console: Console
    store: MemoryStore
    memory_id: int
    config_path: Path


def add_mail(db: Database, uid: int, raw: bytes, user: str, state: str, reason: str = "") -> None:
    """One mail as the daemon leaves it: in the conversation store and in the ledger."""
    email = parse_email(raw)
    sessions = Sessions(db)
    session_id = sessions.assign(email, user)
    sessions.store_inbound(session_id, user, email)
    ledger = MailLedger(db)
    key = MailKey("INBOX", 1, uid)
    ledger.receive(key)
    ledger.set(key, state, reason, message_id=email.message_id, user_id=user)


def mail_bytes(subject: str, message_id: str, sender: str = ALICE) -> bytes:
    return (f"From: {sender}\r\nTo: quinn@example.org\r\nSubject: {subject}\r\nMessage-ID: <{message_id}>\r\n"
            "Date: Tue, 24 Nov 2026 10:00:00 +0000\r\n\r\nHello Quinn.\r\n").encode()  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    env = {"Q_IMAP": "x"} | {f"Q_CONSOLE_{name.upper()}": hash_password(pw, **TEST_COST)
                             for name, pw in PASSWORDS.items()}  # fmt: skip
    path = tmp_path / "quinn.toml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_config(path, env=env)
    store = MemoryStore(Database.open(config.database.url), None)
    try:
        memory_id = store.add(ALICE, "Alice's sister is called Jo", type="fact", domain="family")
        store.add(ALICE, "Prefers short replies", type="preference")
        store.add(BOB, "Bob runs marathons", type="fact", domain="sport")
        add_mail(store.db, 1, mail_bytes("Dinner on Friday?", "m1@example.org"), ALICE, "replied")
        add_mail(store.db, 2, mail_bytes("Hi", "m2@example.org", BOB), BOB, "failed", "smtp 550 mailbox unavailable")
        yield World(Console(config.console, store), store, memory_id, path)
    finally:
        store.close()


@pytest.fixture
def app(world: World):  # type: ignore[no-untyped-def]
    return build_app(world.console)


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def log_in(client, name: str = "root", password: str | None = None):  # type: ignore[no-untyped-def]
    """Log ``client`` in through the login form; returns the response to the POST."""
    page = client.get("/login")
    form = {"csrf": csrf_of(page.text), "name": name, "password": PASSWORDS[name] if password is None else password}
    return client.post("/login", data=form, follow_redirects=False)


CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
HINT = "apt-get install chromium chromium-driver (.ci/run does)"


@pytest.fixture
def browser() -> Iterator[object]:
    """Debian's chromium, headless, through chromedriver (Selenium); a 1200x800 page."""
    if not (CHROMIUM and CHROMEDRIVER):
        missing("chromium and chromedriver", HINT)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: CI runs as root, where chromium's own sandbox refuses to start.
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,800",
                 "--disable-gpu", "--no-first-run", "--disable-extensions"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()


def full_console(world: World, tmp_path: Path) -> tuple[ConsoleServer, Path]:
    """The console as `quinn console` serves it (every part wired from the whole config), over ``world``'s store,
    with an admin prompts folder (returned); not started yet."""
    admin_dir = tmp_path / "prompts"
    admin_dir.mkdir()
    path = tmp_path / "full.toml"
    path.write_text(CONFIG.replace("[console]", f'[prompts]\ndir = "{admin_dir}"\n[console]'), encoding="utf-8")
    env = {"Q_IMAP": "x"} | {f"Q_CONSOLE_{name.upper()}": hash_password(pw, **TEST_COST)
                             for name, pw in PASSWORDS.items()}  # fmt: skip
    full = load_config(path, env=env)
    full.console.port = 0
    return ConsoleServer(full.console, world.store, full), admin_dir


# The console section of a daemon's config (`quinn run` serving the console on any free port).
DAEMON_CONSOLE = """
[console]
enabled = true
port = 0
[[console.admins]]
name = "root"
password_hash_env = "Q_CONSOLE_ROOT"
"""
