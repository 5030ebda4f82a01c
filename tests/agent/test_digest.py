"""The periodic digest (issue 15): "here is what I learnt about you", mailed by the daemon, corrected by replying.

In-process Quinn against the lab (Dovecot, aiosmtpd, libSQL, the real embedder, the scripted model); the digest
job is run by hand as the scheduler would run it.
"""

from __future__ import annotations

import email.message
import re
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

from quinn.agent import state
from quinn.agent.consent import opt_out
from quinn.agent.digest import compose, corrections, plan, unsent
from quinn.clock import ManualClock, utcnow
from quinn.db import Database
from quinn.memory import MemoryStore
from quinn.scheduler.runner import JobRunner
from tests.agent.test_scenarios import DAY0
from tests.lab.brain import NOTHING, Brain
from tests.lab.inprocess import LabQuinn, body_of

DIGEST_SUBJECT = "What I learnt about you since"
FACTS = ["Alice lives in Lisbon.", "Alice's cat is called Miso.", "Alice works as a nurse."]


def learnt(*contents: str) -> dict:
    return {**NOTHING, "new": [{"content": c, "type": "fact"} for c in contents]}


async def run_digest_job(quinn: LabQuinn, days_later: float = 0) -> int:
    app = quinn.app
    runner = JobRunner(app.store, app.llm, app.prompts, app.config.scheduler,
                       clock=ManualClock(utcnow() + timedelta(days=days_later)))  # fmt: skip
    outcome = await runner.run_job("digest", force=True)
    assert outcome.status == "ok", outcome
    return int(outcome.counts.get("created", 0))


def digests(quinn: LabQuinn, user: str) -> list[email.message.EmailMessage]:
    return [m for m in quinn.replies(user) if str(m["Subject"]).startswith(DIGEST_SUBJECT)]


def text_of(message: email.message.EmailMessage) -> str:
    return body_of(message).replace("\r\n", "\n")


def current(quinn: LabQuinn, user: str) -> list[str]:
    rows = quinn.query("SELECT content FROM memories WHERE user_id = ? AND active = 1 AND valid_to IS NULL"
                       " AND superseded_by IS NULL ORDER BY id", (user,))  # fmt: skip
    return [r[0] for r in rows]


async def test_a_digest_is_mailed_to_each_user_alone_and_corrected_by_number(
    make_quinn, mail_lab, brain: Brain
) -> None:
    alice, bob, carol = (mail_lab.new_user(n) for n in ("alice", "bob", "carol"))
    quinn: LabQuinn = await make_quinn("[scheduler]\nenabled = false\ndigest_every_days = 30\n")
    brain.learn["nurse"] = learnt(*FACTS)
    brain.learn["Oslo"] = learnt("Bob is moving to Oslo in March.")
    brain.learn["violin"] = learnt("Carol plays the violin.")
    await quinn.send(alice, "Hello", "I live in Lisbon, my cat is Miso, and I work as a nurse.", date=DAY0)
    await quinn.send(bob, "News", "We are moving to Oslo in March.", date=DAY0, name="Bob")
    await quinn.send(carol, "Hi", "I play the violin.", date=DAY0, name="Carol")
    await quinn.send(carol, "Privacy", "Please stop remembering me.", date=DAY0 + timedelta(hours=1), name="Carol")
    quinn.replies(alice, 1)
    # What else shapes replies (issue 35): her short-term state (her words are data) and a thread summary.
    assert quinn.app.store is not None
    with quinn.app.store.db.transaction() as tx:
        state.update_user_state(tx, alice, {"user_info": "Alice <b>works</b> night shifts.",
                                            "recent_goal_and_status": "Planning " * 200}, utcnow())  # fmt: skip
        state.update_user_state(tx, bob, {"user_info": "Bob is packing for Oslo."}, utcnow())
    quinn.execute("UPDATE sessions SET summary = 'Alice asked about nurses.' WHERE user_id = ?", (alice,))

    assert await run_digest_job(quinn) == 2  # alice and bob; carol asked not to be remembered
    await quinn.process()  # the daemon mails what the job planned after its folder pass
    [digest] = digests(quinn, alice)
    assert [a.addr_spec for a in digest["To"].addresses] == [alice] and digest["Cc"] is None
    assert digest["Auto-Submitted"] == "auto-generated"  # RFC 3834: no responder answers it
    text = text_of(digest)
    items = dict(re.findall(r"^(\d+)\. (.+)$", text, re.M))
    assert sorted(items.values()) == sorted(FACTS)
    shaping = text.split("Also shaping my replies:\n")[1].split("\n\n")[0].splitlines()
    assert shaping[:2] == ["Notes from our recent conversations:", "- user info: Alice <b>works</b> night shifts."]
    assert shaping[2].startswith("- recent goal and status: Planning") and len(shaping[2]) < 400  # cut short
    assert shaping[3:] == ["Also: 1 summary of our email threads."]
    html = digest.get_body(("html",)).get_content()
    assert "Alice &lt;b&gt;works&lt;/b&gt;" in html and "<b>works" not in html
    assert "Bob is packing for Oslo." in text_of(digests(quinn, bob)[0]) and "Bob is packing" not in text
    assert "Alice" not in text_of(digests(quinn, bob)[0]) and "Bob is moving to Oslo" in text_of(digests(quinn, bob)[0])
    assert digests(quinn, carol) == []
    assert await run_digest_job(quinn) == 0  # not due again until 30 days have passed
    await quinn.process()
    assert len(digests(quinn, alice)) == 1

    # Bob replying to Alice's digest (a forwarded copy, say) corrects nothing of hers.
    await quinn.send(bob, "Re: digest", "Forget 1, please.", in_reply_to=digest["Message-ID"], name="Bob")
    assert sorted(current(quinn, alice)) == sorted(FACTS)

    correction = await quinn.send(alice, f"Re: {digest['Subject']}", "Number 2 is wrong, and forget 3 please. The "
                                  "rest is right.\n\n> 1. ...", in_reply_to=digest["Message-ID"])  # fmt: skip
    reply = quinn.replies(alice)[-1]
    assert reply["In-Reply-To"] == correction
    assert current(quinn, alice) == [items["1"]]
    footer = text_of(reply)
    for number in ("2", "3"):  # each change is listed back
        assert re.search(rf"- forgotten \[memory:\d+\]: {re.escape(items[number])}", footer), footer
    prompt = brain.prompts("Number 2 is wrong")[-1]
    assert "item 2 of your digest is wrong" in prompt and "item 3 of your digest is wrong" in prompt
    reasons = quinn.query("SELECT reason FROM memory_versions WHERE change = 'forgotten' AND user_id = ?", (alice,))
    assert sorted(r[0] for r in reasons) == ["marked wrong in reply to the digest (item 2)",
                                             "marked wrong in reply to the digest (item 3)"]  # fmt: skip

    # A month later only what was learnt since is listed.
    brain.learn["Porto"] = learnt("Alice is moving to Porto.")
    await quinn.send(alice, "Moving", "We are moving to Porto next year.")
    assert await run_digest_job(quinn, days_later=31) == 1
    await quinn.process()
    later = digests(quinn, alice)[-1]
    assert re.findall(r"^\d+\. (.+)$", text_of(later), re.M) == ["Alice is moving to Porto."]


def test_what_a_reply_to_a_digest_asks_to_forget() -> None:
    from quinn.agent.digest import corrections

    assert corrections("Number 2 is wrong, and forget 3 please.") == [2, 3]
    assert corrections("forget #4, 6 and 7") == [4, 6, 7]
    assert corrections("3 and 5 are wrong; 3 is really wrong") == [3, 5]
    assert corrections("The second one is wrong. Forget the third one too.") == [2, 3]
    assert corrections("item 12 is outdated") == [12]
    assert corrections("I have 2 cats and version 2.3 is wrong") == []  # a number that is not an item
    assert corrections("Thanks, all correct!") == []


def test_a_digest_shows_what_else_shapes_replies_only_while_memory_is_on(tmp_path: Path) -> None:
    """Issue 35: a digest composed after its user opted out (between the job's plan and the mail) lists their
    memories but not their short-term state: that part is only for someone Quinn may remember."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    try:
        store.add("dana@example.org", "Dana keeps bees.", type="fact")
        with store.db.transaction() as tx:
            state.update_user_state(tx, "dana@example.org", {"user_info": "Dana sells honey."}, utcnow())
        assert len(plan(store.db, 30, 10, utcnow())) == 1
        [planned] = unsent(store.db)
        mail = partial(compose, store, planned, own_address="quinn@example.org", own_name="Quinn")
        made = mail(now=utcnow())
        assert made is not None and "- user info: Dana sells honey." in made[0].body
        opt_out(store.db, "dana@example.org", utcnow(), None)
        made = mail(now=utcnow())
        assert made is not None and "Dana keeps bees." in made[0].body
        assert "Also shaping" not in made[0].body and "honey" not in made[0].body
    finally:
        store.close()


def test_finding_the_items_a_reply_corrects_is_not_a_redos() -> None:
    """Any mail's text is read for "forget 2" and "2 is wrong" (``kept_reply``): a long list of numbers made
    every number start a match that ran to the list's end (quadratic; 16,000 characters 5 s, these ~1 min)."""
    numbers = ", ".join(["1"] * 20_000)
    started = time.monotonic()
    assert corrections(f"forget {numbers}") == [1] and corrections(numbers) == []
    assert corrections(f"{numbers} are wrong") == [1]
    assert time.monotonic() - started < 5
    assert corrections("Thanks! 2 and 5 are wrong, and please forget the third one.") == [2, 5, 3]
