"""Several mails in flight (issue 16): mails of different senders are answered at the same time; mails of one
thread, and of one sender, one after another in the folder's order. Through the lab (Dovecot, SMTP, the
scripted model), one folder pass with five mails waiting."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

from tests.lab.llm_server import Error, Json, RecordedRequest, Text
from tests.lab.mails import plain_model

pytestmark = pytest.mark.timeout(180)

QUIET = '[embeddings]\nbackend = "none"\n'


class Model:
    """Answers replies after noting when each one entered and left the model; the three "Overlap" mails must all
    be in the model at once (a barrier), which only happens when they are answered concurrently."""

    def __init__(self, overlapping: int) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        # Shorter than the lab model's timeout (20 s): a mail alone at the barrier gets an error, not a timeout.
        self._barrier = threading.Barrier(overlapping, timeout=8)

    def __call__(self, request: RecordedRequest) -> Any:
        answer = plain_model(request)
        if isinstance(answer, Json):  # extraction: nothing learnt
            return answer
        found = re.search(r'subject "([^"]+)"', request.text)
        assert found is not None, "the reply prompt names the mail's subject"
        subject = found.group(1)
        with self._lock:
            self.events.append(("in", subject))
        try:
            if subject.startswith("Overlap"):
                self._barrier.wait()  # broken unless the others arrive while this one waits
            else:
                time.sleep(0.3)  # a window in which a mail answered out of order would show
        except threading.BrokenBarrierError:
            return Error(503, "alone at the barrier")
        finally:
            with self._lock:
                self.events.append(("out", subject))
        return Text("Noted, thanks.")

    def index(self, event: str, subject: str) -> int:
        return self.events.index((event, subject))


async def test_different_senders_overlap_and_a_thread_and_a_sender_keep_their_order(
    make_quinn, mail_lab, llm_server
) -> None:
    model = Model(overlapping=3)
    llm_server.responder = model
    quinn = await make_quinn(QUIET + "[service]\nmails_in_flight = 4\n")
    alice, bob, carol = (mail_lab.new_user(n) for n in ("alice", "bob", "carol"))
    await quinn.send(alice, "Overlap a", "First mail from Alice.", process=False)
    await quinn.send(bob, "Overlap b", "First mail from Bob.", process=False)
    await quinn.send(carol, "Overlap c", "First mail from Carol.", process=False)
    plan = await quinn.send(alice, "Plan", "Alice starts a thread.", process=False)
    await quinn.send(bob, "Re: Plan", "Bob answers in Alice's thread.", in_reply_to=plan, process=False,
                     name="Bob Example")  # fmt: skip
    await quinn.send(alice, "Later", "Alice again, in a new thread.", process=False)
    await quinn.process()

    states = quinn.query("SELECT state, count(*) FROM mail_state GROUP BY state")
    assert states == [("replied", 6)], (states, model.events)
    # Alice's mails in her order; the thread's mails in its order, though from two senders.
    assert model.index("out", "Overlap a") < model.index("in", "Plan") < model.index("out", "Plan")
    assert model.index("out", "Plan") < model.index("in", "Later")
    assert model.index("out", "Plan") < model.index("in", "Re: Plan")


async def test_one_mail_at_a_time_when_the_limit_is_one(make_quinn, mail_lab, llm_server) -> None:
    quinn = await make_quinn(QUIET + "[service]\nmails_in_flight = 1\n")
    model = Model(overlapping=2)  # two Overlap mails would have to meet in the model: they cannot
    llm_server.responder = model
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    await quinn.send(alice, "Overlap a", "Alice.", process=False)
    await quinn.send(bob, "Overlap b", "Bob.", process=False)
    await quinn.process()
    # Each alone in the model: the barrier broke, both mails wait for a retry, nothing was lost.
    assert model.events == [("in", "Overlap a"), ("out", "Overlap a"), ("in", "Overlap b"), ("out", "Overlap b")]
    assert quinn.query("SELECT state FROM mail_state ORDER BY uid") == [("deferred",), ("deferred",)]


async def test_an_imap_failure_after_the_send_never_marks_the_mail_failed(make_quinn, mail_lab, llm_server) -> None:
    """The connection dies at the first IMAP filing after the SMTP send (the reply's copy; issue 16, errors by
    type): the failure goes up to the run loop's reconnect, the mail is not failed, the outbox knows the reply
    went out, and the next pass finishes and files the mail without sending again."""
    from imapclient.exceptions import IMAPClientAbortError

    llm_server.responder = plain_model
    quinn = await make_quinn(QUIET)
    alice = mail_lab.new_user("alice")
    mid = "<imap-dies@example.test>"
    mailbox = quinn.app.mailbox
    file_away = mailbox.file_away
    broken = []

    def dies_once(*args: Any, **kwargs: Any) -> Any:
        if not broken:
            broken.append(args)
            raise IMAPClientAbortError("socket error: EOF")  # what a dropped connection raises in imapclient
        return file_away(*args, **kwargs)

    mailbox.file_away = dies_once  # the IMAP server's side of the boundary, not the engine under test
    with pytest.raises(IMAPClientAbortError):
        await quinn.send(alice, "Hello", "Are you there?", message_id=mid)
    [(state, moved)] = quinn.query("SELECT state, moved FROM mail_state WHERE message_id = ?", (mid,))
    assert state in ("handling", "replied") and moved == 0
    assert quinn.query("SELECT state FROM outbox") == [("sent",)]
    await quinn.app._imap(mailbox.close)  # as the run loop does before it reconnects
    await quinn.app._imap(mailbox.connect)
    await quinn.process()
    assert quinn.query("SELECT state, moved FROM mail_state WHERE message_id = ?", (mid,)) == [("replied", 1)]
    assert len(quinn.replies(alice)) == 1
