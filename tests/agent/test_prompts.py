"""Prompt templates for admins: `quinn prompts check|render`, edits picked up, broken edits rejected, SIGHUP,
and `quinn eval extraction` against the scripted server."""

from __future__ import annotations

import logging
import os
import re
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quinn.agent.prompts import TEMPLATE_NAMES, PromptStore
from quinn.agent.samples import sample_variables
from quinn.cli import main
from quinn.db import Database
from quinn.errors import TemplateError
from quinn.memory.store import MemoryStore
from tests.lab.brain import Brain, new_mail
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import Json, RecordedRequest, ScriptedLLM, Text

EXTEND_REPLY = """{% extends "default/reply.j2" %}
{% block system %}{{ super() }}
Sign every answer as "Quinn, __MARK__".
{% endblock %}
"""


def write(path: Path, text: str) -> Path:
    """Write and move the mtime forward, so a reload sees the change even within one clock tick."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    if path.stat().st_mtime_ns <= before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
    return path


def test_admin_template_extends_the_default_and_edits_are_picked_up(tmp_path: Path) -> None:
    admin = tmp_path / "prompts"
    admin.mkdir()
    write(admin / "reply.j2", EXTEND_REPLY.replace("__MARK__", "v1"))
    store = PromptStore(admin, samples=sample_variables)
    first = store.render("reply", sample_variables()["reply"])
    assert 'Sign every answer as "Quinn, v1".' in first.system and "You are Quinn" in first.system
    write(admin / "reply.j2", EXTEND_REPLY.replace("__MARK__", "v2"))
    second = store.render("reply", sample_variables()["reply"])
    assert 'Quinn, v2".' in second.system and second.version != first.version


@pytest.mark.parametrize(
    ("broken", "line", "why"),
    [
        ('{% extends "default/reply.j2" %}\n{% block system %}\n{% if %}\n{% endblock %}\n', 3, "Expected an expr"),
        ('{% extends "default/reply.j2" %}\n{% block system %}\n\n{{ usr.address }}\n{% endblock %}\n', 4,
         "'usr' is undefined"),
        ("{% block system %}x{% endblock %}\n", None, "must define the blocks user"),
    ],
)  # fmt: skip
def test_broken_edit_is_rejected_with_file_and_line_and_the_last_good_version_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: str, line: int | None, why: str
) -> None:
    admin = tmp_path / "prompts"
    admin.mkdir()
    path = write(admin / "reply.j2", EXTEND_REPLY.replace("__MARK__", "good"))
    store = PromptStore(admin, samples=sample_variables)
    good = store.render("reply", sample_variables()["reply"])
    write(path, broken)
    with caplog.at_level(logging.ERROR, logger="quinn.agent.prompts"):
        kept = store.render("reply", sample_variables()["reply"])
    assert kept.version == good.version and 'Quinn, good".' in kept.system
    [record] = [r for r in caplog.records if "rejected, keeping the last good version" in r.getMessage()]
    assert why in record.getMessage() and str(path) in record.getMessage()
    if line is not None:
        assert f"{path}:{line}:" in record.getMessage()
    # Without a last good version (a fresh start), the same file is an error naming file and line.
    with pytest.raises(TemplateError) as caught:
        PromptStore(admin, samples=sample_variables).load("reply")
    assert why in str(caught.value) and (line is None or f"{path}:{line}" in str(caught.value))


def test_prompts_check_cli(tmp_path: Path, lab_config, capsys: pytest.CaptureFixture[str]) -> None:
    config = lab_config(extra=f'[prompts]\ndir = "{tmp_path / "prompts"}"\n')
    (tmp_path / "prompts").mkdir()
    os.environ.update(config.env)
    try:
        assert main(["prompts", "check", "-c", str(config.path)]) == 0
        out = capsys.readouterr().out
        assert all(f"ok      {name}" in out for name in TEMPLATE_NAMES), out
        write(tmp_path / "prompts" / "digest.j2", "{% block system %}{{ groups | nosuchfilter }}{% endblock %}\n"
              "{% block user %}{% endblock %}\n")  # fmt: skip
        write(tmp_path / "prompts" / "summarize.j2", "{% block system %}\n{{ mesages }}{% endblock %}\n"
              "{% block user %}{% endblock %}\n")  # fmt: skip
        assert main(["prompts", "check", "-c", str(config.path)]) == 1
        out = capsys.readouterr().out
        assert f"FAILED  digest       {tmp_path / 'prompts' / 'digest.j2'}:1: No filter named 'nosuchfilter'" in out
        assert f"FAILED  summarize    {tmp_path / 'prompts' / 'summarize.j2'}:2: 'mesages' is undefined" in out
        assert "ok      reply" in out
    finally:
        for key in config.env:
            os.environ.pop(key, None)


def test_prompts_render_cli_previews_with_the_users_real_memory(lab_config, capsys) -> None:
    config = lab_config(extra='[embeddings]\nbackend = "none"\n')
    store = MemoryStore(Database.open(str(config.db_path)), None)
    store.add("alice@example.org", "Alice prefers answers in Spanish.", type="preference")
    store.add("alice@example.org", "Alice runs Python on Linux.", scope="episodic")
    store.add("bob@example.org", "Bob runs Windows.", scope="episodic")
    store.close()
    os.environ.update(config.env)
    try:
        code = main(["prompts", "render", "reply", "--user", "Alice@Example.org", "--text", "Which OS do I run?",
                     "-c", str(config.path)])  # fmt: skip
    finally:
        for key in config.env:
            os.environ.pop(key, None)
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("# reply@") and "=== system ===" in out and "=== user ===" in out
    assert "Alice prefers answers in Spanish." in out and "Alice runs Python on Linux." in out
    assert "Which OS do I run?" in out and "Bob" not in out


def test_sighup_reloads_templates_in_the_running_daemon(tmp_path, mail_lab, lab_config, llm_server: ScriptedLLM,
                                                        quinn_daemon) -> None:  # fmt: skip
    admin = tmp_path / "admin-prompts"
    admin.mkdir()
    write(admin / "reply.j2", EXTEND_REPLY.replace("__MARK__", "v1"))
    config = lab_config(extra=f'[prompts]\ndir = "{admin}"\n')
    brain = Brain(llm_server)
    alice = mail_lab.new_user("alice")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    def ask(n: int) -> str:
        _mid, raw = build_mail(alice, config.address, f"Question {n}", f"Question number {n} for you.")
        mail_lab.smtp.send(alice, config.address, raw)
        mail_lab.dovecot.wait_for_messages(alice, n, timeout_s=60)
        return brain.prompt(f"Question number {n}")

    assert 'Quinn, v1".' in ask(1)
    write(admin / "reply.j2", EXTEND_REPLY.replace("__MARK__", "v2"))
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("prompts reloaded", timeout_s=30)
    assert 'Quinn, v2".' in ask(2)
    write(admin / "reply.j2", '{% extends "default/reply.j2" %}\n{% block system %}{% if %}{% endblock %}\n')
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for_log("rejected, keeping the last good version", timeout_s=30)
    assert 'Quinn, v2".' in ask(3)  # the broken edit changed nothing, and the daemon kept running
    assert daemon.terminate() == 0
    assert f"{admin / 'reply.j2'}:2:" in daemon.log()


def extraction_judge(request: RecordedRequest) -> Json | Text:
    """Answers the eval's extraction prompts: mostly right, one miss and one invented memory."""
    mail = new_mail(request)
    answers = {
        "casual is fine": ["Alice is fine with casual answers."],  # before "formal": this mail has both words
        "formal": ["Alice wants answers in Spanish.", "Alice wants formal answers."],
        "Python and deploy": ["Alice writes Python and deploys on Linux servers."],
        "Node": ["Alice moved to Node and runs everything on Docker."],
        "birthday": ["Alice's birthday is October 10."],
        # Invented: the cat (a name the mail does not have: cut before scoring, as the daemon cuts it), and the
        # exotic animals (most words unsupported: the scorer's hallucination).
        "dog Rex": [
            "Alice has a dog named Rex.",
            "Alice owns a cat named Tom.",
            "Alice owns many exotic animals besides the dog.",
        ],
        "Project Alpha": [],  # a miss
        "offsite": ["Alice will join the offsite in Lisbon."],
        "As you know": ["Alice deploys on Linux servers with Python."],  # restates a known memory
        "concise": ["Alice wants concise answers."],
    }
    for trigger, contents in answers.items():
        if trigger in mail:
            return Json({"new": [{"content": c, "type": "fact"} for c in contents], "updated": [], "contradicted": []})
    return Json({"new": [], "updated": [], "contradicted": []})


def test_eval_extraction_smoke_against_the_scripted_server(lab_config, llm_server: ScriptedLLM, capsys) -> None:
    config = lab_config()
    llm_server.responder = extraction_judge
    os.environ.update(config.env)
    try:
        assert main(["eval", "extraction", "--model", "ollama/qwen/qwen3-8b", "-c", str(config.path)]) == 0
    finally:
        for key in config.env:
            os.environ.pop(key, None)
    out = capsys.readouterr().out
    # The harness, not the judge's quality: every case ran through the daemon's gate and call ("thanks!" is
    # skipped by the gate), and the scorer found each error the judge planted: a miss, an invented memory, a
    # memory restating a known one. The headline figures follow from the judge's answers, so they prove nothing
    # here; the real model's are in bench/results/extraction-*.md (bench/extraction_real.py).
    assert "cases 11, gate skipped 1, extracted 11, expected 10, model ollama/qwen/qwen3-8b" in out
    for name in ("precision", "recall", "hallucination rate", "duplicate rate"):
        assert re.search(rf"^{name} +[01]\.\d\d$", out, re.M), name
    assert "alpha-deadline: missed 'alpha + march 15'" in out
    assert "dog-rex: hallucinated 'Alice owns many exotic animals besides the dog.'" in out
    assert "a cat named Tom" not in out  # not in the mail: not what Quinn would store
    assert "restates-known: duplicate 'Alice deploys on Linux servers with Python.'" in out
    assert {r.path for r in llm_server.requests} == {"/v1/chat/completions"}
    assert {r.model for r in llm_server.requests} == {"qwen/qwen3-8b"}


@pytest.mark.parametrize("args", [["prompts", "check"], ["jobs", "list"]])
def test_commands_that_touch_no_server_need_no_secret(lab_config, args: list[str]) -> None:
    """prompts check and jobs list read templates and the run log: no IMAP password, no API key (issue 19)."""
    import subprocess
    import sys

    config = lab_config(extra='[embeddings]\nbackend = "none"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUINN_TEST_")}
    result = subprocess.run([sys.executable, "-m", "quinn", *args, "-c", str(config.path)], capture_output=True,
                            text=True, timeout=120, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_extraction_instructions_are_the_same_for_every_mail_of_a_person() -> None:
    # A local server (llama.cpp) re-reads only what follows the longest prefix the previous request shared: the
    # instructions and the ~1,700-token schema after them are read once for a person's mails, not once a mail
    # (issue 32's import: measured 62 s cold, 10 s with the prefix kept, on the 1.5B and one core). So nothing
    # that changes from mail to mail (its date, its text) may be in the system part; the date is with the mail.
    from quinn.agent.extract import extract_variables
    from quinn.mailbox import parse_email

    store = PromptStore()
    rendered = []
    for n, date in enumerate((datetime(2024, 1, 8, 9, tzinfo=UTC), datetime(2024, 7, 2, 18, 30, tzinfo=UTC))):
        raw = build_mail("ana@example.org", "q@example.org", f"Note {n}", f"I moved to city {n}.", date=date)[1]
        email = parse_email(raw)
        rendered.append(store.render("extract", extract_variables("ana@example.org", email, [], [])))
    assert rendered[0].system == rendered[1].system
    assert "2024-01-08T09:00:00+00:00" in rendered[0].user and "2024-07-02T18:30:00+00:00" in rendered[1].user
