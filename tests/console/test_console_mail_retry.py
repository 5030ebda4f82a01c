"""Retry from the Mail page, in-process over a real libSQL file: the function of ``quinn mail status --retry``
(engine/retry.py), for the admin role only, with the CSRF token, audited; what it cannot retry is refused with
the reason."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log
from quinn.config import load_config
from quinn.console.routes import build_app
from quinn.console.serve import mail_parts
from quinn.mailbox.ledger import MailKey, MailLedger
from tests.console.conftest import BOB, add_mail, csrf_of, log_in, mail_bytes


@pytest.fixture
def client(world):
    config = load_config(world.config_path, env={"Q_IMAP": "x", "Q_CONSOLE_ROOT": "x", "Q_CONSOLE_VIEWER": "x"})
    world.console.retry_mail = mail_parts(config, world.store)["retry_mail"]
    with TestClient(build_app(world.console), base_url="http://127.0.0.1") as client:
        yield client


def key_form(csrf: str, uid: int) -> dict[str, str]:
    return {"csrf": csrf, "folder": "INBOX", "uidvalidity": "1", "uid": str(uid), "reason": "SMTP fixed"}


def test_a_failed_mail_goes_round_again_audited(world, client):
    ledger = MailLedger(world.store.db)
    log_in(client, "viewer")
    page = client.get("/mail").text
    assert 'action="/mail/retry"' not in page  # the read-only role sees no retry
    assert client.post("/mail/retry", data=key_form(csrf_of(page), 2)).status_code == 403
    client.post("/logout", data={"csrf": csrf_of(page)})
    log_in(client)
    page = client.get("/mail").text
    assert page.count('action="/mail/retry"') == 1  # the failed mail only, not the replied one
    assert client.post("/mail/retry", data=key_form("forged", 2)).status_code == 403
    assert ledger.get(MailKey("INBOX", 1, 2)).state == "failed"
    done = client.post("/mail/retry", data=key_form(csrf_of(page), 2), follow_redirects=False)
    assert done.status_code == 303
    record = ledger.get(MailKey("INBOX", 1, 2))
    assert record.state == "retried" and record.attempts == 0 and "was: smtp 550" in record.reason
    [entry] = audit_log.listing(world.store.db)
    assert (entry.actor, entry.action, entry.object, entry.user_id) == ("root", "retry mail", "mail INBOX:1:2", BOB)
    assert entry.detail == "was failed; still in the watched folder; SMTP fixed"
    assert "goes round again" in client.get(done.headers["location"]).text


def test_what_cannot_be_retried_is_refused_with_the_reason(world, client):
    add_mail(world.store.db, 3, mail_bytes("Huge", "m3@example.org"), BOB, "quarantined", "too large")
    ledger = MailLedger(world.store.db)
    ledger.set(MailKey("INBOX", 1, 3), "quarantined", "too large: 9999999 bytes > 10240 KiB", message_id="")
    ledger.mark_moved(MailKey("INBOX", 1, 3))
    log_in(client)
    csrf = csrf_of(client.get("/mail").text)
    replied = client.post("/mail/retry", data=key_form(csrf, 1))
    assert replied.status_code == 400 and "is replied, not failed or quarantined" in replied.text
    unread = client.post("/mail/retry", data=key_form(csrf, 3))
    assert unread.status_code == 400 and "quarantined before its Message-ID was read" in unread.text
    assert "by hand" in unread.text
    assert client.post("/mail/retry", data={"csrf": csrf, "uid": "x"}).status_code == 400
    assert audit_log.listing(world.store.db) == []
