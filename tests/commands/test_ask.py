"""`quinn ask --as ADDRESS "..."` (issue 19): one message from the terminal through the daemon's agent, memory and
prompts, with the scripted model and the real embedding model; no IMAP, no SMTP, no mail password."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from quinn.lab.wait import wait_for
from tests.lab.brain import NOTHING, Brain
from tests.lab.daemon import LabConfig
from tests.lab.llm_server import RecordedRequest, ScriptedLLM, Text
from tests.lab.mails import query
from tests.lab.smtp import MailLab

ALICE = "alice@example.org"


def ask(config: LabConfig, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    # Only the model's key: the IMAP password stays out of the environment (ask touches no mailbox).
    env = {**os.environ, "QUINN_TEST_LLM_KEY": config.env["QUINN_TEST_LLM_KEY"], "HF_HUB_OFFLINE": "1"}
    env.pop("QUINN_TEST_IMAP_PASSWORD", None)
    return subprocess.run([sys.executable, "-m", "quinn", "ask", "-c", str(config.path), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


def memories(config: LabConfig, user: str) -> list[str]:
    rows = query(config.db_path, "SELECT content FROM memories WHERE user_id = ? AND active = 1 ORDER BY id", (user,))
    return [r[0] for r in rows]


@pytest.mark.timeout(600)  # three quinn processes, each loading the embedder: minutes on a loaded 2-core machine
def test_ask_learns_and_then_answers_with_memory(
    lab_config: Callable[..., LabConfig], brain: Brain, mail_lab: MailLab
) -> None:
    config = lab_config()
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    first = ask(config, "--as", "Alice@Example.org", "I live in Lisbon and work as a nurse at the city hospital.")
    assert first.returncode == 0, first.stderr
    assert memories(config, ALICE) == ["Alice lives in Lisbon."]  # stored under the canonical address
    assert re.search(r"Learnt:\n  \[memory:\d+\] \(fact\) Alice lives in Lisbon\.", first.stdout), first.stdout
    assert "Noted, thank you." in first.stdout  # the scripted model's reply

    brain.reply = lambda request: Text("Try the tascas near your home.")
    second = ask(config, "--as", ALICE, "--json", "-", stdin="Where should I go for dinner tonight?")
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout)
    assert answer["user"] == ALICE and answer["reply"].startswith("Try the tascas")
    [used] = answer["memories_used"]
    assert used["content"] == "Alice lives in Lisbon."
    prompt = brain.prompt("dinner tonight")  # the reply prompt the model received carries the stored memory
    assert f"[memory:{used['id']}]" in prompt and "Alice lives in Lisbon." in prompt
    assert answer["learnt"] == [] and memories(config, ALICE) == ["Alice lives in Lisbon."]

    # Someone else asking sees none of Alice's memory.
    third = ask(config, "--as", "bob@example.org", "--json", "Where should I go for dinner tonight, any idea?")
    assert json.loads(third.stdout)["memories_used"] == []
    assert "Alice lives in Lisbon." not in brain.prompts("any idea?")[-1]
    # Nothing went to a mailbox: the asked messages and replies live only in the database.
    assert mail_lab.smtp.received == []
    rows = query(config.db_path, "SELECT direction, user_id FROM messages ORDER BY id")
    assert rows == [("in", ALICE), ("out", ALICE)] * 2 + [("in", "bob@example.org"), ("out", "bob@example.org")]
    # Each question is a thread of its own, named by its first words (issue 34: all joined one thread).
    subjects = query(config.db_path, "SELECT subject FROM sessions WHERE user_id = ? ORDER BY created_at", (ALICE,))
    assert [s for (s,) in subjects] == ["I live in Lisbon and work as a nurse at the city hospital.",
                                        "Where should I go for dinner tonight?"]  # fmt: skip


@pytest.mark.timeout(300)
def test_ask_shows_the_reply_before_learning_ends_and_keeps_warnings_off_the_terminal(
    lab_config: Callable[..., LabConfig], brain: Brain, llm_server: ScriptedLLM
) -> None:
    """Issue 34: the reply is printed while extraction still runs; the model's fallback warning goes to the log."""
    config = lab_config()
    llm_server.like_llama_cpp = True  # json_schema refused: a WARNING, which the terminal must not show
    extracting, release = threading.Event(), threading.Event()

    def slow_extraction(request: RecordedRequest) -> dict[str, Any]:
        extracting.set()
        release.wait(15)  # under the lab's llm timeout: the extraction then succeeds
        return {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}

    brain.learn["Lisbon"] = slow_extraction
    env = {**os.environ, "QUINN_TEST_LLM_KEY": config.env["QUINN_TEST_LLM_KEY"], "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "quinn", "ask", "-c", str(config.path), "--as", ALICE, "I live in Lisbon."]
    out: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        reader = threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True)
        reader.start()
        try:
            assert extracting.wait(120), "no extraction request"
            wait_for(lambda: any("Noted, thank you." in line for line in out), "the reply printed", 10,
                     interval_s=0.05, log=lambda: "".join(out))  # fmt: skip
            assert proc.poll() is None and not any("Learnt" in line for line in out)  # still learning
        finally:
            release.set()
        assert proc.wait(timeout=120) == 0
        reader.join(10)
        err = proc.stderr.read() if proc.stderr else ""
    printed = "".join(out)
    assert re.search(r"Learnt:\n  \[memory:\d+\] \(fact\) Alice lives in Lisbon\.", printed), printed
    assert "reply in " in err and "learning from the message" in err  # progress, on stderr
    assert "WARNING" not in err and "refused structured output" not in err, err
    log = config.db_path.parent / "quinn-ask.log"
    assert "refused structured output as json_schema" in log.read_text()
    assert f"warning(s) in {log}; --verbose shows them here" in err


def test_ask_without_a_model_keeps_nothing_and_says_what_to_check(
    lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM
) -> None:
    config = lab_config()
    llm_server.stop()
    failed = ask(config, "--as", ALICE, "Any dinner ideas?")
    assert failed.returncode != 0
    assert "no reply:" in failed.stderr and "nothing of the message was kept" in failed.stderr, failed.stderr
    assert "quinn check" in failed.stderr
    for table in ("messages", "sessions", "session_ids", "passages"):
        assert query(config.db_path, f"SELECT count(*) FROM {table}") == [(0,)], table


def test_ask_refuses_what_is_not_an_address(lab_config: Callable[..., LabConfig], brain: Brain) -> None:
    result = ask(lab_config(), "--as", "alice", "hello")
    assert result.returncode == 2
    assert "--as 'alice' is not a mail address" in result.stderr
