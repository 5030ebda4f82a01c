"""Memory by email, the memory tools, a failing model and template safety, through the real pipeline."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

from tests.agent.test_scenarios import DAY0
from tests.lab.brain import NOTHING, Brain, memory_id
from tests.lab.llm_server import Error, Text, ToolCall, ToolCalls


def body(message) -> str:
    return message.get_body(("plain",)).get_content()


def current(quinn, user: str) -> list[str]:
    rows = quinn.query("SELECT content FROM memories WHERE user_id = ? AND active = 1 AND valid_to IS NULL"
                       " ORDER BY id", (user,))  # fmt: skip
    return [r[0] for r in rows]


async def test_remember_digest_export_and_forget_by_email(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    await quinn.send(alice, "Hello", "I live in Lisbon and work as a nurse.", date=DAY0)
    # The command is carried out before the reply, and the mail is still learnt from: the extraction sees the
    # statement (not the command) and the memories it may contradict, and supersedes through the usual path.
    brain.learn["I moved to Porto"] = lambda r: {
        **NOTHING,
        "contradicted": [
            {"id": memory_id(r, "Alice lives in Lisbon."), "content": "Alice lives in Porto.", "type": "fact"}
        ],
    }
    await quinn.send(alice, "Move", "Please remember that I moved to Porto.", date=DAY0 + timedelta(days=1))
    replies = quinn.replies(alice, 2)
    assert re.search(r"- saved \[memory:\d+\]: Alice asked to remember: I moved to Porto", body(replies[1]))
    assert current(quinn, alice) == ["Alice asked to remember: I moved to Porto", "Alice lives in Porto."]
    lisbon = quinn.query("SELECT valid_to FROM memories WHERE content = 'Alice lives in Lisbon.'")
    assert lisbon == [("2026-09-02T09:00:00+00:00",)]  # closed at the Date of the mail that said so, kept in history

    brain.reply = lambda r: Text("DIGEST:\n" + r.text) if r.purpose == "digest" else Text("ok")
    await quinn.send(alice, "Memory", "What do you know about me?", date=DAY0 + timedelta(days=2))
    digest = body(quinn.replies(alice, 3)[2])
    assert "DIGEST:" in digest  # the digest template went to the model...
    assert 'Alice lives in Porto. (since 2026-09-02, from "Move, 2026-09-02")' in digest  # ...with dates, sources
    assert "Facts:" in digest

    await quinn.send(alice, "Export", "Could you export my memory please?", date=DAY0 + timedelta(days=3))
    question = quinn.replies(alice, 4)[3]
    assert not list(question.iter_attachments())  # an export is confirmed first, by a code sent to alice only
    [code] = set(re.findall(r"Q-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", body(question)))
    await quinn.send(alice, "Re: Export", f"Yes please.\n\n> Confirmation code: {code}",
                     in_reply_to=question["Message-ID"], date=DAY0 + timedelta(days=3))  # fmt: skip
    export = quinn.replies(alice, 5)[4]
    [attachment] = list(export.iter_attachments())
    assert attachment.get_content_type() == "application/json"
    assert attachment.get_filename().startswith("quinn-memory-")
    document = json.loads(attachment.get_content())
    assert document["user"] == alice and document["count"] == 2
    assert {m["content"] for m in document["memories"]} == set(current(quinn, alice))
    conversation = [c["text"] for c in document["conversation"]]  # what conversation recall holds goes too
    assert "I live in Lisbon and work as a nurse." in conversation and document["withheld_conversation"] == 0
    assert not [t for t in conversation if "remember that I moved" in t or "export my memory" in t]  # commands
    # The code works once: the same confirmation again sends nothing more.
    await quinn.send(alice, "Re: Export", f"yes\n\n> Confirmation code: {code}", date=DAY0 + timedelta(days=3))
    again = quinn.replies(alice, 6)[5]
    assert not list(again.iter_attachments()) and "I did nothing" in body(again)
    assert quinn.query("SELECT count(*) FROM confirmations WHERE token_hash LIKE ?", (f"%{code}%",)) == [(0,)]

    await quinn.send(alice, "Old", "Please forget that I live in Porto.", date=DAY0 + timedelta(days=4))
    reply = body(quinn.replies(alice, 7)[6])
    assert re.search(r"- forgotten \[memory:\d+\]: Alice lives in Porto\.", reply)
    # Every memory that says it goes (issue 35: forget reaches what was written from the fact), her own
    # "remember" of the move too; each is reported.
    assert re.search(r"- forgotten \[memory:\d+\]: Alice asked to remember: I moved to Porto", reply)
    assert current(quinn, alice) == []
    forgotten = quinn.query("SELECT change, reason FROM memory_versions WHERE user_id = ? AND change = 'forgotten'",
                            (alice,))  # fmt: skip
    assert forgotten == [("forgotten", 'asked by email: "forget I live in Porto"')] * 2
    # Commands are not fed to extraction a second time; what "remember" stated is.
    commands = ("remember that I moved", "What do you know", "export my memory", "forget that I live")
    extraction = brain.extractions()
    assert not [t for t in extraction for c in commands if c in t]
    assert [t for t in extraction if "I moved to Porto" in t]


async def test_a_command_does_not_stop_learning_and_remember_goes_through_dedupe(
    make_quinn, mail_lab, brain: Brain
) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Acme"] = {**NOTHING, "new": [{"content": "Alice started a new job at Acme.", "type": "fact"}]}
    await quinn.send(alice, "News", "Please forget that I like tea. Also, I started a new job at Acme last week.",
                     date=DAY0)  # fmt: skip
    assert current(quinn, alice) == ["Alice started a new job at Acme."]  # the rest of the mail was learnt from
    asked = brain.extractions()
    assert len(asked) == 1 and "forget that I like tea" not in asked[0] and "new job at Acme" in asked[0]

    # An explicit statement is deduplicated like an extracted one: the second "remember" is a new version of
    # the first memory (its history kept), not a twin in every prompt.
    for day in (1, 2):
        await quinn.send(alice, f"Tea {day}", "Remember that I take my coffee black.", date=DAY0 + timedelta(days=day))
    remembered = [c for c in current(quinn, alice) if "coffee" in c]
    assert remembered == ["Alice asked to remember: I take my coffee black"]
    versions = quinn.query("SELECT version, valid_to IS NULL FROM memories WHERE content LIKE '%coffee black%' "
                           "ORDER BY id")  # fmt: skip
    assert versions == [(1, 0), (2, 1)]
    # A "delete everything" mail teaches nothing, whatever else it says.
    await quinn.send(
        alice, "Bye", "I moved to Oslo. Delete everything you know about me.", date=DAY0 + timedelta(days=3)
    )
    assert not [r for r in brain.requests("Extraction") if "Oslo" in r.text]


async def test_delete_everything_needs_a_confirmation_reply(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    await quinn.send(alice, "Hello", "I live in Lisbon and I like long walks.", date=DAY0)
    # Her mail with a Reply-To of someone else: answered there, without memory, but still her mail and its reply.
    helper = mail_lab.new_user("helper")
    elsewhere = await quinn.send(alice, "For my helper", "Could you list three tips for packing?", reply_to=helper,
                                 date=DAY0 + timedelta(hours=1))  # fmt: skip
    assert quinn.query("SELECT count(*) FROM outbox WHERE in_reply_to = ?", (elsewhere,)) == [(1,)]
    requests_before = len(brain.server.requests)
    await quinn.send(alice, "Privacy", "Please delete everything you know about me.", date=DAY0 + timedelta(days=1))
    question = quinn.replies(alice, 2)[1]
    assert "reply to this email with YES" in body(question)
    assert len(brain.server.requests) == requests_before  # no model call for the question
    assert current(quinn, alice) == ["Alice lives in Lisbon."]  # nothing deleted yet
    [code] = set(re.findall(r"Q-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", body(question)))
    [(stored,)] = quinn.query("SELECT token_hash FROM confirmations WHERE user_id = ?", (alice,))
    assert code not in stored and len(stored) == 64  # only a hash of the code is kept

    # A "yes" that does not answer the question deletes nothing.
    await quinn.send(alice, "Unrelated", "yes, see you at the meeting on Monday", date=DAY0 + timedelta(days=2))
    quinn.replies(alice, 3)
    assert current(quinn, alice) == ["Alice lives in Lisbon."]
    # Nor does a "yes" that answers the question by its id (as a blind forger could guess it) without the code.
    await quinn.send(alice, "Re: Privacy", "YES, delete it all.", in_reply_to=question["Message-ID"],
                     date=DAY0 + timedelta(days=2))  # fmt: skip
    quinn.replies(alice, 4)
    assert current(quinn, alice) == ["Alice lives in Lisbon."]

    brain.learn["Monday"] = {**NOTHING, "new": [{"content": "Alice leaves on Monday.", "type": "fact"}]}
    await quinn.send(alice, "Re: Privacy", f"YES, delete it all. I'm leaving for Berlin on Monday, my new job.\n\n"
                     f"> Confirmation code: {code}", in_reply_to=question["Message-ID"],
                     date=DAY0 + timedelta(days=3))  # fmt: skip
    done = body(quinn.replies(alice, 5)[4])
    assert done.startswith("Done: I deleted everything I knew about you")
    for table in ("memories", "memory_versions", "messages", "sessions", "llm_usage", "outbox", "confirmations"):
        assert quinn.query(f"SELECT count(*) FROM {table} WHERE user_id = ?", (alice,)) == [(0,)], table
    assert quinn.query("SELECT count(*) FROM mail_state WHERE user_id = ?", (alice,)) == [(0,)]
    assert quinn.query("SELECT count(*) FROM outbox WHERE in_reply_to = ?", (elsewhere,)) == [(0,)]  # went too


async def test_memory_tools_save_update_forget_and_refuse(make_quinn, mail_lab, brain: Brain) -> None:
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn = await make_quinn()
    store = quinn.app.store
    assert store is not None
    bobs = store.add(bob, "Bob's locker code is 4711.", type="personal")
    fixed = store.add(alice, "Alice is the account owner.", immutable=True)
    old = store.add(alice, "Alice works from home on Fridays.", type="fact")
    script = iter([
        ToolCalls([
            ToolCall("save_memory", {"content": "Alice is allergic to peanuts.", "type": "personal"}),
            ToolCall("update_memory", {"id": old, "content": "Alice works from home on Mondays."}),
            ToolCall("forget_memory", {"id": fixed}),
            ToolCall("update_memory", {"id": bobs, "content": "Bob's locker code is 0000."}),
            ToolCall("search_memory", {"query": "locker code"}),
        ]),
        Text("All set."),
    ])  # fmt: skip
    brain.reply = lambda request: next(script)
    await quinn.send(alice, "Updates", "I'm allergic to peanuts, and home office moved to Mondays.", date=DAY0)
    reply = body(quinn.replies(alice, 1)[0])

    outputs = brain.server.requests
    final = next(r.text for r in outputs if "All set." not in r.text and "Saved as memory" in r.text)
    assert f"Refused: memory {fixed} is fixed by the operator" in final
    assert f"Refused: memory {bobs} is not one of this person's memories" in final
    assert "4711" not in final  # search sees only alice's memories
    assert reply.startswith("All set.")
    assert re.search(r"- saved \[memory:\d+\]: Alice is allergic to peanuts\.", reply)
    assert re.search(r"- updated \[memory:\d+\]: Alice works from home on Mondays\.", reply)
    assert store.get(bobs).content == "Bob's locker code is 4711." and store.get(bobs).current
    assert store.get(fixed).current
    assert "Alice is allergic to peanuts." in current(quinn, alice)
    assert "Alice works from home on Fridays." not in current(quinn, alice)
    # The user is never a tool argument: no tool offered to the model takes one.
    request = next(r for r in outputs if r.tool_names)
    assert set(request.tool_names) == {
        "search_memory",
        "save_memory",
        "update_memory",
        "forget_memory",
        "search_conversations",
        "search_documents",
    }
    assert "user" not in json.dumps([t for t in request.body_json.get("tools", [])]).lower().replace("user_", "")


async def test_the_forget_tool_forgets_only_what_the_mail_is_about(make_quinn, mail_lab, brain: Brain) -> None:
    """The 1.5B pilot of issue 32 answered "forget that I grew up in Ericeira" by forgetting memory 1, an unrelated
    one, and the footer said it was done. The tool forgets a memory only when the mail holds one of its words."""
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    store = quinn.app.store
    assert store is not None
    walks = store.add(alice, "Alice walks along the river path after dinner.", type="fact")
    grew = store.add(alice, "Alice grew up in Ericeira, by the sea.", type="fact")
    script = iter([ToolCalls([ToolCall("forget_memory", {"id": walks}), ToolCall("forget_memory", {"id": grew})]),
                   Text("Done.")])  # fmt: skip
    brain.reply = lambda request: next(script)
    await quinn.send(alice, "Correction", "That bit about Ericeira is wrong, I never lived there.", date=DAY0)
    reply = body(quinn.replies(alice, 1)[0])

    final = next(r.text for r in brain.server.requests if "Forgotten: memory" in r.text)
    assert f"Refused: memory {walks} is not what this email asks to forget" in final
    assert store.get(walks).current and not store.get(grew).current
    assert re.search(rf"- forgotten \[memory:{grew}\]: Alice grew up in Ericeira", reply)
    assert "river path" not in reply


async def test_what_a_mail_asks_to_forget_is_not_saved_again_by_the_model(make_quinn, mail_lab, brain: Brain) -> None:
    """The 1.5B run of issue 32: "Please forget that I finally replaced the old car; the new one is a navy blue
    Peugeot." forgot it, then the model saved it again with update_memory, twice, in the request's own words. A
    tool never saves what the mail asked to forget, nor stands on the words of the request."""
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    store = quinn.app.store
    assert store is not None
    car = store.add(alice, "Alice replaced the old car with a navy blue Peugeot.", type="fact")
    store.add(alice, "Alice walks along the river path after dinner.", type="fact")
    script = iter([ToolCalls([ToolCall("save_memory", {"content": "Alice drives a navy blue Peugeot.", "type": "fact"}),
                              ToolCall("update_memory", {"id": car, "content": "Alice bought a blue car."})]),
                   Text("Done.")])  # fmt: skip
    brain.reply = lambda request: next(script)
    await quinn.send(alice, "Please forget something", "Please forget that I replaced the old car with a navy blue "
                     "Peugeot.", date=DAY0)  # fmt: skip
    reply = body(quinn.replies(alice, 1)[0])

    final = next(r.text for r in brain.server.requests if "Refused" in r.text)
    assert "Refused: the person asked in this email to forget that" in final
    assert not any("Peugeot" in m or "car" in m for m in current(quinn, alice)), current(quinn, alice)
    assert f"- forgotten [memory:{car}]" in reply and "saved" not in reply


async def test_failing_model_defers_the_mail_and_it_is_answered_later(make_quinn, mail_lab, brain: Brain,
                                                                     caplog) -> None:  # fmt: skip
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.reply = lambda request: Error(503, "model overloaded")
    with caplog.at_level(logging.WARNING, logger="quinn.engine.mail"):
        await quinn.send(alice, "Help", "Can you help me plan my week?", date=DAY0)
    [(state, reason, attempts)] = quinn.query("SELECT state, reason, attempts FROM mail_state")
    assert (state, attempts) == ("deferred", 1)
    assert "model overloaded" in reason  # the operator sees why, in the ledger...
    assert any("deferred" in r.getMessage() and "model overloaded" in r.getMessage() for r in caplog.records)
    assert mail_lab.dovecot.messages(alice) == []  # ...nothing was sent...
    assert len(mail_lab.dovecot.messages(quinn.address)) == 1  # ...and the mail is still in the inbox.

    await quinn.process()  # before its time: not retried
    assert quinn.query("SELECT attempts FROM mail_state") == [(1,)]
    # The backoff elapses (the ledger's next attempt moved to the past), and the model is back.
    quinn.execute("UPDATE mail_state SET next_attempt_at = '2000-01-01T00:00:00+00:00'")
    brain.reply = lambda request: Text("Here is a plan for your week.")
    await quinn.process()
    assert body(quinn.replies(alice, 1)[0]).startswith("Here is a plan for your week.")
    assert quinn.query("SELECT state FROM mail_state") == [("replied",)]
    usage = quinn.query("SELECT purpose, user_id, message_id, input_tokens > 0 FROM llm_usage ORDER BY id")
    assert usage[0][:2] == ("reply", alice) and usage[0][3] == 1


async def test_a_reply_guessing_what_the_person_never_said_is_asked_once_more(make_quinn, mail_lab, brain: Brain,
                                                                              caplog) -> None:  # fmt: skip
    """Bench/long_memory with the 1.5B: "Your dentist is Dr. Smith" for a dentist never named. The reply is sent
    back once naming what nothing in its prompt holds; what the model answers then is mailed. A reply naming
    only what the prompt holds is asked once."""
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    answers = iter([Text("Hi Alice,\n\nYour dentist is Dr. Smith, in Harbour Street."),
                    Text("Hi Alice,\n\nI don't know who your dentist is: you haven't told me."),
                    Text("Hi Alice,\n\nYou drive a green Mazda.")])  # fmt: skip
    brain.reply = lambda request: next(answers)
    with caplog.at_level(logging.INFO, logger="quinn.agent.llm"):
        await quinn.send(alice, "Dentist", "Who is my dentist again?", date=DAY0)
    assert body(quinn.replies(alice, 1)[0]).startswith("Hi Alice,\r\n\r\nI don't know who your dentist is")
    first, second = brain.requests("reply")
    assert second.text.startswith(first.text)  # the same request, then its answer and the note
    note = second.body_json["messages"][-1]["content"]
    assert note.startswith("Your reply names Dr. Smith, Harbour Street, which nothing above says.")
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "names 2 thing(s)" in logged and "Smith" not in logged  # counted, never named in the log
    assert [row[0] for row in quinn.query("SELECT purpose FROM llm_usage WHERE purpose = 'reply'")] == ["reply"]

    await quinn.send(alice, "Car", "I drive a green Mazda. Which car do I drive?", date=DAY0 + timedelta(days=1))
    assert body(quinn.replies(alice, 2)[1]).startswith("Hi Alice,\r\n\r\nYou drive a green Mazda.")
    assert len(brain.requests("reply")) == 3


# Seen in the memory QA runs with the 0.5B model: the mail's request answered and its refusal, stored as the person's.
ADVICE = (
    "Organize a small birthday party at home by planning the seating arrangement, setting up decorations, and "
    "arranging food items."
)
REFUSAL = "I'm sorry, but I can't assist with that."


async def test_only_what_the_person_wrote_becomes_their_memory(make_quinn, mail_lab, brain: Brain, caplog) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["birthday party"] = {**NOTHING, "new": [
        {"content": ADVICE, "type": "preference"}, {"content": REFUSAL, "type": "personal"},
        {"content": f"{REFUSAL} Alice's daughter Ines turns seven in May.", "type": "fact"},
        {"content": "Alice's daughter Ines goes to the Lycee Tolstoi.", "type": "fact"},  # a name she never wrote
    ]}  # fmt: skip
    script = iter([ToolCalls([ToolCall("save_memory", {"content": ADVICE, "type": "preference"}),
                              ToolCall("save_memory", {"content": "Alice is planning a birthday party at home.",
                                                       "type": "goal"})]),
                   Text("Happy to help with the party.")])  # fmt: skip
    brain.reply = lambda request: next(script)
    with caplog.at_level(logging.INFO, logger="quinn.agent"):
        await quinn.send(alice, "Party", "My daughter Ines turns seven in May. How do I organise a small birthday "
                         "party at home?", date=DAY0)  # fmt: skip
    reply = body(quinn.replies(alice, 1)[0])
    assert current(quinn, alice) == [
        "Alice is planning a birthday party at home.",
        "Alice's daughter Ines turns seven in May.",
    ]
    assert "Refused: the person did not say that in this email" in brain.requests("reply")[-1].text
    assert "saved" in reply and ADVICE not in reply  # the reply lists what was saved, not what was refused
    assert sum("not in their own words" in r.getMessage() for r in caplog.records) == 3


# llama-cpp-python's answer to a prompt over n_ctx (seen in the memory QA run).
TOO_LONG = ("This model's maximum context length is 4096 tokens. However, you requested 8192 tokens (7792 in the "
            "messages, 400 in the completion). Please reduce the length of the messages or completion.")  # fmt: skip


def profile_block(prompt: str) -> str:
    """The reply prompt's profile block: the lines after its heading, up to the first blank line."""
    after = prompt.split("(their profile and preferences):\n", 1)[1]
    return after.split("\n\n", 1)[0]


def profile_notes(quinn, user: str, count: int) -> None:
    from quinn.memory.models import NewMemory

    quinn.app.store.add_many([NewMemory(user, f"Alice keeps a note about topic number {i}.", scope="profile")
                              for i in range(count)])  # fmt: skip


async def test_a_reply_prompt_too_long_for_the_model_is_asked_again_shorter(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    profile_notes(quinn, alice, 60)
    answers = iter([Error(400, TOO_LONG), Text("Here are your notes.")])
    brain.reply = lambda request: next(answers)
    await quinn.send(alice, "Notes", "What do my notes say?", date=DAY0)
    assert body(quinn.replies(alice, 1)[0]).startswith("Here are your notes.")
    assert quinn.query("SELECT state, attempts FROM mail_state") == [("replied", 0)]  # never deferred
    first, second = brain.requests("reply")
    # Counted in the profile block, which its share of the budget fills in both prompts (how many retrieved
    # memories join it depends on the search, not on the budget).
    shown = [profile_block(r.text).count("Alice keeps a note") for r in (first, second)]
    assert 0 < shown[1] < 0.6 * shown[0]  # the memory budget cut to 4096 / 8192 * 0.8 of itself
    assert "What do my notes say?" in second.text  # the mail itself is never cut


async def test_a_reply_prompt_always_too_long_defers_the_mail_and_says_why(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.reply = lambda request: Error(400, TOO_LONG)
    await quinn.send(alice, "Notes", "What do my notes say?", date=DAY0)
    assert len(brain.requests("reply")) == 3  # REPLY_TRIES, each shorter
    [(state, reason)] = quinn.query("SELECT state, reason FROM mail_state")
    assert state == "deferred" and "longer than model" in reason
    assert mail_lab.dovecot.messages(alice) == [] and len(mail_lab.dovecot.messages(quinn.address)) == 1


async def test_template_syntax_in_mail_reaches_the_model_literally(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    text = "What is {{ 7*7 }}? And {% raw %}{{ secret }}{% endraw %} and {{ config }} and {# note #}."
    await quinn.send(alice, "Math {{ 6*6 }}", text, date=DAY0)
    quinn.replies(alice, 1)
    prompt = brain.prompt("What is")
    assert text in prompt and 'subject "Math {{ 6*6 }}"' in prompt
    # Not evaluated: no "is 49" or "Math 36" anywhere (bare "49" could be in a random test address).
    assert "is 49" not in prompt and "Math 36" not in prompt
    [(template, version)] = quinn.query("SELECT template, prompt_version FROM outbox")
    assert template == "reply" and re.fullmatch(r"reply@[0-9a-f]{12}", version)
    assert version == quinn.app.prompts.load("reply").version


async def test_token_usage_recorded_per_user_and_email(make_quinn, mail_lab, brain: Brain, caplog) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Rust"] = {**NOTHING, "new": [{"content": "Alice writes Rust.", "type": "fact"}]}
    mid = await quinn.send(alice, "Hi", "I write Rust for embedded devices at work.", date=DAY0)
    quinn.replies(alice, 1)
    rows = quinn.query("SELECT purpose, model, user_id, message_id, input_tokens, output_tokens, calls FROM llm_usage"
                       " ORDER BY id")  # fmt: skip
    assert [r[0] for r in rows] == ["reply", "extract"]
    for _purpose, model, user, message_id, tokens_in, tokens_out, calls in rows:
        assert (model, user, message_id, calls) == ("openai/gpt-test", alice, mid, 1)
        assert tokens_in > 0 and tokens_out > 0
    # A trivial mail costs a reply but no extraction call; the gate's decision is logged with its reason.
    with caplog.at_level(logging.INFO, logger="quinn.agent.respond"):
        thanks = await quinn.send(alice, "Re: Hi", "thanks!", date=DAY0 + timedelta(days=1))
    quinn.replies(alice, 2)
    assert [r[0] for r in quinn.query("SELECT purpose FROM llm_usage WHERE message_id = ?", (thanks,))] == ["reply"]
    assert any(f"mail {thanks}: sensory gate: skip (small talk only)" in r.getMessage() for r in caplog.records)


async def test_a_mail_with_domains_embeds_each_query_sentence_once(make_quinn, mail_lab, brain: Brain,
                                                                   llm_server) -> None:  # fmt: skip
    """Domain detection and memory search read the same sentences of the mail: one embedding serves both
    (bench/pipeline.py measured the query embedding as the largest part of Quinn's own work per mail)."""
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn(f"""
[embeddings]
backend = "openai"
model = "scripted"
base_url = "{llm_server.openai_base_url}"
api_key_env = "QUINN_TEST_LLM_KEY"
dimensions = 384

[[domains]]
name = "work"
description = "Work: projects, deadlines, meetings, colleagues and clients."
""")
    sentence = "Could you move the quarterly planning meeting with the client to Thursday?"
    await quinn.send(alice, "Planning", sentence, date=DAY0)
    quinn.replies(alice, 1)
    embedded = [text for r in llm_server.requests_of("embeddings") for text in r.body_json["input"]]
    assert "work" in " ".join(embedded)  # the domain's description was embedded: detection ran on vectors
    assert sum(sentence in text for text in embedded) == 1, embedded


async def test_a_refused_smtp_login_holds_mail_until_the_operator_fixes_it(
    lab_config, mail_lab, brain: Brain, caplog
) -> None:
    from tests.lab.inprocess import LabQuinn
    from tests.lab.smtp import SmtpLab

    alice = mail_lab.new_user("alice")

    def replies_written(text: str) -> int:
        return len(brain.prompts(text))  # the new email's text: an earlier mail may be recalled in a later prompt

    with SmtpLab(mail_lab.dovecot, auth=("quinn-smtp", "new-password")) as relay:
        config = lab_config(smtp=relay, smtp_extra='username = "quinn-smtp"\npassword_env = "QUINN_TEST_SMTP_PW"')
        config.env["QUINN_TEST_SMTP_PW"] = "old-password"  # the relay's password was changed under Quinn
        quinn = LabQuinn(config, mail_lab)
        await quinn.start()
        try:
            with caplog.at_level(logging.INFO):
                await quinn.send(alice, "Plan", "Could you help me plan my week?", date=DAY0)
                await quinn.send(alice, "Later", "And the week after?", date=DAY0)
            states = quinn.query("SELECT state, attempts, reason FROM mail_state ORDER BY uid")
            assert [(s, n) for s, n, _r in states] == [("deferred", 0), ("deferred", 0)]  # held: no attempt counted
            assert all(r.startswith("held until the setup is fixed: SMTP login as quinn-smtp rejected (535)")
                       for _s, _n, r in states)  # fmt: skip
            assert (replies_written("plan my week"), replies_written("the week after")) == (1, 0)  # 2nd: no call
            assert quinn.query("SELECT state FROM outbox") == [("pending",)]  # the first reply waits, unsent
            said = [r.getMessage() for r in caplog.records if "mail is held" in r.getMessage()]
            assert len(said) == 1 and "check smtp.username and the password variable" in said[0]
            assert mail_lab.dovecot.messages(alice) == []

            relay.auth = ("quinn-smtp", "old-password")  # the operator puts the right password in place...
            quinn.app.reload()  # ...and reloads (SIGHUP): the hold ends, held mail is due at once
            await quinn.process()
            replies = quinn.replies(alice, 2)
            assert sorted(str(r["In-Reply-To"]) for r in replies) == sorted(
                r[0] for r in quinn.query("SELECT message_id FROM mail_state")
            )  # fmt: skip
            assert {s for (s,) in quinn.query("SELECT state FROM mail_state")} == {"replied"}
            # The first reply was sent as written; only the mail held before the model was asked needed it.
            assert (replies_written("plan my week"), replies_written("the week after")) == (1, 1)
        finally:
            await quinn.close()


async def test_quinn_classifies_what_is_private_and_a_cc_never_sees_it(make_quinn, mail_lab, brain: Brain) -> None:
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn = await make_quinn()
    brain.learn["jazz"] = {**NOTHING, "new": [
        {"content": "Alice's new card is 4111 1111 1111 1111.", "type": "fact"},  # not marked by the model...
        {"content": "Alice is being treated for a sleep problem.", "type": "fact", "private": True},  # ...this is
        {"content": "Alice loves jazz.", "type": "preference"},
    ]}  # fmt: skip
    await quinn.send(alice, "News", "My new card is 4111 1111 1111 1111, I am being treated for a sleep problem, "
                     "and I love jazz.", date=DAY0)  # fmt: skip
    rows = quinn.query("SELECT content, metadata FROM memories WHERE user_id = ? ORDER BY id", (alice,))
    private = {content: json.loads(metadata).get("private", False) for content, metadata in rows}
    # The card number is not kept: she did not ask (issue 35); what held it stays private.
    assert private == {"Alice's new card is [card number withheld].": True,
                       "Alice is being treated for a sleep problem.": True,  # by the model
                       "Alice loves jazz.": False}  # fmt: skip

    await quinn.send(alice, "Alone", "Any jazz concerts for me this week? Also my card and my sleep problem.",
                     date=DAY0 + timedelta(days=1))  # fmt: skip
    alone = brain.prompt("Any jazz concerts")
    assert "4111" not in brain.context("Any jazz concerts") and "[card number withheld]" in alone
    assert "sleep problem." in alone and "Alice loves jazz." in alone
    await quinn.send(alice, "Plans", "Bob and I want jazz tickets; my card and my sleep problem too.", cc=(bob,),
                     date=DAY0 + timedelta(days=2))  # fmt: skip
    shared = brain.prompt("Bob and I want jazz")
    assert "Alice loves jazz." in shared
    assert "4111" not in brain.context("Bob and I want jazz")  # the memory is withheld (the mail's own text aside)
    assert "treated for a sleep problem" not in shared


async def test_stop_remembering_me_keeps_answering_and_stores_nothing_new(make_quinn, mail_lab, brain: Brain) -> None:
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn()
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    await quinn.send(alice, "Hi", "I live in Lisbon and work as a nurse.", date=DAY0)
    brain.learn["Porto"] = {**NOTHING, "new": [{"content": "Alice moved to Porto.", "type": "fact"}]}
    await quinn.send(alice, "Privacy", "Please stop remembering me. I moved to Porto, by the way.",
                     date=DAY0 + timedelta(days=1))  # fmt: skip
    first = body(quinn.replies(alice, 2)[1])
    assert "you may remember me again" in first  # the reply says so
    assert "Stopped remembering them, as asked" in brain.prompt("Please stop remembering me")

    # Nothing new by any path: extraction, the model's tools, an explicit "remember".
    script = iter([ToolCalls([ToolCall("save_memory", {"content": "Alice has a dog.", "type": "fact"})]),
                   Text("Sure.")])  # fmt: skip
    brain.reply = lambda request: next(script, Text("Sure."))
    await quinn.send(alice, "Dog", "I got a dog called Rex. Remember that I like jazz.", date=DAY0 + timedelta(days=2))
    reply = body(quinn.replies(alice, 3)[2])
    assert "you may remember me again" in reply and "saved [memory" not in reply
    assert current(quinn, alice) == ["Alice lives in Lisbon."]  # still used in prompts, never added to
    assert "Alice lives in Lisbon." in brain.prompt("I got a dog called Rex")
    refused = [r.text for r in brain.server.requests if "Refused: this person asked not to be remembered" in r.text]
    assert refused, "the save_memory tool was not refused"
    assert not [r for r in brain.requests("Extraction") if "Porto" in r.text or "Rex" in r.text]
    assert quinn.query("SELECT count(*) FROM memory_consent WHERE user_id = ?", (alice,)) == [(1,)]

    # Taking it back: the same mail is learnt from again, and replies no longer carry the note.
    brain.reply = lambda request: Text("Welcome back.")
    brain.learn["Oslo"] = {**NOTHING, "new": [{"content": "Alice moved to Oslo.", "type": "fact"}]}
    await quinn.send(alice, "Back", "You may remember me again. I moved to Oslo.", date=DAY0 + timedelta(days=3))
    back = body(quinn.replies(alice, 4)[3])
    assert "you may remember me again" not in back
    assert current(quinn, alice) == ["Alice lives in Lisbon.", "Alice moved to Oslo."]


async def test_use_is_what_reached_the_prompt(make_quinn, mail_lab, brain: Brain) -> None:
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn = await make_quinn()
    store = quinn.app.store
    assert store is not None
    profile = store.add(alice, "Alice prefers short answers.", scope="profile", type="preference")
    shared = store.add(alice, "Alice's team tracks tickets in Jira.", scope="episodic")
    secret = store.add(alice, "Alice's Jira password is hunter2.", scope="episodic")  # private by its shape
    await quinn.send(alice, "Jira", "Bob and I need help with our Jira tickets.", cc=(bob,), date=DAY0)
    prompt = brain.prompt("help with our Jira tickets")
    assert f"[memory:{shared}]" in prompt and f"[memory:{profile}]" in prompt and "hunter2" not in prompt
    store.flush_access()
    counts = dict(quinn.query("SELECT id, access_count FROM memories WHERE user_id = ?", (alice,)))
    # The withheld memory was a search hit, but it never reached the model: it was not used.
    assert counts == {profile: 1, shared: 1, secret: 0}
    sessions = quinn.query("SELECT DISTINCT memory_id FROM memory_retrievals ORDER BY memory_id")
    assert sessions == [(profile,), (shared,)]
    # The reply template's version that wrote it is kept with its text (improvement proposals diff against it).
    [(version, text)] = quinn.query("SELECT version, source FROM prompt_versions")
    assert version.startswith("reply@") and "{% block system %}" in text
