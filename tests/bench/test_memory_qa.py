"""The memory QA benchmark (bench/memory_qa.py): its data set keeps the shape issue 21 asks for, and the whole
run works end to end through the lab with the scripted model.

Quality figures are the real model's and live in bench/README.md; nothing here asserts a model's quality. What
is asserted are properties of Quinn and of the harness: a stateless prompt never holds a person's answer, the
whole history does, and what Quinn stored reaches Quinn's own prompt.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench import memory_qa
from bench.memory_qa_data import CATEGORIES, HISTORY_MAILS, SEED, answered, build, date_patterns
from quinn.documents.extract import extract
from tests.lab.brain import EXTRACTION, new_mail
from tests.lab.llm_server import REPLY, Json, RecordedRequest, ScriptedLLM


def test_the_data_set_has_five_people_and_120_questions_in_six_categories() -> None:
    scripts = build()
    assert len(scripts) == 5 and all(len(s.mails) == HISTORY_MAILS for s in scripts)
    questions = [q for s in scripts for q in s.questions]
    assert len(questions) == 120
    assert Counter(q.category for q in questions) == {"single": 25, "long_ago": 20, "updated": 20, "time": 20,
                                                      "multi_hop": 15, "attachment": 20}  # fmt: skip
    assert set(CATEGORIES) == {q.category for q in questions}
    for script in scripts:
        history = "\n".join([m.body for m in script.mails] + [a.text for m in script.mails for a in m.attachments])
        others = "\n".join(m.body for s in scripts if s is not script for m in s.mails)
        dates = [m.date for m in script.mails]
        assert dates == sorted(dates) and (dates[-1] - dates[0]).days >= 140  # months of mail
        for q in script.questions:
            assert answered(history, q.gold), (script.first, q.kind)  # the answer was said...
            assert not answered(q.text, q.gold), (script.first, q.kind)  # ...and the question does not say it
            for index in q.mails:
                statement_mail = script.mails[index].body
                assert q.category != "long_ago" or index < 2
                assert q.category != "single" or index >= HISTORY_MAILS - 4
                assert q.category in ("updated", "multi_hop", "attachment") or answered(statement_mail, q.gold)
            if q.category == "updated":  # the old value was said first, the new one later
                early, late = (script.mails[i].body for i in q.mails)
                assert answered(early, q.stale) and answered(late, q.gold) and not answered(early, q.gold)
            if q.category == "multi_hop":  # one thread holds the answer, the other the link to the question
                early, late = (script.mails[i].body for i in q.mails)
                assert answered(early, q.gold) != answered(late, q.gold)
            if q.category == "attachment":  # only the file holds it, and Quinn's own reader finds it there
                (index,) = q.mails
                assert not answered("\n".join(m.body for m in script.mails), q.gold), (script.first, q.kind)
                files = script.mails[index].attachments
                assert any(answered(extract(a.filename, a.content_type, a.data).text, q.gold) for a in files)
            # Nobody else states this person's one-off answers about themselves.
            if q.category in ("single", "long_ago") and q.kind in ("booking", "locker"):
                assert not answered(others, q.gold)


def test_the_data_set_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    first, again, other = build(), build(), build(seed=7)
    assert [m.body for s in first for m in s.mails] == [m.body for s in again for m in s.mails]
    assert [m.body for s in first for m in s.mails] != [m.body for s in other for m in s.mails]
    assert [a.text for s in first for m in s.mails for a in m.attachments] == [
        a.text for s in again for m in s.mails for a in m.attachments
    ]


def test_dates_count_however_they_are_written() -> None:
    from datetime import date

    patterns = date_patterns(date(2027, 3, 4))
    for text in ("on 4 March", "March 4th", "the 4th of March", "2027-03-04", "2027-03-04T08:00", "04/03", "March 04"):
        assert answered(f"It is {text}.", patterns), text
    for text in ("14 March", "March 24", "4 May", "2027-03-14", "2027-03-041"):
        assert not answered(f"It is {text}.", patterns), text


def statements_as_memories(request: RecordedRequest) -> Json | None:
    """Scripted extraction: every first-person sentence of the mail becomes a memory, word for word. Replies get
    the default scripted text, which never holds an answer."""
    if request.purpose != EXTRACTION:
        return None
    mail = new_mail(request)
    sentences = re.split(r"(?<=[.!?])\s+", mail)
    mine = [s.strip() for s in sentences if re.match(r"(I|My|Our|We)\b", s.strip())]
    return Json({"new": [{"content": s, "type": "fact"} for s in mine], "updated": [], "contradicted": []})


def test_the_benchmark_runs_through_the_lab_and_memory_reaches_quinns_prompt(
    tmp_path: Path, dovecot, llm_server: ScriptedLLM
) -> None:
    llm_server.responder = statements_as_memories
    memory_qa.main(["--users", "1", "--questions", "4", "--base-url", llm_server.openai_base_url, "--out",
                    str(tmp_path), "--name", "qa"])  # fmt: skip
    report = json.loads((tmp_path / "qa.json").read_text())
    assert (tmp_path / "qa.md").read_text().startswith("# Memory QA")
    assert (tmp_path / "qa.png").read_bytes().startswith(b"\x89PNG")
    rows = report["per_question"]
    assert Counter(r["condition"] for r in rows) == {"quinn": 4, "no_memory": 4, "full_history": 4}
    assert report["history"]["mails"] == HISTORY_MAILS and report["history"]["memories_per_user"][0] > 0
    summary = report["summary"]
    # A stateless prompt never holds the person's answer; their whole (short) history always does, the files it
    # carried included (one of the four questions asks about an attached file).
    assert "attachment" in {r["category"] for r in rows}
    assert summary["no_memory"]["overall"]["recall_in_prompt"] == 0
    assert summary["full_history"]["overall"]["recall_in_prompt"] == 1
    # What the scripted extraction stored reaches Quinn's prompt (how much of it is the real model's figure).
    assert summary["quinn"]["overall"]["recall_in_prompt"] > 0
    assert all(r["tokens_in"] > 0 for r in rows)
    # The questions are probes: answered, never learnt from (no structured call, as the gate and the extraction
    # are, carries a question).
    asked = [q.text for q in build(SEED, 1)[0].questions[:4]]
    calls = [r for r in llm_server.requests if r.kind == "chat" and any(text in r.text for text in asked)]
    assert calls and not [r for r in calls if "response_format" in r.body_json]
    # ... and each is asked of the history alone: no earlier question reaches a later one's prompt.
    replies = [r for r in calls if r.purpose == REPLY]
    for n, text in enumerate(asked[1:], start=1):
        for prompt in [r.text for r in replies if text in r.text]:
            assert not [earlier for earlier in asked[:n] if earlier in prompt], prompt
    assert [r for r in llm_server.requests if "response_format" in r.body_json]  # which the history had

    # A run in parts: the second person alone (--skip 1), then one result from both, recomputed per question.
    memory_qa.main(["--users", "2", "--skip", "1", "--questions", "2", "--base-url", llm_server.openai_base_url,
                    "--out", str(tmp_path), "--name", "qa2", "--no-plot"])  # fmt: skip
    parts = [str(tmp_path / "qa.json"), str(tmp_path / "qa2.json")]
    merged = memory_qa.main(["--merge", *parts, "--out", str(tmp_path), "--name", "both", "--no-plot"])
    assert merged["data"]["users"] == 2 and merged["data"]["questions"] == 6
    assert Counter(r["condition"] for r in merged["per_question"]) == {"quinn": 6, "no_memory": 6, "full_history": 6}
    assert merged["history"]["mails"] == 2 * HISTORY_MAILS and len(merged["history"]["memories_per_user"]) == 2
    assert merged["summary"]["full_history"]["overall"]["recall_in_prompt"] == 1
    for bad in (str(tmp_path / "missing.json"), str(tmp_path / "qa.md")):  # not there; not a result
        with pytest.raises(SystemExit):
            memory_qa.main(["--merge", bad, "--out", str(tmp_path), "--name", "bad", "--no-plot"])
    assert not (tmp_path / "bad.json").exists()
    with pytest.raises(SystemExit, match="more than one part"):
        memory_qa.main(["--merge", parts[0], parts[0], "--out", str(tmp_path), "--name", "twice", "--no-plot"])
