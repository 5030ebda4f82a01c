"""Drafts awaiting review end to end: `quinn run` in draft mode on the real lab (Dovecot, aiosmtpd, the scripted
model) with its console on. Replies land in Drafts and nothing is sent; an admin approves one, edits one and
discards one on the Mail page; the daemon then sends the approved two over SMTP exactly once (the edited one with
the new text), their mails end `replied`, the discarded one is never sent, and every reviewed draft leaves Drafts."""

from __future__ import annotations

import email
import email.policy
import re
from typing import Any

import httpx

from quinn.console.auth import hash_password
from quinn.lab.wait import wait_for
from tests.console.conftest import DAEMON_CONSOLE, PASSWORDS, TEST_COST, csrf_of
from tests.lab.mails import ledger, make_mail, plain_model, query, replies_to

IDS = {"approve": "<approve@x.test>", "edit": "<edit@x.test>", "discard": "<discard@x.test>"}


def draft_ids(raws: list[bytes]) -> dict[str, str]:
    """In-Reply-To -> Message-ID of the drafts in a folder."""
    msgs = [email.message_from_bytes(raw, policy=email.policy.default) for raw in raws]
    return {str(m["In-Reply-To"]): str(m["Message-ID"]) for m in msgs}


def test_drafts_are_sent_once_approved_and_never_when_discarded(mail_lab: Any, lab_config: Any, llm_server: Any,
                                                                 quinn_daemon: Any) -> None:  # fmt: skip
    llm_server.responder = plain_model
    config = lab_config(extra='[embeddings]\nbackend = "none"\n' + DAEMON_CONSOLE, smtp_extra='reply_mode = "draft"')
    config.env["Q_CONSOLE_ROOT"] = hash_password(PASSWORDS["root"], **TEST_COST)
    daemon = quinn_daemon(config)
    daemon.wait_for_log("console on http://127.0.0.1:", timeout_s=90)
    url = re.search(r"console on (http://127\.0\.0\.1:\d+)/", daemon.log()).group(1)
    dovecot, smtp, quinn = mail_lab.dovecot, mail_lab.smtp, config.address
    alice = mail_lab.new_user("alice")
    for name, mid in IDS.items():
        smtp.send(alice, quinn, make_mail(alice, quinn, name.capitalize(), message_id=mid))
    drafts = wait_for(lambda: len(d := dovecot.messages(quinn, "Drafts")) == 3 and d, "three drafts", log=daemon.log)
    wait_for(lambda: all(ledger(config.db_path).get(m, {}).get("moved") for m in IDS.values()), "filed",
             log=daemon.log)  # fmt: skip
    ours = draft_ids(drafts)
    sent = lambda: [r for r in smtp.received if r.mail_from == quinn]  # noqa: E731
    assert sent() == [] and dovecot.messages(alice) == []  # draft mode: nothing left
    assert {ledger(config.db_path)[m]["state"] for m in IDS.values()} == {"drafted"}

    with httpx.Client(base_url=url, timeout=30) as client:
        form = {"csrf": csrf_of(client.get("/login").text), "name": "root", "password": PASSWORDS["root"]}
        assert client.post("/login", data=form).status_code == 303
        page = client.get("/mail").text
        assert "Drafts awaiting review" in page and page.count('action="/mail/drafts/approve"') == 3
        csrf = csrf_of(page)
        for action, body in (("approve", None), ("edit", "Edited by a person.\nSee you."), ("discard", None)):
            data = {"csrf": csrf, "message_id": ours[IDS[action]]} | ({"body": body} if body else {})
            assert client.post(f"/mail/drafts/{action}", data=data).status_code == 303

    wait_for(lambda: dovecot.messages(quinn, "Drafts") == [], "the reviewed drafts gone from Drafts", timeout_s=60,
             log=daemon.log)  # fmt: skip
    wait_for(lambda: ledger(config.db_path)[IDS["edit"]]["state"] == "replied", "the edited one replied",
             log=daemon.log)  # fmt: skip
    inbox = dovecot.wait_for_messages(alice, 2)
    assert daemon.terminate() == 0
    # Sent over SMTP exactly once each (to alice, Bcc to Quinn for the proof copy), with the draft's Message-ID.
    assert sorted(r.rcpt_tos == [alice, quinn] for r in sent()) == [True, True]
    [approved] = replies_to(inbox, IDS["approve"])
    [edited] = replies_to(inbox, IDS["edit"])
    assert replies_to(dovecot.messages(alice), IDS["discard"]) == []
    edited_msg = email.message_from_bytes(edited, policy=email.policy.default)
    assert edited_msg["Message-ID"] == ours[IDS["edit"]] and edited_msg["Subject"] == "Re: Edit"
    assert edited_msg.get_body(("plain",)).get_content().replace("\r\n", "\n") == "Edited by a person.\nSee you.\n"
    approved_msg = email.message_from_bytes(approved, policy=email.policy.default)
    assert approved_msg["Message-ID"] == ours[IDS["approve"]]
    rows = ledger(config.db_path)
    assert [rows[IDS[a]]["state"] for a in ("approve", "edit", "discard")] == ["replied", "replied", "drafted"]
    stored = dict(query(config.db_path, "SELECT in_reply_to, state FROM outbox WHERE draft_removed_at IS NOT NULL"
                        " AND reviewed_by = 'root'"))  # fmt: skip
    assert stored == {IDS["approve"]: "sent", IDS["edit"]: "sent", IDS["discard"]: "discarded"}
    assert len(replies_to(dovecot.messages(quinn, "Quinn.Sent"), IDS["approve"])) == 1  # our copy, filed
