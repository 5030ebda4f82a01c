"""Delivery of outbox items through the real lab: exactly once across an interrupted try, SMTP retries with
backoff, permanent refusals, and draft mode. The crash itself is simulated by leaving an item in flight the way
a killed daemon leaves it; tests/system/test_crash.py kills a real `quinn run`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quinn.db import Database
from quinn.errors import ConnectError, RetryLater
from quinn.mailbox.delivery import Delivery
from quinn.mailbox.imap import ImapMailbox
from quinn.mailbox.outbox import Outbox, OutboxItem
from quinn.mailbox.parse import parse_email
from quinn.mailbox.smtp import SmtpSender, compose_reply
from tests.lab.dovecot import Dovecot
from tests.lab.mails import lab_settings, make_mail
from tests.lab.smtp import SmtpLab

Users = Callable[[str], str]


async def run_here(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The daemon runs DB and IMAP calls on their own threads; one test can run them in place."""
    return fn(*args, **kwargs)


@dataclass
class Rig:
    quinn: str
    alice: str
    outbox: Outbox
    mailbox: ImapMailbox
    delivery: Delivery
    lab: SmtpLab
    dovecot: Dovecot

    def put(self, n: int = 1) -> OutboxItem:
        inbound = parse_email(make_mail(self.alice, self.quinn, f"Question {n}", message_id=f"<q{n}@example.test>"))
        reply = compose_reply(inbound, f"Answer {n}", own_address=self.quinn)
        return self.outbox.put(reply.message_id, inbound.message_id, self.alice, None, reply.recipients, reply.raw)

    def replies(self) -> list[bytes]:
        return self.dovecot.messages(self.alice)


@pytest.fixture
def make_rig(tmp_path: Path, dovecot: Dovecot, smtp_lab: SmtpLab, users: Users) -> AsyncIterator[Callable[..., Rig]]:
    opened: list[tuple[Database, ImapMailbox]] = []

    def make(imap: dict[str, Any] | None = None, **smtp: Any) -> Rig:
        quinn, alice = users("quinn"), users("alice")
        smtp = {"retry_delay_s": 0, **smtp}
        config = lab_settings(dovecot, quinn, smtp_port=smtp_lab.port, smtp=smtp, imap=imap or {})
        db = Database.open(str(tmp_path / f"{quinn}.db"))
        mailbox = ImapMailbox(config.imap)
        mailbox.connect()
        opened.append((db, mailbox))
        outbox = Outbox(db)
        delivery = Delivery(config.smtp, config.imap, outbox, SmtpSender(config.smtp), mailbox, run_here, run_here)
        return Rig(quinn, alice, outbox, mailbox, delivery, smtp_lab, dovecot)

    yield make  # type: ignore[misc]
    for db, mailbox in opened:
        mailbox.close()
        db.close()


async def test_a_reply_is_sent_once_and_its_copy_filed(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    item = rig.put()
    assert await rig.delivery.deliver(item) == "replied"
    assert len(rig.replies()) == 1
    stored = rig.outbox.get(item.message_id)
    assert stored is not None and (stored.state, stored.attempts) == ("sent", 1)
    # The Bcc copy (envelope only, not in the headers) went to Quinn and was filed at once.
    assert rig.lab.received[-1].rcpt_tos == [rig.alice, rig.quinn]
    assert b"Bcc" not in rig.lab.received[-1].data
    assert rig.dovecot.messages(rig.quinn) == []
    assert len(rig.dovecot.messages(rig.quinn, "Quinn.Sent")) == 1
    assert await rig.delivery.deliver(rig.outbox.get(item.message_id)) == "replied"  # type: ignore[arg-type]
    assert len(rig.replies()) == 1


async def test_an_interrupted_send_that_got_through_is_not_repeated(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    item = rig.put()
    # The crashed daemon: marked sending, the server accepted (the copy is in Quinn's INBOX), then it died.
    rig.outbox.begin(item.message_id, "sending")
    await rig.delivery.sender.send(item.raw, rig.quinn, [rig.alice, rig.quinn])
    restarted = rig.outbox.get(item.message_id)
    assert restarted is not None and restarted.in_flight
    assert await rig.delivery.deliver(restarted) == "replied"
    assert len(rig.replies()) == 1
    assert rig.outbox.get(item.message_id).state == "sent"  # type: ignore[union-attr]
    assert len(rig.dovecot.messages(rig.quinn, "Quinn.Sent")) == 1


async def test_a_forged_copy_carrying_only_the_replys_message_id_neither_stops_it_nor_is_filed(
    make_rig: Callable[..., Rig],
) -> None:
    """Reply ids follow from the mail they answer, so a stranger can send Quinn mail with one. Found in the
    mailbox after a crash mid-send, such a mail must not count as the proof copy (the reply would never go), nor
    be filed away as ours (the pipeline would never see it)."""
    rig = make_rig()
    item = rig.outbox.begin(rig.put().message_id, "sending")  # died before the server answered
    forged = make_mail("mallory@evil.test", rig.quinn, "Re: Question 1", body="Not the reply.",
                       message_id=item.message_id)  # fmt: skip
    rig.dovecot.append(rig.quinn, forged)
    assert await rig.delivery.deliver(item) == "replied"
    assert len(rig.replies()) == 1  # sent: the forged mail was no proof
    assert rig.outbox.get(item.message_id).attempts == 2  # type: ignore[union-attr]
    inbox = rig.dovecot.messages(rig.quinn)
    assert len(inbox) == 1 and b"mallory@evil.test" in inbox[0]  # left for the pipeline, not filed as ours
    sent = rig.dovecot.messages(rig.quinn, "Quinn.Sent")
    assert len(sent) == 1 and b"mallory" not in sent[0]  # the real copy was filed


async def test_copies_are_found_in_inbox_when_another_folder_is_watched(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(imap={"folder": "Quinn/In"})
    first, second = rig.put(1), rig.put(2)
    assert await rig.delivery.deliver(first) == "replied"
    rig.outbox.begin(second.message_id, "sending")
    await rig.delivery.sender.send(second.raw, rig.quinn, [rig.alice, rig.quinn])  # then "crashed"
    assert await rig.delivery.deliver(rig.outbox.get(second.message_id)) == "replied"
    assert len(rig.replies()) == 2  # one each
    assert rig.dovecot.messages(rig.quinn) == []  # both copies left INBOX for the sent folder
    assert len(rig.dovecot.messages(rig.quinn, "Quinn.Sent")) == 2
    assert rig.mailbox.uids() == []  # and the watched folder is selected again


async def test_an_interrupted_send_that_never_left_is_sent(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    item = rig.outbox.begin(rig.put().message_id, "sending")  # died before the server answered
    assert await rig.delivery.deliver(item) == "replied"
    assert len(rig.replies()) == 1
    assert rig.outbox.get(item.message_id).attempts == 2  # type: ignore[union-attr]


async def test_without_copy_to_self_an_interrupted_send_is_repeated(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(copy_to_self=False)
    item = rig.put()
    rig.outbox.begin(item.message_id, "sending")
    await rig.delivery.sender.send(item.raw, rig.quinn, [rig.alice])
    assert await rig.delivery.deliver(rig.outbox.get(item.message_id)) == "replied"  # type: ignore[arg-type]
    # The documented cost of turning the proof copy off: at-least-once, with the same Message-ID.
    replies = rig.replies()
    assert len(replies) == 2 and all(item.message_id.encode() in r for r in replies)
    assert "cannot be checked" in caplog.text


async def test_temporary_failures_are_retried_with_backoff(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(send_attempts=3)
    item = rig.put()
    rig.lab.fail_next(2, 451)
    assert await rig.delivery.deliver(item) == "replied"
    assert len(rig.replies()) == 1
    assert rig.outbox.get(item.message_id).attempts == 3  # type: ignore[union-attr]


async def test_temporary_failures_beyond_the_tries_leave_the_item_pending(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(send_attempts=2)
    item = rig.put()
    rig.lab.fail_next(2, 421)
    with pytest.raises(RetryLater, match="421"):
        await rig.delivery.deliver(item)
    stored = rig.outbox.get(item.message_id)
    assert stored is not None and (stored.state, stored.attempts) == ("pending", 2) and "421" in stored.last_error
    assert await rig.delivery.deliver(stored) == "replied"  # later, the server is back
    assert len(rig.replies()) == 1


async def test_a_permanent_refusal_fails_the_item_with_the_reason(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    item = rig.put()
    rig.lab.fail_next(1, 550, "5.1.1 No such user")
    with pytest.raises(ConnectError, match=r"550 5\.1\.1 No such user"):
        await rig.delivery.deliver(item)
    stored = rig.outbox.get(item.message_id)
    assert stored is not None and stored.state == "failed" and "No such user" in stored.last_error
    assert rig.replies() == []


async def test_server_down_then_up(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(send_attempts=1)
    item = rig.put()
    rig.lab.down()
    with pytest.raises(RetryLater, match="unreachable"):
        await rig.delivery.deliver(item)
    rig.lab.up()
    assert await rig.delivery.deliver(rig.outbox.get(item.message_id)) == "replied"  # type: ignore[arg-type]
    assert len(rig.replies()) == 1


async def test_draft_mode_appends_to_drafts_and_sends_nothing(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply_mode="draft")
    first, second = rig.put(1), rig.put(2)
    assert await rig.delivery.deliver(first) == "drafted"
    # A crash after the APPEND, before the outbox said so: the draft is there, so no second one.
    rig.outbox.begin(second.message_id, "drafting")
    rig.mailbox.append("Drafts", second.raw, (b"\\Draft",))
    assert await rig.delivery.deliver(rig.outbox.get(second.message_id)) == "drafted"  # type: ignore[arg-type]
    assert rig.lab.received == [] and rig.replies() == []
    drafts = rig.dovecot.messages(rig.quinn, "Drafts")
    assert len(drafts) == 2
    assert {rig.outbox.get(i.message_id).state for i in (first, second)} == {"drafted"}  # type: ignore[union-attr]
    with rig.dovecot.connect(rig.quinn) as client:
        client.select_folder("Drafts", readonly=True)
        flags = client.fetch(client.search("ALL"), ["FLAGS"])
    assert all(b"\\Draft" in f[b"FLAGS"] for f in flags.values())


async def test_a_reload_of_smtp_reaches_the_next_send(make_quinn, mail_lab, llm_server) -> None:
    """SIGHUP with new [smtp] settings (a rotated password, another relay): the next reply uses them. Delivery was
    built once at start and kept the old settings, so a reloaded password was never used."""
    from quinn.config import load_config
    from tests.lab.mails import plain_model

    llm_server.responder = plain_model
    quinn = await make_quinn('[embeddings]\nbackend = "none"\n')
    alice = mail_lab.new_user("alice")
    other = SmtpLab(mail_lab.dovecot)
    other.start()
    try:
        path = quinn.config.path
        path.write_text(path.read_text().replace(f"port = {mail_lab.smtp.port}", f"port = {other.port}"))
        quinn.app.reload(load_config(path, env=quinn.config.env))
        await quinn.send(alice, "After the reload", "Hello again")
        assert [r for r in other.received if alice in r.rcpt_tos], "the reply did not go through the new relay"
        assert not [r for r in mail_lab.smtp.received if alice in r.rcpt_tos]
    finally:
        other.stop()
