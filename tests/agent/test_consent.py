"""Every promise about a person's memory holds everywhere (issue 35): "stop remembering me" stops every job and
command; through the real pipeline (Dovecot, the lab's SMTP, the in-process daemon and its scheduler) with the
scripted model."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from tests.agent.test_scenarios import DAY0
from tests.lab.brain import Brain
from tests.lab.llm_server import Json, RecordedRequest, Text

JOBS_TOML = """[scheduler]
startup_delay_s = 3600
session_close_after_min = 0.01
summarize_threshold_tokens = 100
summarize_keep_recent = 1
reflect_min_episodes = 3
"""

EPISODES = ("{name} went hiking in the Alps on Saturday.", "{name} went hiking in the Alps on Sunday.",
            "{name} went hiking in the Alps last weekend.")  # fmt: skip
THREAD = (
    "We are planning a long trip to Norway in June with the whole family, by train and ferry, and we still need "
    "to choose between Bergen and Tromso for the second week; the children want to see the fjords first.",
    "Another thought on Norway: the ferry from Bergen runs daily in June, and the cabins need booking early, so "
    "please keep in mind that the budget is about four thousand euros for the two weeks altogether.",
    "Last note on the trip: my sister Clara may join us in Tromso for three days if her work allows it, which "
    "would mean a bigger cabin and a second rental car for the drive to the northern coast.",
)


def scripted(request: RecordedRequest, memory_ids: dict[str, int]) -> Any:
    """What a model would answer to each background call: every one of them would store something new."""
    if request.purpose == "summarize":
        return Text("The family plans two weeks in Norway in June, by train and ferry, on a 4000 euro budget.")
    if request.purpose == "Reflection":
        return Json({"statement": "Hiking in the Alps is a regular weekend habit.", "type": "semantic",
                     "confidence": 0.9})  # fmt: skip
    if request.purpose == "GraphExtraction":
        target = next((mid for text, mid in memory_ids.items() if text in request.text), 0)
        return Json({"entities": [{"name": "Alps", "kind": "place"}],
                     "relations": [{"source": "Hiker", "relation": "hikes in", "target": "Alps",
                                    "memory_id": target}]})  # fmt: skip
    if request.purpose == "SessionReview":
        return Json(
            {
                "summary": "The family plans a trip to Norway in June.",
                "reward_score": 0.5,
                "improvement_suggestion": "Ask about the budget earlier.",
                "state": {"recent_goal_and_status": "Norway trip in June: choosing Bergen or Tromso"},
            }
        )
    if request.purpose == "consolidate":
        return Text("Goes hiking in the Alps at weekends.")
    return Text("Noted, thank you.")


async def test_stop_remembering_me_stops_every_job_and_the_summary_on_request(make_quinn, mail_lab, brain: Brain):
    """An opted-out person's long thread, "summarize this and remember it", and the summarize, session-close,
    reflect and consolidate jobs write nothing about them: no memory, no summary, no state, no graph. Bob, who
    did not opt out, shows each job would have written something."""
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn = await make_quinn(JOBS_TOML)
    store, scheduler = quinn.app.store, quinn.app.scheduler
    assert store is not None and scheduler is not None
    ids: dict[str, int] = {}
    for user, name in ((alice, "Alice"), (bob, "Bob")):
        for episode in EPISODES:
            text = episode.format(name=name)
            ids[text] = store.add(user, text, scope="episodic", type="event", valid_from=DAY0 - timedelta(days=9))
    brain.reply = lambda request: scripted(request, ids)

    await quinn.send(alice, "Privacy", "Please stop remembering me.", date=DAY0)
    before = quinn.query("SELECT id, content FROM memories WHERE user_id = ? ORDER BY id", (alice,))
    for user, name in ((alice, "Alice"), (bob, "Bob")):
        for day, text in enumerate(THREAD, start=1):
            await quinn.send(user, "Norway", text, name=name, date=DAY0 + timedelta(hours=day))
        await quinn.send(user, "Norway", "Please summarize this and remember it.", name=name,
                         date=DAY0 + timedelta(hours=5))  # fmt: skip
    quinn.replies(alice, 5)
    quinn.replies(bob, 4)

    await asyncio.sleep(1.0)  # the sessions go quiet (session_close_after_min = 0.6 s)
    for job in ("summarize", "session_close", "reflect", "consolidate"):
        outcome = await scheduler.run_job(job, force=True)
        assert outcome.status == "ok", outcome

    # Bob: every path wrote something (so the jobs ran as configured) ...
    bob_memories = [r[0] for r in quinn.query("SELECT type FROM memories WHERE user_id = ?", (bob,))]
    assert "summary" in bob_memories and "semantic" in bob_memories
    assert quinn.query("SELECT count(*) FROM user_state WHERE user_id = ?", (bob,)) == [(1,)]
    assert quinn.query("SELECT count(*) FROM relationships WHERE user_id = ?", (bob,)) == [(1,)]
    # ... and nothing new about Alice: her memories as they were, no thread summary, no state, no review, no graph.
    assert quinn.query("SELECT id, content FROM memories WHERE user_id = ? ORDER BY id", (alice,)) == before
    assert quinn.query("SELECT count(*) FROM memory_versions WHERE user_id = ? AND change != 'created'",
                       (alice,)) == [(0,)]  # fmt: skip
    assert quinn.query("SELECT summary FROM sessions WHERE user_id = ? AND summary IS NOT NULL", (alice,)) == []
    for table in ("user_state", "conversation_summaries", "entities", "relationships"):
        assert quinn.query(f"SELECT count(*) FROM {table} WHERE user_id = ?", (alice,)) == [(0,)], table
    asked_about_alice = [r.purpose for r in brain.server.requests if r.purpose != "reply" and alice in r.text]
    assert asked_about_alice == [], "a background call was made about a person who asked not to be remembered"
