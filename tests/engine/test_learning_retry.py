"""A try at learning that fails for a reason that passes is tried again, in the order the person wrote (issue 21).

Real Dovecot, aiosmtpd and libSQL file, an in-process Quinn, and the scripted model: its extraction answer is
invalid twice (what a small model does), so the structured call gives up with ``RetryLater``. Before, the mail's
facts were gone; now the queue keeps the mail with a retry time, the user's later mail waits behind it, and both
are learnt, oldest first, once the model answers. Waiting is stood for by moving ``retry_at`` into the past.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.lab.brain import NOTHING, Brain

DAY0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)


def current(quinn, user: str) -> list[str]:
    rows = quinn.query("SELECT content FROM memories WHERE user_id = ? AND active = 1 AND valid_to IS NULL"
                       " ORDER BY id", (user,))  # fmt: skip
    return [r[0] for r in rows]


def queue(quinn) -> list[tuple]:
    return quinn.query("SELECT state, attempts, retry_at IS NOT NULL, last_error FROM learning_queue ORDER BY rowid")


async def test_a_failed_extraction_is_retried_and_later_mail_waits_behind_it(make_quinn, mail_lab, brain: Brain):
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    model_ok = False
    porto = {**NOTHING, "new": [{"content": "Alice lives in Porto.", "type": "fact"}]}
    brain.learn["Porto"] = lambda r: porto if model_ok else {"facts": "I could not say"}  # keys not in the schema
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice moved to Lisbon.", "type": "fact"}]}

    await quinn.send(alice, "Hello", "I live in Porto.", date=DAY0)
    assert len(quinn.replies(alice, 1)) == 1  # the reply went out all the same
    [(state, attempts, later, error)] = queue(quinn)
    assert (state, attempts, later) == ("waiting", 1, 1) and "no valid Extraction twice" in error
    assert current(quinn, alice) == []

    await quinn.send(alice, "News", "I moved to Lisbon.", date=DAY0 + timedelta(days=1))
    assert len(quinn.replies(alice, 2)) == 2
    assert current(quinn, alice) == []  # not learnt before the older mail: an old fact must not follow its update
    assert [row[:2] for row in queue(quinn)] == [("waiting", 1), ("waiting", 0)]

    await quinn.process()  # not due yet: nothing is tried
    assert [row[:2] for row in queue(quinn)] == [("waiting", 1), ("waiting", 0)]

    model_ok = True
    quinn.execute("UPDATE learning_queue SET retry_at = ?", ((datetime.now(UTC) - timedelta(seconds=1)).isoformat(),))
    await quinn.process()
    assert current(quinn, alice) == ["Alice lives in Porto.", "Alice moved to Lisbon."]  # in the order written
    assert queue(quinn) == []


async def test_learning_lets_go_after_the_last_try(make_quinn, mail_lab, brain: Brain):
    from quinn.engine.mail import MAX_ATTEMPTS

    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Porto"] = {"facts": "I could not say"}
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice moved to Lisbon.", "type": "fact"}]}
    await quinn.send(alice, "Hello", "I live in Porto.", date=DAY0)
    await quinn.send(alice, "News", "I moved to Lisbon.", date=DAY0 + timedelta(days=1))
    assert current(quinn, alice) == []
    quinn.execute("UPDATE learning_queue SET attempts = ?, retry_at = ? WHERE attempts > 0",
                  (MAX_ATTEMPTS - 1, (datetime.now(UTC) - timedelta(seconds=1)).isoformat()))  # fmt: skip
    await quinn.process()
    # The last try failed too: that mail lets go (logged), and the one waiting behind it is learnt.
    assert current(quinn, alice) == ["Alice moved to Lisbon."]
    assert queue(quinn) == []
