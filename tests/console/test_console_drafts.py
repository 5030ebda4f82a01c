"""Drafts awaiting review on the Mail page, in-process over a real libSQL file: listed with their text escaped and
a link to why Quinn said it; approve, edit and discard for the admin role only, with the CSRF token, audited;
the console only records the decision in the outbox (the daemon sends: tests/system/test_draft_review_lab.py)."""

from __future__ import annotations

import email
import html

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log, reply_trace
from quinn.console.routes import build_app
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.outbox import Outbox, expire_before
from quinn.mailbox.parse import parse_email
from quinn.mailbox.review import read_draft
from quinn.mailbox.smtp import compose_reply
from tests.console.conftest import ALICE, BOB, add_mail, csrf_of, log_in, mail_bytes

EVIL = "Sure! <script>alert(1)</script> & see <b>you</b>"


def draft_for(world, uid: int, subject: str, sender: str, body: str) -> str:  # type: ignore[no-untyped-def]
    """A mail answered in draft mode: ledger ``drafted``, its reply ``drafted`` in the outbox."""
    inbound = mail_bytes(subject, f"d{uid}@example.org", sender)
    add_mail(world.store.db, uid, inbound, sender, "drafted", "replied: drafted")
    reply = compose_reply(parse_email(inbound), body, own_address="quinn@example.org")
    outbox = Outbox(world.store.db)
    outbox.put(reply.message_id, f"<d{uid}@example.org>", sender, None, reply.recipients, reply.raw)
    outbox.begin(reply.message_id, "drafting")
    outbox.mark(reply.message_id, "drafted")
    return reply.message_id


@pytest.fixture
def drafts(world):  # type: ignore[no-untyped-def]
    first = draft_for(world, 10, "Lunch?", ALICE, EVIL)
    second = draft_for(world, 11, "Race", BOB, "Good luck on Sunday.")
    reply_trace.record(world.store.db, ALICE, "<d10@example.org>", "reply", "reply@1", reply_trace.Trace())
    return first, second


@pytest.fixture
def client(world):  # type: ignore[no-untyped-def]
    world.console.reply_mode = "draft"
    with TestClient(build_app(world.console), base_url="http://127.0.0.1") as client:
        yield client


def test_drafts_are_listed_escaped_and_only_the_admin_may_decide(world, drafts, client) -> None:
    first, _second = drafts
    log_in(client, "viewer")
    page = client.get("/mail").text
    assert "Drafts awaiting review" in page and "Good luck on Sunday." in page
    assert "<script>" not in page and html.escape(EVIL, quote=False) in page  # the model's text, inert
    trace_id = reply_trace.for_messages(world.store.db, ["<d10@example.org>"])["<d10@example.org>"]
    assert f'href="/replies/{trace_id}"' in page
    assert "/mail/drafts/" not in page  # read-only: the list, no forms
    for action in ("approve", "edit", "discard"):
        form = {"csrf": csrf_of(page), "message_id": first, "body": "x"}
        assert client.post(f"/mail/drafts/{action}", data=form).status_code == 403
    assert Outbox(world.store.db).get(first).state == "drafted"
    assert audit_log.listing(world.store.db) == []


def test_approve_edit_and_discard_record_the_decision_audited(world, drafts, client) -> None:
    first, second = drafts
    outbox = Outbox(world.store.db)
    log_in(client)
    page = client.get("/mail").text
    assert page.count('action="/mail/drafts/approve"') == 2 and page.count("<textarea") == 2
    csrf = csrf_of(page)
    forged = client.post("/mail/drafts/approve", data={"csrf": "forged", "message_id": first})
    assert forged.status_code == 403 and outbox.get(first).state == "drafted"
    edited = "Yes, noon at <Luigi's>.\r\nQuinn"
    done = client.post("/mail/drafts/edit", data={"csrf": csrf, "message_id": first, "body": edited},
                       follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"] == "/mail?reviewed=approved#drafts"
    item = outbox.get(first)
    assert (item.state, read_draft(item.raw).body) == ("approved", "Yes, noon at <Luigi's>.\nQuinn\n")
    msg = email.message_from_bytes(item.raw)
    assert (msg["Message-ID"], msg["In-Reply-To"], msg["To"], msg["Subject"]) == (
        first, "<d10@example.org>", ALICE, "Re: Lunch?")  # fmt: skip
    assert client.post("/mail/drafts/discard", data={"csrf": csrf, "message_id": second}).status_code == 200
    assert outbox.get(second).state == "discarded"
    again = client.post("/mail/drafts/discard", data={"csrf": csrf, "message_id": first})
    assert again.status_code == 400 and "is approved, not a draft awaiting review" in again.text
    # The console sent nothing and moved no mail: the daemon does (engine/reviews.py).
    assert MailLedger(world.store.db).get(MailKey("INBOX", 1, 10)).state == "drafted"
    entries = audit_log.listing(world.store.db)
    assert [(e.actor, e.action, e.object, e.user_id, e.detail) for e in reversed(entries)] == [
        ("root", "edit draft", f"draft {first}", ALICE, f"to {ALICE}; text replaced"),
        ("root", "discard draft", f"draft {second}", BOB, f"was to {BOB}"),
    ]
    assert all("Luigi" not in (e.detail or "") for e in entries)  # never the text
    page = client.get("/mail").text
    assert "approved" in page and "by root" in page and 'action="/mail/drafts/' not in page


def test_a_blanked_draft_cannot_be_approved_and_bad_forms_are_refused(world, drafts, client) -> None:
    first, _second = drafts
    with world.store.db.transaction() as tx:
        expire_before(tx, "9999")
    log_in(client)
    page = client.get("/mail").text
    assert "blanked by retention" in page and 'action="/mail/drafts/approve"' not in page
    csrf = csrf_of(page)
    refused = client.post("/mail/drafts/approve", data={"csrf": csrf, "message_id": first})
    assert refused.status_code == 400 and "blanked by retention" in refused.text
    assert client.post("/mail/drafts/edit", data={"csrf": csrf, "message_id": first, "body": " "}).status_code == 400
    assert client.post("/mail/drafts/approve", data={"csrf": csrf}).status_code == 400
    assert Outbox(world.store.db).get(first).state == "drafted"
    assert client.post("/mail/drafts/discard", data={"csrf": csrf, "message_id": first}).status_code == 200


def test_the_section_shows_only_in_draft_mode_or_with_drafts(world, client) -> None:
    log_in(client)
    assert "No drafts awaiting review." in client.get("/mail").text
    world.console.reply_mode = "send"
    assert "Drafts awaiting review" not in client.get("/mail").text
    draft_for(world, 12, "Left over", ALICE, "From when draft mode was on.")
    assert "From when draft mode was on." in client.get("/mail").text
