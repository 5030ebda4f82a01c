"""Each job with the scripted model and a ManualClock, asserting on the database before and after.

Real libSQL file, the real embedding model (loaded once per session), the real store and LLM seam over HTTP;
only the model's answers are scripted (by a responder that reads the prompt, as a model would).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from quinn.agent.extract import extract_memories
from quinn.clock import iso, utcnow
from quinn.mailbox.outbox import Outbox
from quinn.mailbox.parse import parse_email
from quinn.mailbox.threads import Sessions
from quinn.memory import NewMemory
from quinn.memory.filters import CURRENT
from quinn.memory.graph import linked_memories
from quinn.memory.passages import index_message
from quinn.memory.retrievals import record_retrievals
from quinn.scheduler.session_close import REVIEW_TRIES
from quinn.scheduler.summarize import wants_summary
from tests.lab.llm_server import Error, Json, RecordedRequest, Text
from tests.lab.scheduler import inbound_mail, write_thread

QUINN = "quinn@example.test"
# The purposes of the jobs' model calls (RecordedRequest.purpose): a structured call's schema, a text call's tag.
SUMMARIZE = "summarize"
REVIEW = "SessionReview"
MERGE = "consolidate"
REFLECT = "Reflection"
ENTITIES = "GraphExtraction"
EXTRACT = "Extraction"


@pytest.fixture
def bench(job_bench):
    """The job bench of tests/conftest.py, by the name these tests grew up with."""
    return job_bench


def prompts_with(llm_server, purpose: str) -> list[RecordedRequest]:
    return [r for r in llm_server.requests if r.kind != "embeddings" and r.purpose == purpose]


def memories(bench, user: str, *, current: bool = True) -> list[tuple]:
    where = f" AND {CURRENT}" if current else ""
    return bench.db.query(
        "SELECT id, type, scope, content, importance, tags, metadata FROM memories"
        f" WHERE user_id = ?{where} ORDER BY id",
        (user,),
    )


def no_memory_both_current_and_merged(bench) -> None:
    """The consolidation invariant: nothing merged away is still current, and every merge is complete."""
    assert bench.db.query("SELECT id FROM memories WHERE superseded_by IS NOT NULL AND valid_to IS NULL") == []
    for mid, metadata in bench.db.query(
        "SELECT id, metadata FROM memories WHERE json_extract(metadata, '$.merged_ids') IS NOT NULL"
    ):
        for source in json.loads(metadata)["merged_ids"]:
            row = bench.db.query_one("SELECT superseded_by, valid_to FROM memories WHERE id = ?", (source,))
            assert row is not None and row[0] == mid and row[1] is not None, (mid, source, row)


# -- 1. milestone summarization ----------------------------------------------------------------------------


async def test_summarize_folds_old_messages_in_batches_and_resumes(bench, llm_server):
    user = "alice@example.test"
    bodies = [f"Message {i}: " + ("about the garden shed plans and the budget " * 9) for i in range(1, 21)]
    thread = write_thread(bench.db, user, QUINN, "Shed", bodies, utcnow() - timedelta(hours=3))
    settings = {"summarize_threshold_tokens": 1000, "summarize_keep_recent": 4}
    calls = []

    def respond(request: RecordedRequest):
        if request.purpose == SUMMARIZE:
            calls.append(request.text)
            if len(calls) == 2:
                return Error(500, "model overloaded")  # the second batch fails: the first must stay saved
            return Text(f"Summary v{len(calls)}: shed plans, budget discussed (messages up to {len(calls)}).")
        return None

    llm_server.responder = respond
    ids = [r[0] for r in bench.db.query("SELECT id FROM messages WHERE session_id = ? ORDER BY id",
                                        (thread.session_id,))]  # fmt: skip
    assert bench.db.query_one("SELECT summary, summarized_upto FROM sessions") == (None, 0)

    partly = await bench.runner(**settings).run_job("summarize")
    assert partly.status == "ok" and partly.counts["skipped"] == 1  # one session failed: skipped, not lost
    [failure] = partly.counts["details"]["failed_items"]
    assert failure.startswith(f"session {thread.session_id}: ") and "model overloaded" in failure
    summary, upto = bench.db.query_one("SELECT summary, summarized_upto FROM sessions")
    assert summary.startswith("Summary v1") and ids[0] < upto < ids[15]  # batch 1 kept, batch 2 not done
    [(first_memory, *_rest)] = memories(bench, user)  # the memory follows what was saved
    assert json.loads(_rest[-1])["summarized_upto"] == upto

    bench.clock.advance(minutes=10)
    done = await bench.runner(**settings).run_job("summarize")
    assert done.status == "ok" and done.counts["processed"] == 1 and done.counts["updated"] == 1
    summary, upto = bench.db.query_one("SELECT summary, summarized_upto FROM sessions")
    assert summary.startswith("Summary v3") and upto == ids[15]  # the 4 newest stay verbatim
    assert "Summary so far:\nSummary v1" in calls[2]  # the resumed batch builds on the saved summary
    assert "Message 16:" in calls[2] and "Message 17:" not in calls[2]
    [(mid, mtype, scope, content, _imp, tags, metadata)] = memories(bench, user)
    assert (mtype, scope) == ("summary", "episodic")
    # A thread's summary may fold in what the person told Quinn alone: withheld whenever anyone else is on a mail.
    assert bench.store.get(mid).private
    assert json.loads(tags) == [f"session:{thread.session_id}"]
    assert json.loads(metadata)["summarized_upto"] == upto and "Summary v3" in content
    assert bench.store.get(first_memory).superseded_by == mid
    recent = Sessions(bench.db).recent(thread.session_id, limit=12)
    assert [m.body.split(":")[0] for m in recent] == ["Message 17", "Message 18", "Message 19", "Message 20"]
    usage = bench.db.query("SELECT purpose, user_id, calls FROM llm_usage")
    assert usage and {row[0] for row in usage} == {"job:summarize"} and {row[1] for row in usage} == {user}

    # Under the threshold now: nothing to do, no model call.
    before = len(calls)
    bench.clock.advance(minutes=10)
    assert (await bench.runner(**settings).run_job("summarize")).counts.get("processed") is None
    assert len(calls) == before

    # The thread grows past the threshold again: the summary rolls on and its memory gets a new version.
    more = [f"Later {i}: " + ("the shed roof color and delivery date " * 12) for i in range(1, 11)]
    sessions = Sessions(bench.db)
    parent = thread.message_ids[-1]
    for index, body in enumerate(more):
        email = parse_email(inbound_mail(user, QUINN, "Shed", body, f"<more-{index}@example.test>",
                                         in_reply_to=parent))  # fmt: skip
        sid = sessions.assign(email, user)
        sessions.store_inbound(sid, user, email)
        parent = email.message_id
    bench.clock.advance(minutes=10)
    assert (await bench.runner(**settings).run_job("summarize")).counts["updated"] == 1
    [(new_id, _t, _s, content, *_rest)] = memories(bench, user)
    assert new_id != mid and f"Summary v{len(calls)}" in content and len(calls) > before
    assert bench.store.get(mid).superseded_by == new_id  # the old summary stays in history


def forget_elsewhere(bench, user: str, request: str) -> None:
    """What the daemon does while a job waits for the model: a forget answered on its own connection."""
    from quinn.agent.memory_mail import forget
    from quinn.db import Database
    from quinn.memory import MemoryStore

    other = MemoryStore(Database.open(bench.config.database.url), None)
    try:
        forget(other, user, request, True)  # the memories that mention it, and everything written from them
    finally:
        other.close()


async def test_a_summary_or_review_written_while_a_forget_ran_is_not_stored(bench, llm_server):
    """The model read the thread before the forget rewrote it; what it wrote from the old words holds the fact,
    and the request that would filter it is rewritten too. Neither job stores it: the next run reads the thread
    as it is now."""
    user = "alice@example.test"
    bodies = [
        f"Note {i}: my brother Edda started as a zookeeper; " + ("and the garden shed plans " * 10)
        if i == 1
        else f"Note {i}: " + ("the garden shed plans and the budget " * 9)
        for i in range(1, 13)
    ]
    thread = write_thread(bench.db, user, QUINN, "Shed", bodies, bench.clock.now() - timedelta(hours=3))
    pending = ["that my brother Edda started as a zookeeper"]  # forgets answered while the model works

    def respond(request: RecordedRequest):
        if request.purpose not in (SUMMARIZE, REVIEW):
            return None
        if pending:
            forget_elsewhere(bench, user, pending.pop())
        if request.purpose == SUMMARIZE:
            return Text("Edda, Alice's brother, is a zookeeper; the shed is planned." if "Edda" in request.text
                        else "The shed is planned, within budget.")  # fmt: skip
        return Json(review(summary="Alice's brother Edda is a zookeeper." if "Edda" in request.text
                           else "Alice planned her garden shed."))  # fmt: skip

    llm_server.responder = respond
    settings = {"summarize_threshold_tokens": 1000, "summarize_keep_recent": 4, "session_close_after_min": 60}
    first = await bench.runner(**settings).run_job("summarize")
    assert first.status == "ok" and bench.db.query_value("SELECT summary FROM sessions") is None  # not stored
    bench.clock.advance(minutes=10)
    await bench.runner(**settings).run_job("summarize")  # from the thread as it is now
    assert "Edda" not in (bench.db.query_value("SELECT summary FROM sessions") or "Edda")
    assert not [m for m in memories(bench, user) if "Edda" in m[3]]

    pending.append("that my garden shed plans are done")  # answered while the review is written
    bench.clock.advance(hours=5)
    outcome = await bench.runner(**settings).run_job("session_close", force=True)
    assert outcome.status == "ok" and bench.db.query_value("SELECT status FROM sessions WHERE id = ?",
                                                          (thread.session_id,)) == "open"  # fmt: skip
    assert bench.db.query_value("SELECT count(*) FROM conversation_summaries") == 0
    await bench.runner(**settings).run_job("session_close", force=True)  # the thread as it is now: reviewed
    assert bench.db.query_value("SELECT summary FROM conversation_summaries") == "Alice planned her garden shed."


def test_wants_summary():
    for text in (
        "Please summarize this and remember it.",
        "Could you sum up this thread and save it?",
        "Remember a summary of this conversation",
        "summarise this thread, then keep it in memory",
    ):
        assert wants_summary(text), text
    for text in ("Remember that I like tea.", "Can you summarize the report attached?", "Thanks!"):
        assert not wants_summary(text), text


# -- 2. session close --------------------------------------------------------------------------------------


def review(**overrides):
    answer = {
        "summary": "Bob asked about moving the team offsite to March; settled on March 12 in Lisbon.",
        "feedback_text": "Bob thanked the assistant for the quick venue list.",
        "reward_score": 0.8,
        "improvement_suggestion": "Offer the venue list as a table.",
        "memories": {"new": [], "updated": [], "contradicted": []},
        "state": {"user_info": None, "recent_goal_and_status": "Organising the March 12 offsite in Lisbon; venue"
                  " booked.", "important_context": "Budget is 5000 EUR.", "agent_beliefs": None},
    }  # fmt: skip
    answer.update(overrides)
    return answer


async def test_session_close_reviews_a_quiet_session_once(bench, llm_server):
    user = "bob@example.test"
    start = bench.clock.now()
    # What the review's memories say, Bob said (agent/grounding.py).
    thread = write_thread(bench.db, user, QUINN, "Offsite", [
        "Can we move the team offsite to March?", "Sure, which dates work?",
        "March 12, in Lisbon please. Our budget is 5000 EUR.", "Booked: March 12, Lisbon.",
        "Great, thanks for the quick venue list! Venue options as a table would be even better.",
    ], start)  # fmt: skip
    last_mail = start + timedelta(minutes=20)
    Outbox(bench.db).put("<r-1@quinn>", "<t-1@example.test>", user, thread.session_id, [user], b"raw",
                         template="reply", prompt_version="reply@abc123")  # fmt: skip
    known = bench.store.add(user, "Bob's team offsite is planned for February.", scope="episodic", type="goal")
    already = bench.store.add(user, "Bob's team has a budget of 5000 EUR for the offsite.", scope="episodic")
    llm_server.responder = lambda r: Json(review(memories={
        "new": [{"content": "Bob wants venue options presented as a table.", "type": "preference", "importance": 0.7},
                {"content": "Bob's team has a budget of 5000 EUR for the offsite.", "type": "fact"}],
        "updated": [{"id": known, "content": "Bob's team offsite moved from February to March 12.", "type": "fact"}],
        "contradicted": [],
    })) if r.purpose == REVIEW else None  # fmt: skip
    runner = bench.runner(session_close_after_min=60)

    bench.clock.set(last_mail + timedelta(minutes=30))
    assert (await runner.run_job("session_close", force=True)).counts.get("processed") is None  # not quiet yet
    assert bench.db.query_value("SELECT status FROM sessions") == "open"

    bench.clock.set(last_mail + timedelta(minutes=61))
    outcome = await runner.run_job("session_close", force=True)
    assert outcome.status == "ok"
    assert (outcome.counts["processed"], outcome.counts["created"], outcome.counts["updated"]) == (1, 1, 1)
    assert outcome.counts["skipped"] == 1  # the budget memory was known already
    [prompt] = prompts_with(llm_server, REVIEW)
    assert "March 12, in Lisbon please." in prompt.text and f"[{known}]" in prompt.text
    assert bench.db.query_value("SELECT status FROM sessions") == "closed"
    row = bench.db.query_one("SELECT session_id, user_id, summary, feedback_text, reward_score,"
                             " improvement_suggestion, prompt_version FROM conversation_summaries")  # fmt: skip
    assert row == (thread.session_id, user, review()["summary"], review()["feedback_text"], 0.8,
                   "Offer the venue list as a table.", "reply@abc123")  # fmt: skip
    state = bench.db.query_one(
        "SELECT user_info, last_conversation_summary, recent_goal_and_status, important_context, agent_beliefs"
        " FROM user_state WHERE user_id = ?",
        (user,),
    )
    assert state == ("", review()["summary"], review()["state"]["recent_goal_and_status"], "Budget is 5000 EUR.", "")
    contents = [m[3] for m in memories(bench, user)]
    assert "Bob wants venue options presented as a table." in contents
    assert "Bob's team offsite moved from February to March 12." in contents
    assert contents.count("Bob's team has a budget of 5000 EUR for the offsite.") == 1
    assert bench.store.get(known).superseded_by is not None and bench.store.get(already).current
    new = next(m for m in bench.store.get_all(user) if "table" in m.content)
    assert new.metadata["source"]["session_id"] == thread.session_id

    bench.clock.advance(minutes=10)
    await runner.run_job("session_close", force=True)
    assert len(prompts_with(llm_server, REVIEW)) == 1  # closed sessions are not reviewed again
    # New mail reopens the session; once quiet it is reviewed again.
    email = parse_email(inbound_mail(user, QUINN, "Offsite", "One more thing: vegetarian lunch please.",
                                     "<late@example.test>", in_reply_to=thread.message_ids[-1]))  # fmt: skip
    Sessions(bench.db).assign(email, user, now=bench.clock.now())
    assert bench.db.query_value("SELECT status FROM sessions") == "open"


async def test_a_review_keeps_what_the_person_said_not_quinns_advice(bench, llm_server):
    """The review sees both sides of the conversation: Quinn's suggestion is not the person's preference."""
    user = "dana@example.test"
    start = bench.clock.now()
    write_thread(bench.db, user, QUINN, "Dinner", [
        "I am vegetarian and I cook for four on weeknights. Any quick dinner ideas?",
        "Try a chickpea and spinach curry with rice: 25 minutes, one pot.",
        "Thanks!",
    ], start)  # fmt: skip
    llm_server.responder = lambda r: Json(review(memories={"new": [
        {"content": "Dana likes chickpea and spinach curry with rice.", "type": "preference"},
        {"content": "Dana is vegetarian and cooks for four on weeknights.", "type": "personal"},
    ], "updated": [], "contradicted": []})) if r.purpose == REVIEW else None  # fmt: skip

    bench.clock.set(start + timedelta(hours=3))
    outcome = await bench.runner(session_close_after_min=60).run_job("session_close", force=True)
    assert (outcome.counts["processed"], outcome.counts["created"]) == (1, 2)
    contents = [m.content for m in bench.store.get_all(user)]
    # One fact per memory (issue 35): the merged sentence is stored as its two facts.
    assert sorted(contents) == ["Dana cooks for four on weeknights.", "Dana is vegetarian."]


# llama-cpp-python's answer to a prompt over n_ctx, as the memory QA run got it for a long session review.
TOO_LONG = ("This model's maximum context length is 4096 tokens. However, you requested 8192 tokens (7792 in the "
            "messages, 400 in the completion). Please reduce the length of the messages or completion.")  # fmt: skip


async def test_a_review_too_long_for_the_model_is_asked_again_shorter_and_the_session_closed(bench, llm_server):
    user = "dana@example.test"
    start = bench.clock.now()
    bodies = [f"Note {i}: " + "the offsite planning goes on and on. " * 60 for i in range(8)]  # ~550 tokens
    write_thread(bench.db, user, QUINN, "Offsite", bodies, start)
    bench.store.add_many([NewMemory(user, f"Dana keeps a note about topic number {i}.", scope="episodic")
                          for i in range(20)])  # fmt: skip
    reviews = iter([Error(400, TOO_LONG), Json(review())])
    llm_server.responder = lambda r: next(reviews) if r.purpose == REVIEW else None

    bench.clock.set(start + timedelta(hours=3))
    outcome = await bench.runner(session_close_after_min=60).run_job("session_close", force=True)
    assert outcome.status == "ok" and outcome.counts["processed"] == 1
    first, second = prompts_with(llm_server, REVIEW)
    assert len(second.text) < 0.5 * len(first.text)  # cut to 0.4 of the messages and memories: 4096 / 8192 * 0.8
    notes = [[n for n in range(8) if f"Note {n}:" in prompt.text] for prompt in (first, second)]
    assert notes == [[1, 2, 3, 4, 5, 6, 7], [6, 7]]  # the newest within 4,000 tokens, then within 1,600
    assert first.text.count("Dana keeps a note") == 20 and second.text.count("Dana keeps a note") == 8
    assert bench.db.query_value("SELECT status FROM sessions") == "closed"


async def test_a_review_always_too_long_leaves_the_session_open_and_says_why(bench, llm_server):
    user = "dana@example.test"
    start = bench.clock.now()
    write_thread(bench.db, user, QUINN, "Offsite", ["Can we meet in March?", "Sure."], start)
    llm_server.responder = lambda r: Error(400, TOO_LONG) if r.purpose == REVIEW else None

    bench.clock.set(start + timedelta(hours=3))
    outcome = await bench.runner(session_close_after_min=60).run_job("session_close", force=True)
    assert len(prompts_with(llm_server, REVIEW)) == REVIEW_TRIES  # each shorter, then left for the next run
    [failure] = outcome.counts["details"]["failed_items"]
    assert "longer than model" in failure
    assert bench.db.query_value("SELECT status FROM sessions") == "open"


async def test_an_extraction_too_long_for_the_model_is_asked_again_with_the_newest_memories_that_fit(bench, llm_server):
    """Issue 32: a person with years of mail has more memories than a 4k model holds beside the mail; extraction
    is asked again with the newest that fit (as the review is) instead of failing, mail after mail, for good."""
    from quinn.agent.llm import PromptTooLong

    user = "dana@example.test"
    bench.store.add_many([NewMemory(user, f"Dana keeps a note about topic number {i}.", scope="episodic")
                          for i in range(60)])  # fmt: skip
    answers = iter([Error(400, TOO_LONG), Json({"new": [{"content": "Dana lives in Porto.", "type": "fact"}]})])
    llm_server.responder = lambda r: next(answers) if r.purpose == EXTRACT else None
    email = parse_email(inbound_mail(user, QUINN, "Moving", "We moved to Porto last week.", "<porto@example.test>"))
    extracted = await extract_memories(bench.llm, bench.prompts, bench.store, user, email, bench.db.run)
    assert len(extracted.created) == 1 and "Dana lives in Porto." in [m[3] for m in memories(bench, user)]
    first, second = prompts_with(llm_server, EXTRACT)
    assert first.text.count("Dana keeps a note") == 60 and second.text.count("Dana keeps a note") == 24  # * 0.4
    assert "We moved to Porto last week." in second.text

    llm_server.responder = lambda r: Error(400, TOO_LONG) if r.purpose == EXTRACT else None
    with pytest.raises(PromptTooLong):  # the mail's learning waits (RetryLater), after 3 ever shorter tries
        await extract_memories(bench.llm, bench.prompts, bench.store, user, email, bench.db.run)
    assert len(prompts_with(llm_server, EXTRACT)) == 2 + 3


async def test_only_a_memory_near_in_meaning_is_replaced_by_a_key_or_an_id_the_model_names(bench, llm_server):
    """Issue 32, the 1.5B pilot: the small model keyed a school play "location" and so replaced the home city,
    and named ids of unrelated memories as updates. A replaced memory must be near the new text in meaning: the
    play is stored beside the city, an update aimed at the novel is stored as new and then replaces the city,
    the memory it is about."""
    user = "dana@example.test"

    def known(content: str, about: str) -> int:
        return bench.store.add(user, content, scope="profile", type="fact", metadata={"about": about})

    city = known("Dana lives in Split and takes the tram to work.", "location")
    known("Dana grew up in Ericeira, a small place by the sea.", "hometown")
    novel = known("Dana finished the novel everyone recommended; the ending felt rushed.", "reading")
    known("Dana spent Sunday repainting the hallway.", "home")
    answer = {
        "new": [{"content": "The kids at the school next door were rehearsing a play all afternoon.",
                 "type": "context", "about": "location"}],
        "updated": [{"id": novel, "content": "Dana moved from Split to Lund.", "type": "fact", "about": "location"}],
    }  # fmt: skip
    llm_server.responder = lambda r: Json(answer) if r.purpose == EXTRACT else None
    text = "The kids at the school next door were rehearsing a play all afternoon. We moved from Split to Lund."
    email = parse_email(inbound_mail(user, QUINN, "News", text, "<lund@example.test>"))
    await extract_memories(bench.llm, bench.prompts, bench.store, user, email, bench.db.run)

    now = {m[3] for m in memories(bench, user)}
    assert bench.store.get(novel).current and bench.store.get(city).superseded_by is not None
    assert {
        "Dana moved from Split to Lund.",
        "The kids at the school next door were rehearsing a play all afternoon.",
        "Dana finished the novel everyone recommended; the ending felt rushed.",
    } <= now
    assert "Dana lives in Split and takes the tram to work." not in now
    assert bench.store.get(bench.store.get(city).superseded_by).content == "Dana moved from Split to Lund."


async def test_both_extractors_apply_memories_through_apply_extraction_and_its_near_duplicate_rule(bench, llm_server):
    """The same near-duplicate in other words from both callers of ``apply_extraction``: the session review
    (``restate=False``) skips it, it repeats what the per-mail extraction stored; the per-mail extraction
    (``restate=True``) writes it as a new version, the person's latest wording."""
    user = "carol@example.test"
    start = bench.clock.now()
    write_thread(bench.db, user, QUINN, "Tea", ["I drink green tea every morning.", "Noted, green tea it is."], start)
    known = bench.store.add(user, "Carol drinks green tea every morning.", scope="profile", type="preference")
    reworded = {"new": [{"content": "Every morning Carol drinks green tea.", "type": "preference"}]}
    llm_server.responder = lambda r: (
        Json(review(memories=reworded)) if r.purpose == REVIEW else Json(reworded) if r.purpose == EXTRACT else None
    )

    bench.clock.set(start + timedelta(hours=3))
    outcome = await bench.runner(session_close_after_min=60).run_job("session_close", force=True)
    assert (outcome.counts["skipped"], outcome.counts.get("created", 0), outcome.counts.get("updated", 0)) == (1, 0, 0)
    assert bench.store.get(known).current  # the review left the stored wording alone

    email = parse_email(inbound_mail(user, QUINN, "Tea", "Every morning I drink green tea.", "<tea@example.test>"))
    extracted = await extract_memories(bench.llm, bench.prompts, bench.store, user, email, bench.db.run)
    assert extracted.created == [] and len(extracted.updated) == 1
    assert bench.store.get(known).superseded_by == extracted.updated[0]
    assert [m[3] for m in memories(bench, user)] == ["Every morning Carol drinks green tea."]
    assert len(prompts_with(llm_server, REVIEW)) == len(prompts_with(llm_server, EXTRACT)) == 1


async def test_session_close_leaves_a_session_open_when_mail_arrives_during_the_review(bench, llm_server):
    user = "bob@example.test"
    start = bench.clock.now()
    thread = write_thread(bench.db, user, QUINN, "Report", ["Is the Q3 report ready?", "Yes, attached."], start)
    sessions = Sessions(bench.db)

    def respond(request: RecordedRequest):
        if request.purpose != REVIEW:
            return None
        email = parse_email(inbound_mail(user, QUINN, "Report", "Actually, one more question.", "<mid@example.test>",
                                         in_reply_to=thread.message_ids[-1]))  # fmt: skip
        sessions.assign(email, user, now=start + timedelta(minutes=90))  # arrives while the model thinks
        return Json(review())

    llm_server.responder = respond
    bench.clock.set(start + timedelta(minutes=90))
    outcome = await bench.runner().run_job("session_close")
    assert outcome.status == "ok" and outcome.counts.get("processed") is None
    assert bench.db.query_value("SELECT status FROM sessions") == "open"
    assert bench.db.query_value("SELECT count(*) FROM conversation_summaries") == 0
    assert bench.db.query_value("SELECT count(*) FROM user_state") == 0


# -- 3. consolidation --------------------------------------------------------------------------------------

GARDEN = (
    "Carol grows tomatoes and herbs in raised beds, composts her scraps, won a prize for her roses, lost her"
    " apple tree in a storm and wants a greenhouse by spring."
)


async def test_consolidation_merges_tag_groups_and_near_duplicates_per_user(bench, llm_server):
    carol, dave = "carol@example.test", "dave@example.test"
    garden = [bench.store.add(carol, text, scope="episodic", tags=["garden"], importance=0.3 + 0.1 * i,
                              metadata={"source": {"message_id": f"<g{i}@x>"}, **({"private": True} if i == 3 else {})})
              for i, text in enumerate([
                  "Carol grows tomatoes in raised beds.", "Carol's roses won a prize at the county fair.",
                  "Carol composts all her kitchen scraps.", "Carol wants a greenhouse by next spring.",
                  "Carol waters the herbs every morning at six.", "Carol lost her apple tree in the storm.",
              ])]  # fmt: skip
    dogs = [bench.store.add(carol, text, scope="profile", type="personal") for text in
            ("Carol's dog is named Rex.", "Carol has a dog called Rex.")]  # fmt: skip
    lone = bench.store.add(carol, "Carol works as a nurse.", scope="episodic", tags=["work"])
    dave_garden = [bench.store.add(dave, text, scope="episodic", tags=["garden"]) for text in (  # 4: no group
        "Dave mows the lawn on Sundays.", "Dave's hedge needs trimming.", "Dave bought a new rake.",
        "Dave planted a cherry tree for his daughter.")]  # fmt: skip

    def respond(request: RecordedRequest):
        if request.purpose != MERGE:
            return None
        assert "Dave" not in request.text  # one user per call
        if "Rex" in request.text:
            return Text("Carol's dog is named Rex.")
        return Text(GARDEN)

    llm_server.responder = respond
    outcome = await bench.runner().run_job("consolidate")
    assert outcome.status == "ok"
    assert (outcome.counts["merged"], outcome.counts["created"]) == (8, 2)
    no_memory_both_current_and_merged(bench)
    current = {m.content: m for m in bench.store.get_all(carol)}
    merged_garden = current[GARDEN]
    assert merged_garden.importance == pytest.approx(0.8)  # the highest of the group
    assert sorted(merged_garden.metadata["consolidated_from"]) == sorted(garden)
    assert {s["message_id"] for s in merged_garden.metadata["sources"]} == {f"<g{i}@x>" for i in range(6)}
    assert merged_garden.tags == ("garden",) and merged_garden.scope == "episodic"
    assert merged_garden.private  # one member was said to Quinn alone: so is the merge
    merged_dog = current["Carol's dog is named Rex."]
    assert merged_dog.id not in dogs and merged_dog.type == "personal" and merged_dog.scope == "profile"
    assert bench.store.get(lone).current and all(bench.store.get(i).current for i in dave_garden)
    for old in [*garden, *dogs]:  # kept in history, superseded by the merge
        memory = bench.store.get(old)
        assert not memory.current and memory.superseded_by in (merged_garden.id, merged_dog.id)
        changes = bench.db.query("SELECT change FROM memory_versions WHERE memory_id = ?", (old,))
        assert ("superseded",) in changes
    assert bench.store.search(carol, "Which herbs does Carol grow?", k=3)[0].id == merged_garden.id

    # Idempotent: nothing left to merge, no model call.
    asked = len(prompts_with(llm_server, MERGE))
    bench.clock.advance(hours=7)
    again = await bench.runner().run_job("consolidate")
    assert again.counts.get("merged") is None and len(prompts_with(llm_server, MERGE)) == asked


# -- 4. decay ----------------------------------------------------------------------------------------------


async def test_decay_rewards_use_across_sessions_more_than_within_one(bench):
    user = "erin@example.test"
    texts = ("Erin's passport expires in May.", "Erin likes oat milk.", "Erin owns a kayak.")
    spaced, massed, unused = (bench.store.add(user, text) for text in texts)
    now = bench.clock.now()
    record_retrievals(bench.db, "s-1", [spaced, massed], now)
    record_retrievals(bench.db, "s-1", [spaced, massed], now)  # again in the same session: no new row
    record_retrievals(bench.db, "s-2", [spaced], now)
    record_retrievals(bench.db, "s-3", [spaced], now)
    stability = {mid: bench.store.get(mid).stability for mid in (spaced, massed, unused)}
    assert set(stability.values()) == {24.0}

    outcome = await bench.runner(spaced_growth=1.25).run_job("decay")
    assert outcome.status == "ok"
    assert (outcome.counts["processed"], outcome.counts["updated"]) == (4, 1)
    assert bench.store.get(spaced).stability == pytest.approx(24.0 * 1.25**2)  # two sessions after the first
    assert bench.store.get(massed).stability == 24.0 and bench.store.get(unused).stability == 24.0
    assert bench.db.query_value("SELECT count(*) FROM memory_retrievals WHERE counted = 0") == 0

    bench.clock.advance(hours=1)
    await bench.runner(spaced_growth=1.25).run_job("decay")  # nothing new: applied once, never twice
    assert bench.store.get(spaced).stability == pytest.approx(24.0 * 1.25**2)
    record_retrievals(bench.db, "s-4", [massed], bench.clock.now())  # massed is now used in a second session
    bench.clock.advance(hours=1)
    await bench.runner(spaced_growth=1.25).run_job("decay")
    assert bench.store.get(massed).stability == pytest.approx(24.0 * 1.25)

    # A purged user's retrieval rows go with the purge; rows of a memory deleted otherwise are dropped by the
    # job. Far in the future everything has faded.
    assert bench.store.purge(user)["memory_retrievals"] == 5
    assert bench.db.query_value("SELECT count(*) FROM memory_retrievals") == 0
    record_retrievals(bench.db, "s-5", [10**9], bench.clock.now())  # no such memory
    bench.clock.advance(days=60)
    bench.store.add("frank@example.test", "Frank speaks Dutch.")
    later = await bench.runner().run_job("decay")
    assert later.counts["details"]["retrievals_dropped"] == 1 and later.counts["details"]["faded"] == 1
    assert bench.db.query_value("SELECT count(*) FROM memory_retrievals") == 0


# -- 5. cleanup --------------------------------------------------------------------------------------------


async def test_cleanup_archives_by_the_seed_rules_and_keeps_history(bench):
    user = "gina@example.test"
    now = bench.clock.now()
    add = bench.store.add

    def accessed(memory_id: int, days_ago: float) -> int:
        bench.db.execute("UPDATE memories SET last_accessed_at = ? WHERE id = ?",
                         (iso(now - timedelta(days=days_ago)), memory_id))  # fmt: skip
        return memory_id

    stale_low = accessed(add(user, "Gina once mentioned a parking spot.", importance=0.2), 40)
    fresh_low = accessed(add(user, "Gina likes the corner table.", importance=0.2), 10)
    stale_high = accessed(add(user, "Gina is allergic to peanuts.", importance=0.9), 40)
    old_context = add(user, "Gina is travelling this week.", type="context", valid_from=now - timedelta(days=100))
    new_context = add(user, "Gina is preparing a talk.", type="context", valid_from=now - timedelta(days=10))
    expired = add(user, "Gina's hotel code is 4711.", importance=0.9, expires_at=now - timedelta(hours=1))
    pinned = accessed(add(user, "Gina's employee id is 77.", importance=0.1, immutable=True), 400)
    persona = add(None, "Quinn is concise.", scope="global", type="persona", importance=0.1)

    outcome = await bench.runner().run_job("cleanup")
    assert outcome.status == "ok"
    assert outcome.counts["archived"] == 3
    assert outcome.counts["details"]["rules"] == {"importance": 1, "context": 1, "expired": 1}
    for archived in (stale_low, old_context, expired):
        memory = bench.store.get(archived)
        assert not memory.active
        [(change, reason)] = bench.db.query(
            "SELECT change, reason FROM memory_versions WHERE memory_id = ? AND change != 'created'", (archived,)
        )
        assert change == "forgotten" and reason.startswith("archived by cleanup: ")
    for kept in (fresh_low, stale_high, new_context, pinned, persona):
        assert bench.store.get(kept).active
    assert stale_low not in [h.id for h in bench.store.search(user, "Where does Gina park?", k=10)]
    assert len(bench.store.history(stale_low)) == 1  # still there, in history
    assert (await bench.runner().run_job("cleanup", force=True)).counts.get("archived") is None


# -- 6. reflection -----------------------------------------------------------------------------------------


async def test_reflection_promotes_episodes_updates_core_slowly_and_builds_the_graph(bench, llm_server):
    erin, other = "erin@example.test", "ivan@example.test"
    episodes = [bench.store.add(erin, text, scope="episodic", type="context", importance=0.4,
                                metadata={"private": True} if "Monday" in text else None) for text in (
        "Erin went for a 5 km run before work on Monday.",
        "Erin ran 8 km early on Wednesday morning before the office.",
        "Erin did a short run before work on Friday.")]  # fmt: skip
    sofa = bench.store.add(erin, "Erin bought a new sofa for the living room.", scope="episodic", type="context")
    acme = bench.store.add(erin, "Erin works at Acme.", scope="episodic")
    foreign = bench.store.add(other, "Ivan works at Globex.", scope="episodic")
    core = bench.store.add(erin, "Erin usually runs before work.", scope="profile", type="behavioral",
                           valid_from=bench.clock.now() - timedelta(days=2))  # fmt: skip
    statement = "Erin regularly goes running before work."

    def respond(request: RecordedRequest):
        if request.purpose == REFLECT:
            return Json({"statement": statement, "type": "behavioral", "confidence": 0.9})
        if request.purpose == ENTITIES:
            if erin in request.text:
                return Json({"entities": [{"name": "Erin", "kind": "person"}, {"name": "Acme", "kind": "org"}],
                             "relations": [{"source": "Erin", "relation": "works at", "target": "Acme",
                                            "memory_id": acme},
                                           {"source": "Erin", "relation": "knows", "target": "Globex",
                                            "memory_id": foreign}]})  # fmt: skip
            return Json({"entities": [], "relations": []})
        return None

    llm_server.responder = respond
    first = await bench.runner().run_job("reflect")
    assert first.status == "ok"
    [asked] = prompts_with(llm_server, REFLECT)
    assert all(f"[{e}]" in asked.text for e in episodes) and f"[{sofa}]" not in asked.text
    # The similar core memory changed two days ago: core memories change slowly, so it is left alone.
    assert bench.store.get(core).current and first.counts["skipped"] == 1 and first.counts.get("promoted") is None
    assert first.counts["details"] == {"holder": first.counts["details"]["holder"], "entities": 2, "relations": 1}
    assert bench.db.query("SELECT name, kind FROM entities WHERE user_id = ? ORDER BY name", (erin,)) == [
        ("Acme", "org"), ("Erin", "person")]  # fmt: skip
    [(relation, memory_id, blob)] = bench.db.query(
        "SELECT relation, memory_id, embedding FROM relationships WHERE user_id = ?", (erin,)
    )
    assert (relation, memory_id, blob) == ("works at", acme, None)  # roles link, not vectors (memory/graph.py)
    assert bench.db.query("SELECT * FROM relationships WHERE memory_id = ?", (foreign,)) == []  # not Erin's
    assert [m.id for m in linked_memories(bench.store, erin, "Did Acme send the contract?")] == [acme]
    assert linked_memories(bench.store, other, "Did Acme send the contract?") == []

    # Ten days later the core memory may change; the same episodes are still unpromoted and get asked again
    # only because a new one arrived.
    bench.clock.advance(days=10)
    bench.db.execute("UPDATE memories SET valid_from = ? WHERE id = ?",
                     (iso(bench.clock.now() - timedelta(days=10)), core))  # fmt: skip
    fourth = bench.store.add(erin, "Erin jogged before work again on Tuesday.", scope="episodic", type="context")
    second = await bench.runner().run_job("reflect")
    assert second.counts["promoted"] == 1 and second.counts["updated"] == 1
    updated = next(m for m in bench.store.get_all(erin, type="behavioral"))
    assert updated.content == statement and updated.root_id == core and updated.version == 2
    assert sorted(updated.metadata["reflection"]["episode_ids"]) == sorted([*episodes, fourth])
    assert updated.metadata["confidence"] == 0.9
    assert updated.private  # drawn from an episode told to Quinn alone

    # Promoted episodes are not promoted again: the next day brings no reflection call.
    bench.clock.advance(days=1)
    third = await bench.runner().run_job("reflect")
    assert third.status == "ok" and len(prompts_with(llm_server, REFLECT)) == 2
    cursors = [r["counts"].get("cursor") for r in bench.runs("reflect")]
    assert cursors[0] == core and cursors[1] == fourth and cursors[2] == updated.id  # where each run resumed


async def test_reflection_turns_a_semantic_pattern_into_a_new_memory(bench, llm_server):
    erin = "erin@example.test"
    episodes = [bench.store.add(erin, text, scope="episodic", domain="travel", importance=0.3 + 0.1 * i)
                for i, text in enumerate(("Erin flew to Oslo with SAS in March.", "Erin booked SAS again for Bergen.",
                                          "Erin chose SAS for the Tromso trip."))]  # fmt: skip
    llm_server.responder = lambda r: (
        Json({"statement": "Erin prefers flying with SAS.", "type": "semantic", "confidence": 0.75})
        if r.purpose == REFLECT else Json({"entities": [], "relations": []}) if r.purpose == ENTITIES else None
    )  # fmt: skip
    outcome = await bench.runner(reflect_similarity=0.5).run_job("reflect")
    assert outcome.counts["promoted"] == 1 and outcome.counts["created"] == 1
    [semantic] = bench.store.get_all(erin, type="semantic")
    assert semantic.content == "Erin prefers flying with SAS." and semantic.domain == "travel"
    assert semantic.scope == "domain" and semantic.importance == pytest.approx(0.5)
    assert not semantic.private  # none of its episodes was
    assert semantic.metadata["source_ids"] == episodes and semantic.metadata["confidence"] == 0.75
    assert all(bench.store.get(e).current for e in episodes)  # episodes stay: they happened
    assert semantic.tags == ()  # no bookkeeping tag that would group unrelated reflections for consolidation


async def test_a_reflection_or_graph_over_a_memory_forgotten_meanwhile_is_not_stored(bench, llm_server):
    erin = "erin@example.test"
    for text in ("Erin flew to Oslo with SAS in March.", "Erin booked SAS again for Bergen.",
                 "Erin chose SAS for the Tromso trip."):  # fmt: skip
        bench.store.add(erin, text, scope="episodic", domain="travel")
    calls: list[str] = []

    def respond(request: RecordedRequest):
        if request.purpose not in (REFLECT, ENTITIES):
            return None
        calls.append(request.purpose)
        forget_elsewhere(bench, erin, "that I flew to Oslo" if request.purpose == REFLECT else "the Tromso trip")
        if request.purpose == REFLECT:
            return Json({"statement": "Erin prefers flying with SAS to Oslo.", "type": "semantic", "confidence": 0.8})
        return Json({"entities": [{"name": "Tromso", "kind": "place"}], "relations": []})

    llm_server.responder = respond
    outcome = await bench.runner(reflect_similarity=0.5).run_job("reflect")
    assert outcome.status == "ok" and calls == [REFLECT, ENTITIES]
    assert bench.store.get_all(erin, type="semantic") == []  # drawn from a memory forgotten meanwhile
    assert bench.db.query("SELECT name FROM entities WHERE user_id = ?", (erin,)) == []


async def test_no_job_puts_the_models_words_in_place_of_the_persons_own(bench, llm_server):
    """Own-words memories (``learn = "own_words"``) and "remember ..." are neither merged nor promoted: seen with
    the 1.5B, reflection over a person's statements put "My father's last name is <their address>" in their
    profile. Memories the model worded still are, in the same runs."""
    finn = "finn@example.test"
    said = {"via": "own_words", "source": {"message_id": "<f1@x>"}}
    theirs = [
        bench.store.add(finn, text, scope="episodic", tags=["running"], metadata=said)
        for text in (
            "I ran 5 km before work on Monday.",
            "I ran 8 km early on Wednesday before the office.",
            "I did a short run before work on Friday, the usual loop.",
            "I ran before work today, in the rain.",
        )
    ]
    kept = bench.store.add(finn, "My locker code at the pool is 4471.", scope="episodic", tags=["running"],
                           metadata={"via": "remember"})  # fmt: skip
    worded = [bench.store.add(finn, text, scope="profile", type="personal")
              for text in ("Finn's dog is named Rex.", "Finn has a dog called Rex.")]  # fmt: skip

    def respond(request: RecordedRequest):
        if request.purpose == MERGE:
            return Text("Finn's dog is named Rex.")
        if request.purpose == REFLECT:
            return Json({"statement": "Finn runs before work.", "type": "behavioral", "confidence": 0.9})
        if request.purpose == ENTITIES:
            return Json({"entities": [], "relations": []})
        return None

    llm_server.responder = respond
    merged = await bench.runner().run_job("consolidate")
    assert merged.status == "ok" and merged.counts["merged"] == 2  # the two model-worded lines about Rex
    [asked] = prompts_with(llm_server, MERGE)
    assert "Rex" in asked.text and "run" not in asked.text and "4471" not in asked.text
    assert all(bench.store.get(m).current for m in [*theirs, kept])
    assert not any(bench.store.get(m).current for m in worded)
    reflected = await bench.runner().run_job("reflect")
    assert reflected.status == "ok" and prompts_with(llm_server, REFLECT) == []
    assert [m.content for m in bench.store.get_all(finn) if not m.in_their_words] == ["Finn's dog is named Rex."]


async def test_one_group_the_model_cannot_merge_does_not_hold_up_the_others(bench, llm_server):
    hana = "hana@example.test"
    for tag, facts in (("tea", ["drinks sencha", "owns a kyusu", "buys matcha in Kyoto", "brews at 70 C",
                                "prefers loose leaf"]),
                       ("bikes", ["rides a steel frame", "commutes 12 km", "fixes her own brakes",
                                  "races in autumn", "owns a cargo bike"])):  # fmt: skip
        for fact in facts:
            bench.store.add(hana, f"Hana {fact}.", scope="episodic", tags=[tag])
    llm_server.responder = lambda r: (
        (Error(500, "cannot merge tea") if "sencha" in r.text else Text("Hana rides and repairs bikes daily."))
        if r.purpose == MERGE else None
    )  # fmt: skip
    outcome = await bench.runner().run_job("consolidate")
    assert outcome.status == "ok" and outcome.counts["merged"] == 5 and outcome.counts["skipped"] == 1
    assert "cannot merge tea" in outcome.counts["details"]["failed_items"][0]
    assert len(bench.store.get_all(hana)) == 6  # the tea group waits for the next run, untouched
    no_memory_both_current_and_merged(bench)


async def test_retention_windows_delete_each_kind_and_never_a_current_memory(bench):
    from quinn.agent.llm import Usage
    from quinn.agent.usage import record_usage
    from quinn.config import RetentionConfig
    from quinn.scheduler.runner import JobRunner

    user, now = "hana@example.test", bench.clock.now()
    old = now - timedelta(days=100)
    stale = write_thread(bench.db, user, QUINN, "Old", ["My locker is 12.", "Noted."], old, prefix="old")
    fresh = write_thread(bench.db, user, QUINN, "New", ["My locker is 14 now.", "Noted."], now, prefix="new")
    bench.db.execute("UPDATE sessions SET summary = 'Hana talked about lockers.' WHERE id = ?", (stale.session_id,))
    for thread in (stale, fresh):  # conversation recall's passages of each thread's first mail
        assert index_message(bench.store, user, thread.message_ids[0], "in") == 1
    for session, prefix in ((stale, "old"), (fresh, "new")):
        Outbox(bench.db).put(f"<{prefix}-r@quinn>", f"<{prefix}-1@example.test>", user, session.session_id, [user],
                             b"raw mail", template="reply", prompt_version="reply@abc")  # fmt: skip
        Outbox(bench.db).mark(f"<{prefix}-r@quinn>", "sent")
    bench.db.execute("UPDATE outbox SET sent_at = ? WHERE message_id = '<old-r@quinn>'", (iso(old),))
    record_usage(bench.db, "reply", Usage("m", 10, 5, 1), user_id=user)
    bench.db.execute("UPDATE llm_usage SET at = ?", (iso(old),))
    record_usage(bench.db, "reply", Usage("m", 10, 5, 1), user_id=user)
    kept_old = bench.store.add(user, "Hana's badge number is 8812.")  # current: never touched, however old
    archived = bench.store.add(user, "Hana once mentioned a blue umbrella.")
    bench.store.forget(archived, user_id=user, reason="test")
    changed = bench.store.add(user, "Hana lives in Kyoto.")
    current = bench.store.update(changed, "Hana lives in Osaka.", user_id=user)
    bench.db.execute("UPDATE memories SET created_at = ?, updated_at = ?, valid_from = ?", (iso(old),) * 3)
    bench.db.execute("UPDATE memories SET valid_to = ? WHERE valid_to IS NOT NULL", (iso(old),))

    runner = JobRunner(bench.store, bench.llm, bench.prompts, bench.config.scheduler, clock=bench.clock,
                       retention=RetentionConfig(conversations_days=30, outbox_days=30, usage_days=30,
                                                 archived_days=30))  # fmt: skip
    outcome = await runner.run_job("cleanup")
    assert outcome.status == "ok"
    assert outcome.counts["details"]["retention"] == {
        "messages": 2, "conversation_summaries": 0, "session_summaries": 1, "outbox_raw": 1, "llm_usage": 1,
        "memories": 2}  # fmt: skip
    # The old mail's passage went with it (a trigger): recall keeps nothing retention deleted.
    assert [r[0] for r in bench.db.query("SELECT content FROM passages WHERE user_id = ?", (user,))] == [
        "My locker is 14 now."]  # fmt: skip
    bodies = [r[0] for r in bench.db.query("SELECT body FROM messages WHERE user_id = ? ORDER BY id", (user,))]
    assert bodies == ["My locker is 14 now.", "Noted."]
    assert bench.db.query("SELECT message_id, length(raw) FROM outbox ORDER BY message_id") == [
        ("<new-r@quinn>", 8), ("<old-r@quinn>", 0)]  # fmt: skip
    assert bench.db.query_value("SELECT count(*) FROM llm_usage") == 1
    left = {r[0] for r in bench.db.query("SELECT id FROM memories WHERE user_id = ?", (user,))}
    assert left == {kept_old, current}  # the archived one and the old version are gone, with their history
    assert bench.db.query_value("SELECT count(*) FROM memory_versions WHERE memory_id IN (?, ?)",
                                (archived, changed)) == 0  # fmt: skip
    assert archived not in [h.id for h in bench.store.search(user, "umbrella", k=5, touch=False)]
    # Zero keeps everything: the default for all but the outbox.
    assert RetentionConfig().model_dump() == {"conversations_days": 0, "outbox_days": 30, "usage_days": 0,
                                              "reply_traces_days": 0, "archived_days": 0}  # fmt: skip
