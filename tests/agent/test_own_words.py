"""Learning from the person's own words (issue 32, ``[memory] learn = "own_words"``): each statement of theirs
becomes a memory in their words, with no model call, through the real pipeline (Dovecot, aiosmtpd, libSQL, the
real embedder; the scripted model only answers). The reply prompt shows memories and past mail oldest first, and
offers no tools when ``[llm] max_tool_rounds = 0``.
"""

from __future__ import annotations

from datetime import timedelta

from quinn.agent.own_words import MAX_CHARS, MAX_STATEMENTS, statements
from quinn.clock import utcnow
from tests.agent.test_scenarios import DAY0
from tests.lab.brain import Brain

OWN_WORDS = '[memory]\nlearn = "own_words"\n'


def test_statements_keep_what_the_person_told_and_drop_greetings_questions_and_requests() -> None:
    text = (
        "Hi Quinn,\n\n"
        "The booking reference for our holiday flat is F4F84M, in case I lose the email. Our internet was down "
        "for most of Tuesday.\n\n"
        "How should I prepare for a job interview? Could you keep it short. Please keep it short.\n"
        "Please always answer me in German. Thanks again.\n\n"
        "Best,\nIngrid"
    )
    assert statements(text) == [
        "The booking reference for our holiday flat is F4F84M, in case I lose the email.",
        "Our internet was down for most of Tuesday.",
        "Please always answer me in German.",  # a request that sets a standing preference is kept
    ]
    # The greeting on the statement's own line is cut from it; a statement said twice in one mail is kept once.
    assert statements("Hi again, We moved to Split last week. We moved to Split last week.") == [
        "We moved to Split last week."
    ]
    assert statements("Hello there! I work at Acme as a nurse.") == ["I work at Acme as a nurse."]
    # Talking to Quinn is no statement about the person.
    assert statements("I hope you are well. Your last answer helped a lot.") == []
    # "you know" as spoken filler does not make a statement talk to Quinn (seen in a real conversation: "you know
    # my dad left, and my mother died" was no memory); "you" anywhere else still does.
    assert statements("Well, you know my dad left, and my mother died. Y'know, I grew up on the street.") == [
        "Well, you know my dad left, and my mother died.",
        "Y'know, I grew up on the street.",
    ]
    assert statements("You know I moved to Split, so you should book the Split office.") == []


def test_statements_are_bounded_in_size_and_count() -> None:
    wall = "I " + " ".join(f"walked past garden{i}" for i in range(200)) + " today"
    (only,) = statements(wall)
    assert len(only) <= MAX_CHARS + 2 and only.endswith("…")
    many = " ".join(f"My locker number {i} holds a blue bag." for i in range(MAX_STATEMENTS + 25))
    assert len(statements(many)) == MAX_STATEMENTS


async def test_own_words_become_memories_without_a_model_call_and_the_prompt_reads_oldest_first(
    make_quinn, mail_lab, brain: Brain
) -> None:
    ingrid = mail_lab.new_user("ingrid")
    quinn = await make_quinn(OWN_WORDS, llm_extra="max_tool_rounds = 0")
    first, later, asked = DAY0, DAY0 + timedelta(days=400), DAY0 + timedelta(days=500)
    await quinn.send(ingrid, "Work", "Hi Quinn,\n\nMy manager, Bashir, is great at keeping meetings short.\n\n"
                     "Could you suggest a simple dinner?\n\nBest,\nIngrid", date=first)  # fmt: skip
    await quinn.send(ingrid, "News", "Hi Quinn,\n\nBashir has left the company, so Nikolai is my manager now.\n"
                     "The password for the wifi is hunter22.\n", date=later)  # fmt: skip
    await quinn.send(ingrid, "Class", "My pottery class is on Tuesday evenings. We adopted a cat called Mochi.",
                     date=later + timedelta(days=1))  # fmt: skip
    # "before": the email looks back in time, so the replaced version is shown (query.looks_back).
    await quinn.send(ingrid, "Question", "Who is my manager these days, and who was it before? Please keep it short.",
                     date=asked)  # fmt: skip
    quinn.replies(ingrid, 4)

    # No extraction call: the memories are the person's sentences, dated by their mails; nothing of the
    # question, the request or the greeting; the secret masked (and private), as any extraction's is.
    assert brain.requests("Extraction") == []
    rows = quinn.query(
        "SELECT content, valid_from, metadata FROM memories WHERE user_id = ? AND valid_to IS NULL ORDER BY id",
        (ingrid,),
    )
    contents = [r[0] for r in rows]
    # The new manager supersedes the old one in code: a statement of change ("left", "now") sharing a word
    # ("Bashir", "manager") with the statement nearest it. The cat is news, not a change of anything.
    assert contents == [
        "Bashir has left the company, so Nikolai is my manager now.",
        "The password for the wifi is [secret withheld].",
        "My pottery class is on Tuesday evenings.",
        "We adopted a cat called Mochi.",
    ]
    assert rows[0][1].startswith(later.date().isoformat()) and '"private": true' in rows[1][2]
    closed = quinn.query("SELECT content, substr(valid_to, 1, 10) FROM memories WHERE user_id = ? AND valid_to IS "
                         "NOT NULL", (ingrid,))  # fmt: skip
    assert closed == [("My manager, Bashir, is great at keeping meetings short.", later.date().isoformat())]

    # The last reply's prompt: the manager now, with the one before as earlier, each line dated as written; past
    # mail oldest first; no tools named or offered.
    request = brain.requests("reply")[-1]
    prompt = request.text
    assert (f"(they wrote on {later.date().isoformat()}) Bashir has left the company, so Nikolai is my manager now."
            f" | earlier: My manager, Bashir, is great at keeping meetings short. (until {later.date().isoformat()})"
            in prompt)  # fmt: skip
    mails = [prompt.index(f"[mail:{day.date().isoformat()}]") for day in (later, later + timedelta(days=1))]
    assert mails == sorted(mails)
    assert "save_memory" not in prompt and "search_memory" not in prompt
    assert not request.body_json.get("tools")


def test_recall_is_chosen_best_first_and_shown_oldest_first() -> None:
    from quinn.agent.context import passage_block
    from quinn.memory import Passage, PassageHit

    def hit(day: str, text: str, score: float) -> PassageHit:
        return PassageHit(Passage(1, "a@x.test", f"<{day}@x>", "in", f"{day}T09:00:00+00:00", "S", 0, text,
                                  frozenset()), score)  # fmt: skip

    hits = [hit("2025-07-21", "Nikolai is my manager now.", 0.9), hit("2024-05-03", "My manager is Bashir.", 0.8),
            hit("2023-01-01", "A long mail about the weather " * 20, 0.7)]  # fmt: skip
    block = passage_block(hits, 40)  # room for the two best only
    assert block.splitlines() == ['- [mail:2024-05-03] (they wrote, "S") My manager is Bashir.',
                                  '- [mail:2025-07-21] (they wrote, "S") Nikolai is my manager now.']  # fmt: skip


async def test_forget_reaches_a_statement_learnt_in_own_words_and_it_is_not_learnt_again(
    make_quinn, mail_lab, brain: Brain
) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn(OWN_WORDS)
    await quinn.send(alice, "Car", "I finally replaced the old car; the new one is a navy blue Peugeot. My sister "
                     "lives in Oslo.", date=DAY0)  # fmt: skip
    await quinn.send(alice, "The Peugeot", "Please forget that my new car is a navy blue Peugeot. I love hiking "
                     "along the fjords.", date=DAY0 + timedelta(days=1))  # fmt: skip
    quinn.replies(alice, 2)
    current = [r[0] for r in quinn.query("SELECT content FROM memories WHERE user_id = ? AND valid_to IS NULL "
                                         "ORDER BY id", (alice,))]  # fmt: skip
    assert not any("Peugeot" in c for c in current), current  # nor stored again from the request itself
    # Nor in what was written after the forget ran: the source subject of what that mail taught ("I love hiking
    # ..."), shown beside it in "what do you know about me?", and the subject of Quinn's reply as stored.
    written = quinn.query("SELECT metadata FROM memories WHERE user_id = ? UNION ALL SELECT subject FROM messages"
                          " WHERE user_id = ?", (alice, alice))  # fmt: skip
    assert not [w for (w,) in written if "Peugeot" in (w or "")], written
    assert "My sister lives in Oslo." in current and "I love hiking along the fjords." in current

    # Asked later, the model is told that more of it was forgotten (not what): the 1.5B invented a brand from
    # "I finally replaced the old car." alone. Not with someone else on the mail: the forget is Alice's business.
    asked = DAY0 + timedelta(days=2)
    await quinn.send(alice, "Car?", "What brand is the car I bought to replace the old one?", date=asked)
    bob = mail_lab.new_user("bob")
    await quinn.send(alice, "Car, again", "Which car did I buy to replace the old one?", cc=[bob], date=asked)
    quinn.replies(alice, 4)
    alone, shared = brain.prompt("What brand is the car"), brain.prompt("Which car did I buy")
    note = f"I finally replaced the old car. (they asked you to forget more of what this said on {utcnow().date()})"
    assert note in alone and "Peugeot" not in alone
    assert "I finally replaced the old car." in shared and "forget more" not in shared


def test_a_statement_of_change_replaces_only_a_statement_about_the_same_thing(tmp_path, local_embedder) -> None:
    from quinn.agent.own_words import changes
    from quinn.memory import MemoryStore

    store = MemoryStore.open(str(tmp_path / "m.db"), embedder=local_embedder)
    ids = {text: store.add("a@x.test", text, type="fact", metadata={"via": "own_words"}) for text in (
        "Work has been hectic, with three deadlines landing in the same fortnight.",
        "My manager, Bashir, is great at keeping meetings short.",
        "My pottery class is on Tuesday evenings.",
        "We live in Split now.",
    )}  # fmt: skip
    found = changes(store, "a@x.test", [
        "We live in Lund now, and I take the train to work.",  # "work" alone: not the same thing as the deadlines
        "Bashir has left the company, so Nikolai is my manager now.",  # a name: the manager
        "The pottery class moved to Wednesday evenings.",  # two words: the class
        "We adopted a cat a few weeks ago.",  # no word of change
    ])  # fmt: skip
    assert {c.content: c.id for c in found.updated} == {
        "Bashir has left the company, so Nikolai is my manager now.":
            ids["My manager, Bashir, is great at keeping meetings short."],
        "The pottery class moved to Wednesday evenings.": ids["My pottery class is on Tuesday evenings."],
    }  # fmt: skip
    assert [m.content for m in found.new] == ["We live in Lund now, and I take the train to work.",
                                              "We adopted a cat a few weeks ago."]  # fmt: skip
    store.close()


async def test_a_forgeable_mail_teaches_nothing_in_own_words(make_quinn, mail_lab, brain: Brain) -> None:
    """Own-words learning makes no model call, so only what is stored can show it: a mail nobody authenticated
    (Quinn trusts another server's stamp than the lab MX's) is answered without memory and adds no memory."""
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn('[policy]\nauthserv_id = "mx.quinn.test"\n\n[memory]\nlearn = "own_words"\n')
    await quinn.send(alice, "Hi", "I am the new CEO of Acme and I live in Porto now.", date=DAY0)
    quinn.replies(alice, 1)
    assert "could not be verified" in brain.prompt("I am the new CEO")
    assert quinn.query("SELECT count(*) FROM memories") == [(0,)]
