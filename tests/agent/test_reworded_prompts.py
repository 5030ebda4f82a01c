"""Rewording every template leaves the lab working: the scripted model picks its answer by the call's purpose.

An admin may reword any template (prompts/README.md). The tests drive Quinn through a scripted model, which once
recognised an extraction by a sentence of prompts/extract.j2 and the new email by its heading, so an edit broke
them (issue 17). Here every template's prose is rewritten, Jinja untouched, and a lab Quinn runs on the rewritten
set: a mail is learnt from, the memory reaches the prompt of a mail in a new thread, and a background job with
structured output writes its row. No recorded request may hold a sentence of the original templates.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

from quinn.agent.prompts import TEMPLATE_NAMES, PromptStore, packaged_dir
from quinn.commands.prompts import check_templates
from tests.agent.test_scenarios import DAY0
from tests.lab.brain import NOTHING, Brain
from tests.lab.llm_server import Json, Text

# Jinja's statements, expressions and comments: kept as they are (variables, filters, control flow).
JINJA = re.compile(r"({%.*?%}|{{.*?}}|{#.*?#})", re.S)
SYNONYMS = {
    "email": "message", "emails": "messages", "new": "fresh", "memory": "recollection", "memories": "recollections",
    "from": "by", "subject": "titled", "earlier": "previous", "reply": "response", "conversation": "exchange",
    "summary": "digest", "person": "individual", "write": "compose", "thread": "chain", "assistant": "helper",
    "existing": "current", "answer": "respond", "only": "solely", "about": "regarding", "you": "thou",
}  # fmt: skip


def reword(prose: str) -> str:
    """Every word changed: a synonym where the table has one, else the word in capitals; punctuation kept."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        synonym = SYNONYMS.get(word.lower())
        if synonym is None:
            return word.upper()
        return synonym.capitalize() if word[0].isupper() else synonym

    return re.sub(r"[A-Za-z]{2,}", swap, prose)


def reworded_template(source: str) -> str:
    """``source`` with the literal text between Jinja tags reworded."""
    return "".join(part if JINJA.fullmatch(part) else reword(part) for part in JINJA.split(source))


def original_sentences() -> set[str]:
    """The prose of the packaged templates, line by line (fragments of three words or more)."""
    found = set()
    for name in TEMPLATE_NAMES:
        source = (packaged_dir() / f"{name}.j2").read_text(encoding="utf-8")
        for part in JINJA.split(source):
            if JINJA.fullmatch(part):
                continue
            found |= {line.strip() for line in part.splitlines() if len(re.findall(r"[a-z]{2,}", line)) >= 3}
    return found


def reworded_prompts(directory: Path) -> Path:
    directory.mkdir()
    for name in TEMPLATE_NAMES:
        source = (packaged_dir() / f"{name}.j2").read_text(encoding="utf-8")
        (directory / f"{name}.j2").write_text(reworded_template(source), encoding="utf-8")
    return directory


def test_the_rewording_changes_every_sentence_and_no_variable(tmp_path: Path) -> None:
    admin = reworded_prompts(tmp_path / "prompts")
    sentences = original_sentences()
    assert len(sentences) > 50  # the check below has prose to look for
    for name in TEMPLATE_NAMES:
        old = (packaged_dir() / f"{name}.j2").read_text(encoding="utf-8")
        new = (admin / f"{name}.j2").read_text(encoding="utf-8")
        assert JINJA.findall(new) == JINJA.findall(old), name  # the same tags, in the same order
        assert not [s for s in sentences if s in new], name
    # What `quinn prompts check` runs: every reworded template compiles and renders the sample variables.
    store = PromptStore(admin)
    results = check_templates(store)
    assert [(name, ok) for name, ok, _detail in results] == [(name, True) for name in TEMPLATE_NAMES], results
    assert all(store.source_of(name) == admin / f"{name}.j2" for name in TEMPLATE_NAMES)


async def test_a_lab_quinn_on_reworded_templates_learns_recalls_and_closes_sessions(
    tmp_path: Path, make_quinn, mail_lab, brain: Brain
) -> None:
    admin = reworded_prompts(tmp_path / "prompts")
    alice = mail_lab.new_user("alice")
    quinn = await make_quinn(f'[prompts]\ndir = "{admin}"\n'
                             "[scheduler]\nstartup_delay_s = 3600\nsession_close_after_min = 0.01\n")  # fmt: skip
    review = {"summary": "Alice told Quinn she lives in Lisbon and works as a nurse.",
              "state": {"recent_goal_and_status": "settling in Lisbon"}}  # fmt: skip
    brain.learn["I live in Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    brain.reply = lambda r: Json(review) if r.purpose == "SessionReview" else Text(f"Reply {r.purpose}.")

    await quinn.send(alice, "Hello", "I live in Lisbon and work as a nurse.", date=DAY0)
    [first] = quinn.replies(alice, 1)
    assert first.get_body(("plain",)).get_content().startswith("Reply reply.")
    stored = quinn.query("SELECT content FROM memories WHERE user_id = ? AND valid_to IS NULL", (alice,))
    assert stored == [("Alice lives in Lisbon.",)]  # the extraction call was answered as one

    await quinn.send(alice, "Dinner", "Any tips for a dinner out tonight?", date=DAY0 + timedelta(days=1))
    second = quinn.replies(alice, 2)[1]
    assert second.get_body(("plain",)).get_content().startswith("Reply reply.")
    assert second["Subject"] == "Re: Dinner"
    prompt = brain.prompt("Any tips for a dinner out tonight?")  # a new thread: the memory came from the store
    assert "Alice lives in Lisbon." in prompt
    assert "FRESH MESSAGE" not in prompt and "Fresh message" in prompt  # the reworded reply.j2 wrote it
    sessions = quinn.query("SELECT count(DISTINCT session_id) FROM messages WHERE user_id = ?", (alice,))
    assert sessions == [(2,)]

    await asyncio.sleep(1.0)  # both sessions go quiet (session_close_after_min = 0.6 s)
    assert quinn.app.scheduler is not None
    outcome = await quinn.app.scheduler.run_job("session_close", force=True)
    assert outcome.status == "ok" and outcome.counts["processed"] == 2, outcome
    summaries = quinn.query("SELECT summary FROM conversation_summaries WHERE user_id = ?", (alice,))
    assert summaries == [(review["summary"],)] * 2
    assert quinn.query("SELECT recent_goal_and_status FROM user_state WHERE user_id = ?", (alice,)) == [
        ("settling in Lisbon",)
    ]

    requests = [r for r in brain.server.requests if r.kind != "embeddings"]
    assert {r.purpose for r in requests} == {"Extraction", "reply", "SessionReview"}
    sentences = original_sentences()
    leaked = {s for r in requests for s in sentences if s in r.text}
    assert not leaked, f"a request still holds the original templates' wording: {sorted(leaked)[:3]}"
