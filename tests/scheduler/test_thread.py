"""Milestone summarization feeding the reply context, through the real pipeline.

A 60-message thread is stored (real parser, real conversation store); the summarize job runs with the scripted
model; then message 61 goes through SMTP -> Dovecot -> an in-process Quinn (IMAP, policy, sessions, context,
the reply template, the LLM seam over HTTP) -> SMTP back to the user. The prompt must carry the summary and the
last messages, stay under the budget, and the fact from message 3 must reach the model through the summary.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
from datetime import timedelta

import pytest

from quinn.app import Quinn
from quinn.clock import ManualClock, utcnow
from quinn.config import load_config
from quinn.db import Database
from quinn.scheduler.runner import JobRunner
from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import REPLY, Json, RecordedRequest, Text, count_tokens
from tests.lab.scheduler import inbound_mail, write_thread

FACT = "my gym locker code is 4417"


def body(index: int) -> str:
    if index == 3:
        return f"Message 3: before I forget, {FACT}. Now, about the Berlin trip hotels near the river."
    topic = ["train times", "museum tickets", "hotel options", "restaurants", "the budget"][index % 5]
    return f"Message {index}: more about the Berlin trip and {topic}. " + "We compared options in detail. " * 8


def scripted(request: RecordedRequest):
    if request.purpose == "summarize":
        # Like a model: the summary keeps the fact when the fact is in what it was given (message 3 or the
        # summary so far), so the test fails if message 3 never reached the summarizer.
        known = " Alice's gym locker code is 4417." if "4417" in request.text else ""
        return Text(f"Alice and Quinn are planning a Berlin trip: trains, museums, hotels, food, budget.{known}")
    if request.purpose == EXTRACTION:
        return Json({"new": [], "updated": [], "contradicted": []})
    if "What was my gym locker code" in request.text:
        return Text("Your gym locker code is 4417." if "4417" in request.text else "I do not know that.")
    return Text("Noted.")


async def next_pass(app: Quinn) -> int:
    """What Quinn.run does between passes: wait for the server to report the new mail, then handle the folder."""
    await asyncio.to_thread(app.mailbox.wait, 2.0, threading.Event())
    return await app.process_folder()


@pytest.mark.timeout(300)  # loads the embedding model for its in-process Quinn
async def test_sixty_message_thread_is_answered_from_summary_and_recent_messages(mail_lab, lab_config, llm_server):
    alice = mail_lab.new_user("alice")
    bob = mail_lab.new_user("bob")
    lab = lab_config(extra="[scheduler]\nenabled = false\nsummarize_threshold_tokens = 1500\n"
                           "summarize_keep_recent = 6\n[memory]\ntoken_budget = 1000\n",
                     smtp_extra="reply_all = true")  # fmt: skip
    config = load_config(lab.path, env=lab.env)
    quinn_address = lab.address
    db = Database.open(config.database.url)
    bodies = [body(i) for i in range(1, 61)]
    thread = write_thread(db, alice, quinn_address, "Berlin trip", bodies, utcnow() - timedelta(days=1), step_min=10)
    db.close()
    budget = config.scheduler.summarize_threshold_tokens + config.memory.token_budget
    assert sum(count_tokens(b) for b in bodies) > budget  # the whole thread could never fit
    llm_server.responder = scripted

    app = Quinn(config)
    await app.start()
    try:
        assert app.store is not None
        runner = JobRunner(app.store, app.llm, app.prompts, config.scheduler, clock=ManualClock(utcnow()))
        outcome = await runner.run_job("summarize")
        assert outcome.status == "ok" and outcome.counts["processed"] == 1 and outcome.counts["created"] == 1
        summary, upto = app.store.db.query_one("SELECT summary, summarized_upto FROM sessions WHERE id = ?",
                                               (thread.session_id,))  # fmt: skip
        assert "4417" in summary
        kept = app.store.db.query_value("SELECT count(*) FROM messages WHERE session_id = ? AND id > ?",
                                        (thread.session_id, upto))  # fmt: skip
        assert 1 <= kept <= 6

        question = inbound_mail(alice, quinn_address, "Berlin trip", "Quick one: What was my gym locker code again?",
                                "<t-61@example.test>", in_reply_to=thread.message_ids[-1])  # fmt: skip
        mail_lab.smtp.send(alice, quinn_address, question)
        assert await next_pass(app) == 1
        [reply_request] = [
            r for r in llm_server.requests if "What was my gym locker code" in r.text and r.purpose == REPLY
        ]  # the reply prompt, not the extraction
        prompt = reply_request.text
        assert "Summary of the earlier conversation in this thread:" in prompt and summary in prompt
        for index in range(61 - kept, 61):  # the last messages, verbatim
            assert f"Message {index}:" in prompt
        for index in (3, 30, 60 - kept):  # folded into the summary: never repeated verbatim
            assert f"Message {index}:" not in prompt
        assert count_tokens(prompt) <= budget
        [reply_raw] = mail_lab.dovecot.wait_for_messages(alice, 1)
        reply = email.message_from_bytes(reply_raw, policy=email.policy.default)
        assert reply["In-Reply-To"] == "<t-61@example.test>"
        assert "4417" in reply.get_body(("plain",)).get_content()
        retrieved = app.store.db.query_value("SELECT count(*) FROM memory_retrievals WHERE session_id = ?",
                                             (thread.session_id,))  # fmt: skip
        assert retrieved >= 1  # the summary memory was retrieved for this session (decay's spacing input)

        # "Summarize this and remember it": the whole thread folded now, the summary in the reply, stored. Bob,
        # on Cc, saw none of the thread: with reply_all on, the summary still goes to Alice alone.
        ask = inbound_mail(alice, quinn_address, "Berlin trip", "Thanks! Please summarize this thread and remember it.",
                           "<t-62@example.test>", in_reply_to="<t-61@example.test>", cc=bob)  # fmt: skip
        mail_lab.smtp.send(alice, quinn_address, ask)
        assert await next_pass(app) == 1
        replies = mail_lab.dovecot.wait_for_messages(alice, 2)
        answer = email.message_from_bytes(replies[-1], policy=email.policy.default)
        assert answer["Cc"] is None and mail_lab.dovecot.messages(bob) == []
        text = answer.get_body(("plain",)).get_content()
        assert "Berlin trip" in text and "4417" in text and "[memory:" in text
        memory_id = int(text.split("[memory:")[1].split("]")[0])
        stored = app.store.get(memory_id)
        assert stored is not None and stored.user_id == alice and stored.type == "summary" and stored.current
        assert "4417" in stored.content and stored.metadata["session_id"] == thread.session_id
        newest = app.store.db.query_value("SELECT max(id) FROM messages WHERE session_id = ? AND direction = 'in'",
                                          (thread.session_id,))  # fmt: skip
        assert app.store.db.query_value("SELECT summarized_upto FROM sessions WHERE id = ?",
                                        (thread.session_id,)) == newest  # fmt: skip
    finally:
        await app.close()
