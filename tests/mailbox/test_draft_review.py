"""Drafts awaiting review, below the console and the daemon: the outbox's decisions on a real libSQL file
(approve, edit, discard, refused twice or after retention blanked the text) and the reviewer's text rebuilt into
the reply's MIME with its headers and attachments kept."""

from __future__ import annotations

import email
import email.policy
from pathlib import Path

import pytest

from quinn.db import Database
from quinn.errors import QuinnError
from quinn.mailbox.outbox import Outbox, expire_before
from quinn.mailbox.parse import parse_email
from quinn.mailbox.review import read_draft, with_body
from quinn.mailbox.smtp import compose_reply

INBOUND = (b"From: Alice <alice@example.org>\r\nTo: quinn@example.org\r\nCc: bob@example.org\r\nSubject: Plan\r\n"
           b"Message-ID: <plan@example.org>\r\nReferences: <root@example.org>\r\n\r\nShall we meet?\r\n")  # fmt: skip


@pytest.fixture
def outbox(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = Database.open(str(tmp_path / "quinn.db"))
    try:
        yield Outbox(db)
    finally:
        db.close()


def drafted(outbox: Outbox, body: str = "See you at noon.", **kwargs) -> str:  # type: ignore[no-untyped-def]
    reply = compose_reply(parse_email(INBOUND), body, own_address="quinn@example.org", reply_all=True, **kwargs)
    outbox.put(reply.message_id, "<plan@example.org>", "alice@example.org", None, reply.recipients, reply.raw)
    outbox.begin(reply.message_id, "drafting")
    outbox.mark(reply.message_id, "drafted")
    return reply.message_id


def test_an_edit_keeps_the_reply_headers_and_rebuilds_the_body() -> None:
    reply = compose_reply(parse_email(INBOUND), "Old text", own_address="quinn@example.org", reply_all=True,
                          attachments=[("export.json", "application/json", b'{"a": 1}')])  # fmt: skip
    raw = with_body(reply.raw, "New <b>text</b>\r\nsecond line")
    old = email.message_from_bytes(reply.raw, policy=email.policy.default)
    new = email.message_from_bytes(raw, policy=email.policy.default)
    for name in ("Message-ID", "In-Reply-To", "References", "From", "To", "Cc", "Subject", "Auto-Submitted"):
        assert new[name] == old[name], name
    assert new.get_body(("plain",)).get_content() == "New <b>text</b>\r\nsecond line\r\n"  # CRLF on the wire
    assert "New &lt;b&gt;text&lt;/b&gt;<br>second line" in new.get_body(("html",)).get_content()
    [attachment] = new.iter_attachments()
    assert (attachment.get_filename(), attachment.get_content()) == ("export.json", b'{"a": 1}')
    assert read_draft(raw).body == "New <b>text</b>\nsecond line\n"
    assert (read_draft(raw).to, read_draft(raw).cc, read_draft(raw).subject) == (
        "alice@example.org", "bob@example.org", "Re: Plan")  # fmt: skip


def test_approve_edit_and_discard_are_decided_once(outbox: Outbox) -> None:
    first = drafted(outbox)
    [draft] = outbox.drafts()
    assert draft.awaiting and not draft.blanked and draft.item.state == "drafted"
    assert outbox.pending() == [] and outbox.to_send_reviewed() == [] and not outbox.reviewed_work()
    item = outbox.review(first, "approved", "root", body="Noon is fine.")
    assert item.state == "approved" and read_draft(item.raw).body == "Noon is fine.\n"
    assert email.message_from_bytes(item.raw)["Message-ID"] == first
    assert [i.message_id for i in outbox.to_send_reviewed()] == [first] and outbox.reviewed_work()
    assert outbox.pending() == []  # the digests' and the mail path's list never takes a reviewed item
    with pytest.raises(QuinnError, match="is approved, not a draft awaiting review"):
        outbox.review(first, "discarded", "other")
    [listed] = outbox.drafts()
    assert (listed.awaiting, listed.reviewed_by) == (False, "root")
    outbox.begin(first, "sending")
    outbox.mark(first, "sent")
    assert outbox.drafts() == [] and outbox.to_send_reviewed() == []
    assert outbox.drafts_to_remove() == [first]
    assert outbox.reviewed_work()
    outbox.draft_removed(first)
    assert outbox.drafts_to_remove() == [] and not outbox.reviewed_work()
    with pytest.raises(QuinnError, match="no reply <nope@x> in the outbox"):
        outbox.review("<nope@x>", "approved", "root")


def test_a_discarded_draft_is_never_sent_and_a_blanked_one_cannot_be_approved(outbox: Outbox) -> None:
    mid = drafted(outbox)
    with outbox.db.transaction() as tx:
        assert expire_before(tx, "9999") == {"outbox_raw": 1}  # retention's window has passed
    [draft] = outbox.drafts()
    assert draft.blanked
    with pytest.raises(QuinnError, match="blanked by retention") as refused:
        outbox.review(mid, "approved", "root")
    assert "drafts folder" in str(refused.value.hint)
    with pytest.raises(QuinnError, match="blanked by retention"):  # an edit has no headers to keep either
        outbox.review(mid, "approved", "root", body="A new text")
    assert outbox.get(mid).state == "drafted"
    outbox.review(mid, "discarded", "root")
    assert outbox.to_send_reviewed() == [] and outbox.drafts() == []
    assert outbox.drafts_to_remove() == [mid]
