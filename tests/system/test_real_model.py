"""Quinn with a real language model (issue 21): Qwen2.5-Coder-0.5B on llama-cpp-python's server, reached through
the ordinary provider path (``openai/<name>`` at a ``base_url``), behind a recorder that keeps what Quinn sent.

These tests assert on what Quinn stored and sent to the model, never on the model's wording: the mail is
answered (with text, never JSON), memories are extracted and stored, a later thread's prompt carries them, and
every structured call writes valid rows or fails cleanly (the work stays to be retried). Greedy decoding
(``temperature = 0``) and ``max_output_tokens`` keep them repeatable and their CI cost to a few minutes.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from quinn.agent.json_text import whole_json
from quinn.agent.llm import LLM
from quinn.clock import utcnow
from quinn.db import Database
from quinn.lab.wait import WaitTimeout, wait_for
from tests.conftest import lab_config_text
from tests.lab.brain import EXTRACTION
from tests.lab.daemon import LabConfig
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import REPLY
from tests.lab.real_llm import MODEL_NAME, ModelRecorder, RealLLM
from tests.lab.scheduler import open_bench, write_thread

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(900)]

MODEL = f"openai/{MODEL_NAME}"
QUINN = "quinn@example.test"
# hold_copies off: the 0.5B model often answers with the mail itself or a tool's result (held by default, so the
# mail waits); this test is about the path around the reply (extraction, storage, recall in a new thread), and
# tests/agent/test_llm_robust.py proves the hold on every shape this model produced.
LLM_EXTRA = "temperature = 0\nmax_output_tokens = 300\nmax_tool_rounds = 2\nhold_copies = false"


@pytest.fixture
def recorder(real_llm: RealLLM) -> Iterator[ModelRecorder]:
    with ModelRecorder(real_llm) as recorder:
        yield recorder


def current_memories(db_path: Any, user: str) -> list[str]:
    db = Database.open(str(db_path))
    try:
        rows = db.query("SELECT content FROM memories WHERE user_id = ? AND active = 1 AND valid_to IS NULL", (user,))
    finally:
        db.close()
    return [row[0] for row in rows]


def test_a_mail_is_answered_its_facts_stored_and_a_new_thread_recalls_them(
    tmp_path, dovecot, smtp_lab, users, recorder: ModelRecorder, quinn_daemon
) -> None:
    alice, address = users("alice"), users("quinn")
    text = lab_config_text(imap_port=dovecot.port, smtp_port=smtp_lab.port, address=address, model=MODEL,
                           llm_url=recorder.openai_base_url, db_path=tmp_path / "quinn.db", llm_timeout_s=300,
                           llm_extra=LLM_EXTRA)  # fmt: skip
    (tmp_path / "quinn.toml").write_text(text, encoding="utf-8")
    secrets = {"QUINN_TEST_IMAP_PASSWORD": dovecot.password, "QUINN_TEST_LLM_KEY": "unused"}
    config = LabConfig(tmp_path / "quinn.toml", secrets, address, tmp_path / "quinn.db")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    # With a question to answer: told only facts, the 0.5B model sends the mail back as its "reply" (3 of 4 such
    # mails in a probe), which Quinn never mails (json_text.echoed): the mail waits for a retry instead.
    first_id, raw = build_mail(alice, address, "Hello from Lisbon", "Hi Quinn, I'm Alice. I live in Lisbon and my "
                               "cat is called Miso. I work as a nurse at the city hospital. Could you suggest a good "
                               "book for my night shifts?")  # fmt: skip
    smtp_lab.send(alice, address, raw)
    [reply_raw] = dovecot.wait_for_messages(alice, 1, timeout_s=300)
    reply = email.message_from_bytes(reply_raw, policy=email.policy.default)
    body = reply.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert reply["In-Reply-To"] == first_id and body.strip()
    assert whole_json(body.split("\n--")[0]) is None, f"a JSON reply was mailed:\n{body}"
    # The first extraction may be deferred (a cut-off or invalid answer is retried after a minute): the question
    # comes once the first mail's facts are stored, as it would a day later.
    learnt = wait_for(lambda: current_memories(tmp_path / "quinn.db", alice),
                      "the real model's extraction storing facts of a mail full of them", timeout_s=420, interval_s=1,
                      log=daemon.log)  # fmt: skip

    extraction = [body for path, body in recorder.bodies(EXTRACTION)]
    assert extraction, "no extraction request reached the model"
    # llama.cpp refuses json_schema (500): Quinn fell back to json_object with the schema and kept that mode.
    formats = [(b.get("response_format") or {}).get("type") for b in extraction]
    assert formats[-1] == "json_object" and "schema" in extraction[-1]["response_format"]
    assert all(b["model"] == MODEL_NAME for _, b in recorder.requests)  # the name as the operator wrote it

    _, raw = build_mail(alice, address, "A question", "What is the name of my cat?")
    smtp_lab.send(alice, address, raw)
    replies = dovecot.wait_for_messages(alice, 2, timeout_s=300)
    assert len(replies) == 2
    with contextlib.suppress(WaitTimeout):  # let the second extraction finish: a SIGTERM would wait out its grace
        wait_for(lambda: daemon.log().count("extraction for") >= 2, "the second extraction", 300, interval_s=0.5)
    assert daemon.terminate(timeout_s=120) == 0

    asked = [t for t in recorder.texts(purpose=REPLY) if "What is the name of my cat?" in t]
    assert asked, "the second mail never reached the model"
    recalled = [m for m in learnt if m in asked[0]]
    assert recalled, f"none of {learnt} was in the new thread's prompt"


@pytest.fixture
def real_bench(tmp_path, recorder: ModelRecorder, local_embedder):
    bench = open_bench(recorder.openai_base_url, str(tmp_path / "jobs.db"), local_embedder, start=utcnow())
    settings = {"model": MODEL, "timeout_s": 300, "temperature": 0, "max_output_tokens": 400}
    bench.llm = LLM(bench.config.llm.model_copy(update=settings))
    try:
        yield bench
    finally:
        bench.close()


def failed_cleanly(outcome: Any) -> bool:
    """A job that could not use the model's answer says so per item and leaves the item for the next run."""
    return outcome.status == "ok" and bool(outcome.counts.get("details", {}).get("failed_items"))


async def test_every_background_call_writes_valid_rows_or_fails_cleanly(real_bench, recorder) -> None:
    bench, user = real_bench, "bob@example.test"
    start = bench.clock.now()
    write_thread(bench.db, user, QUINN, "Offsite", [
        "Can we move the team offsite to March? We have a budget of 5000 EUR.", "Sure, which dates work?",
        "March 12, in Lisbon please. Our team is twelve people and two are vegetarian.",
        "Booked: March 12, Lisbon.", "Great, thanks! Please send venue options as a table next time.",
    ], start)  # fmt: skip

    # summarize (a text call): the rolling summary is prose, never JSON.
    summarized = await bench.runner(summarize_threshold_tokens=40, summarize_keep_recent=2).run_job("summarize")
    summary = bench.db.query_value("SELECT summary FROM sessions")
    if not failed_cleanly(summarized):
        assert summarized.status == "ok" and summary and whole_json(summary) is None

    # session_close (structured: SessionReview with an Extraction inside).
    bench.clock.set(start + timedelta(minutes=90))
    closed = await bench.runner(session_close_after_min=60).run_job("session_close", force=True)
    status = bench.db.query_value("SELECT status FROM sessions")
    if failed_cleanly(closed):
        assert status == "open"  # reviewed again at the next run
    else:
        assert closed.status == "ok" and status == "closed"
        summary_row = bench.db.query_one("SELECT summary, reward_score FROM conversation_summaries")
        assert summary_row is not None and summary_row[0].strip()
        assert summary_row[1] is None or -1 <= summary_row[1] <= 1

    # reflect (structured: Reflection per group of similar episodes, GraphExtraction per batch of memories).
    for text in ("Bob went running before work on Monday.", "Bob ran 8 km before the office on Wednesday.",
                 "Bob did a short run before work on Friday.", "Bob works at Acme in Porto."):  # fmt: skip
        bench.store.add(user, text, scope="episodic", type="context", importance=0.4)
    reflected = await bench.runner().run_job("reflect")
    assert reflected.status == "ok", reflected
    ids = {row[0] for row in bench.db.query("SELECT id FROM memories WHERE user_id = ?", (user,))}
    for memory_id, relation in bench.db.query("SELECT memory_id, relation FROM relationships"):
        assert memory_id in ids and relation.strip()  # a relation points at one of the user's own memories
    for name, kind in bench.db.query("SELECT name, kind FROM entities"):
        assert name.strip() and isinstance(kind, str)

    asked = recorder.texts()
    assert any("You review a finished email conversation" in t for t in asked)
    assert any("list the named entities" in t for t in asked)
    assert any("These are similar episodes" in t for t in asked)
    usage = {row[0] for row in bench.db.query("SELECT purpose FROM llm_usage")}
    # A call that failed cleanly (above: a timeout on a loaded box) used nothing, so it has no usage row.
    assert "job:reflect" in usage and ("job:session_close" in usage or failed_cleanly(closed))


@pytest.mark.long
async def test_the_labelled_extraction_set_parses_case_by_case(recorder: ModelRecorder) -> None:
    """--long (~3 min quiet, ~11 min on a loaded box): all of tests/data/extraction_eval.jsonl through the daemon's
    extraction call; every answer is a valid Extraction (scores are bench/extraction_real.py's business)."""
    from quinn.agent.evaluation import evaluate_extraction, load_cases
    from quinn.agent.prompts import PromptStore
    from quinn.commands.evaluate import DEFAULT_DATA
    from quinn.config import LlmConfig

    cases = load_cases(DEFAULT_DATA)
    config = LlmConfig(model=MODEL, base_url=recorder.openai_base_url, timeout_s=300, max_retries=0, temperature=0,
                       max_output_tokens=600)  # fmt: skip
    report = await evaluate_extraction(LLM(config), PromptStore(), cases)
    assert [c.case_id for c in report.cases] == [c["id"] for c in cases]
    asked = [body for path, body in recorder.bodies(EXTRACTION)]
    assert len(asked) >= sum(not c.gated for c in report.cases)  # each ungated case reached the model
    assert report.usage.calls >= len(asked) - 1  # the one json_schema refusal costs no tokens
