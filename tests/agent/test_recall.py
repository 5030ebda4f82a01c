"""Conversation recall through the real pipeline (issue 14): what a user wrote reaches later prompts even when the
model extracted nothing from it. The scripted model returns no memories from every extraction (tests/lab/brain.py
answers ``NOTHING`` unless told otherwise), so whatever reaches a prompt came from the stored conversation.

In-process Quinn against the lab: Dovecot, aiosmtpd, libSQL, the real embedding model, Mirascope over HTTP.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from quinn import cli
from tests.lab.brain import Brain
from tests.lab.inprocess import LabQuinn

DAY0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)
FILLER = [
    "Could you suggest a good book about the history of sailing ships?",
    "My tomato plants have yellow leaves; is that too much water?",
    "What is a quick vegetarian dinner with chickpeas and spinach?",
    "How do I stretch my calves after a long run?",
    "Can you recommend a podcast about astronomy for beginners?",
    "What should I pack for a weekend of camping in October?",
    "How long should I steep green tea?",
    "Is it worth learning the cello as an adult?",
]


def conversations_block(prompt: str) -> str:
    """The part of a reply prompt that conversation recall filled (empty when there is none): retrieved passages,
    or the person's whole past mail when it fits the budget (issue 32)."""
    heading = r"(?:From your past emails with this person|Everything this person wrote to you before)"
    match = re.search(heading + r".*?:\n(.*?)(?:\n\n|\Z)", prompt, re.S)
    return match.group(1) if match else ""


async def test_a_statement_reaches_a_later_mail_in_a_new_thread(make_quinn, mail_lab, brain: Brain) -> None:
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn: LabQuinn = await make_quinn()
    await quinn.send(alice, "Setup", "At work I run Python on Linux, on Debian servers.", date=DAY0)
    await quinn.send(bob, "Question", "Which OS do I use at work?", date=DAY0 + timedelta(days=1), name="Bob")
    await quinn.send(alice, "Question", "Which OS do I use at work?", date=DAY0 + timedelta(days=20))
    quinn.replies(alice, 2)
    quinn.replies(bob, 1)

    assert quinn.query("SELECT count(*) FROM memories WHERE user_id = ?", (alice,)) == [(0,)]  # nothing extracted
    stored = quinn.query("SELECT direction, content FROM passages WHERE user_id = ? ORDER BY id", (alice,))
    assert ("in", "At work I run Python on Linux, on Debian servers.") in stored
    assert any(direction == "out" for direction, _ in stored)  # Quinn's replies are recalled too
    prompts = brain.prompts("Which OS do I use at work?")
    assert len(prompts) == 2
    bobs, alices = prompts  # Bob's came first
    recalled = conversations_block(alices)
    assert "[mail:2026-09-01] (they wrote" in recalled and "Python on Linux" in recalled
    assert "Linux" not in bobs  # Alice's mail is hers alone


@pytest.mark.timeout(600)  # 40 mails through the whole pipeline: about 20 s on a quiet box, more on a busy one
async def test_a_fact_from_mail_3_of_a_40_mail_thread_reaches_mail_40(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    # A small memory budget: 39 mails do not fit it whole (issue 32), so the fact must be retrieved.
    quinn: LabQuinn = await make_quinn(
        "[policy]\nmax_replies_per_sender_per_hour = 100\nmax_replies_per_thread_per_hour = 100\n"
        "[memory]\ntoken_budget = 300\n"
    )
    bodies = [FILLER[i % len(FILLER)] + f" (note {i})" for i in range(1, 41)]
    bodies[2] = "For the record, the badge code for the lab door is 4417; I keep forgetting it."
    bodies[38] = "Also, the coffee machine on floor two is broken again."
    bodies[39] = "What was the badge code for the lab door again?"
    root = previous = None
    for body in bodies:
        extra = {"in_reply_to": previous, "references": (root,) if root and root != previous else ()}
        # No Date field: stored when handled, so the thread buffer interleaves the mails and the replies in order.
        mid = await quinn.send(alice, "Re: Lab" if root else "Lab", body, **(extra if previous else {}))
        root, previous = root or mid, mid
    quinn.replies(alice, 40)

    sessions = quinn.query("SELECT count(DISTINCT session_id) FROM messages WHERE user_id = ?", (alice,))
    assert sessions == [(1,)]  # one thread
    prompt = brain.prompt("What was the badge code for the lab door again?")
    buffer = prompt.split("Earlier messages in this thread", 1)[1].split("New email from", 1)[0]
    assert "4417" not in buffer  # mail 3 left the 12-message buffer long ago...
    recalled = conversations_block(prompt)
    assert "4417" in recalled and f"[mail:{datetime.now(UTC).date()}]" in recalled  # ...recall brought it back
    assert "coffee machine" in buffer and "coffee machine" not in recalled  # the buffer is not repeated
    assert "From your past emails with this person" in prompt  # retrieved, not the whole history


@pytest.mark.parametrize("cc_seen", [False, True])
async def test_a_one_to_one_passage_never_reaches_a_thread_with_others(
    make_quinn, mail_lab, brain: Brain, cc_seen: bool
) -> None:
    alice, carol = mail_lab.new_user("alice"), mail_lab.new_user("carol")
    quinn: LabQuinn = await make_quinn()
    cc = (carol,) if cc_seen else ()
    await quinn.send(alice, "Garden", "The greenhouse heater code is 7731.", date=DAY0, cc=cc)
    await quinn.send(alice, "Heater", "What is the greenhouse heater code?", date=DAY0 + timedelta(days=3),
                     cc=(carol,))  # fmt: skip
    quinn.replies(alice, 2)
    recalled = conversations_block(brain.prompt("What is the greenhouse heater code?"))
    # Carol may see what was said with her on it, never what Alice said to Quinn alone.
    assert ("7731" in recalled) is cc_seen


async def test_reembed_indexes_earlier_mail_and_passages_of_another_model(
    make_quinn, mail_lab, brain: Brain, local_embedder, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """An upgrade from a version without conversation recall (no passages for the stored mail), and a switch of
    embedding model (passages with another model's vectors): ``quinn memory reembed`` brings both up to date
    under the mail path's rules: no memory command, no answer to one, nothing of someone who opted out."""
    alice, dave = mail_lab.new_user("alice"), mail_lab.new_user("dave")
    quinn: LabQuinn = await make_quinn()
    await quinn.send(alice, "Garden", "The greenhouse heater code is 7731.", date=DAY0)
    await quinn.send(alice, "Bikes", "My bike lock code is 2290, the blue lock.", date=DAY0 + timedelta(days=1))
    await quinn.send(alice, "Tea", "Please forget that I like green tea.", date=DAY0 + timedelta(days=2))
    await quinn.send(dave, "Hello", "My locker number is 5512.", date=DAY0, name="Dave")
    await quinn.send(dave, "Privacy", "Please stop remembering me.", date=DAY0 + timedelta(days=1), name="Dave")
    quinn.replies(alice, 3)
    quinn.replies(dave, 2)

    def passages(user: str) -> list[tuple[str, str, str]]:
        return quinn.query("SELECT direction, content, embedding_model FROM passages WHERE user_id = ? ORDER BY id",
                           (user,))  # fmt: skip

    indexed = passages(alice)
    assert [(d, c) for d, c, _ in indexed if d == "in"] == [
        ("in", "The greenhouse heater code is 7731."),
        ("in", "My bike lock code is 2290, the blue lock."),
    ]
    assert sum(d == "out" for d, _, _ in indexed) == 2  # the replies to both; neither the command nor its answer
    dave_before = passages(dave)  # his first mail, indexed before he opted out
    # The database as an older Quinn left it: the heater mail and its reply without passages (0008 came later);
    # the bike mail's passages embedded by another model.
    quinn.execute("DELETE FROM passages WHERE user_id = ? AND (content LIKE '%7731%' OR direction = 'out')",
                  (alice,))  # fmt: skip
    quinn.execute("DELETE FROM passages WHERE user_id = ?", (dave,))
    quinn.execute("UPDATE passages SET embedding_model = 'old/model', embedding = NULL WHERE user_id = ?", (alice,))

    for key, value in quinn.config.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli, "setup_logging", lambda *args, **kwargs: None)
    capsys.readouterr()
    assert cli.main(["memory", "reembed", "--json", "-c", str(quinn.config.path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {"reembedded": 0, "passages_reembedded": 1, "passages_indexed": 3,
                      "model": "local/all-MiniLM-L6-v2"}  # fmt: skip
    assert passages(alice) and sorted(passages(alice)) == sorted(
        (d, c, "local/all-MiniLM-L6-v2") for d, c, _ in indexed
    )  # the same passages, all of the configured model
    assert passages(dave) == [] and dave_before  # he asked not to be remembered: his mail stays out of recall
    row = quinn.query("SELECT subject, content, embedding FROM passages WHERE content LIKE '%2290%'")[0]
    expected = local_embedder.embed([f"{row[0]} {row[1]}"])[0]
    assert np.allclose(np.frombuffer(row[2], dtype=np.float32), expected, atol=1e-5)
    capsys.readouterr()
    assert cli.main(["memory", "reembed", "--json", "-c", str(quinn.config.path)]) == 0  # nothing left to do
    assert json.loads(capsys.readouterr().out)["passages_indexed"] == 0

    await quinn.send(alice, "Heater", "What was the greenhouse heater code?", date=DAY0 + timedelta(days=9))
    quinn.replies(alice, 4)
    assert "7731" in conversations_block(brain.prompt("What was the greenhouse heater code?"))
