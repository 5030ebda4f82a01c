"""SIGHUP: every reloadable section and key reaches the next action, through the composition root.

For each one the running (in-process) Quinn gets a changed quinn.toml, ``reload`` applies it, and the next mail
(or the next wait) proves the new value is the one in use: what the model received, what was sent, what the
ledger says. Restart-only keys are reported and left alone.
"""

from __future__ import annotations

import email
import email.policy
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quinn.config import load_config
from quinn.reload import RELOADABLE_KEYS, RELOADABLE_SECTIONS
from tests.lab.mails import plain_model

pytestmark = pytest.mark.timeout(120)

QUIET = '[embeddings]\nbackend = "none"\n'


def _edit(quinn: Any, old: str, new: str) -> None:
    """Change one line of the running Quinn's quinn.toml (it must be there) and reload it."""
    path: Path = quinn.config.path
    text = path.read_text()
    assert old in text, f"{old!r} not in the lab config"
    path.write_text(text.replace(old, new, 1))
    quinn.app.reload(load_config(path, env=quinn.config.env))


def _replies(llm_server: Any) -> list[Any]:
    """The reply requests the model received (not extraction, not embeddings)."""
    return [r for r in llm_server.requests_of("chat") if "json_schema" not in str(r.body_json)
            and not any(n.startswith("__mirascope") for n in r.tool_names)]  # fmt: skip


async def _policy(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    await quinn.send(alice, "First", "Hello")
    _edit(quinn, "[policy]\n", "[policy]\nmax_replies_per_sender_per_hour = 1\n")
    await quinn.send(alice, "Second", "Hello again")
    states = [s for (s,) in quinn.query("SELECT state FROM mail_state ORDER BY uid")]
    assert states == ["replied", "deferred"], "the new per-sender cap did not reach the next mail"


async def _memory(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    quinn.app.store.add(alice, "Alice keeps bees on her roof in Porto")
    await quinn.send(alice, "Bees", "How are my bees doing?")
    assert "[memory:" in _replies(llm_server)[-1].text
    _edit(quinn, "[policy]\n", "[memory]\ntoken_budget = 0\n\n[policy]\n")
    await quinn.send(alice, "Bees again", "And my bees?")
    assert "[memory:" not in _replies(llm_server)[-1].text, "the new memory budget did not reach the next prompt"


async def _prompts(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    new_dir = quinn.config.path.parent / "prompts-v2"  # an admin directory: its reply.j2 overrides the default
    new_dir.mkdir()
    default = (quinn.app.prompts.default_dir / "reply.j2").read_text()
    marked = default.replace("{% block system %}\n", "{% block system %}\nReloaded-template-marker-7731.\n", 1)
    assert marked != default
    (new_dir / "reply.j2").write_text(marked)
    text = quinn.config.path.read_text()
    if "[prompts]" in text:
        text = re.sub(r"(?m)^dir = .*$", f'dir = "{new_dir}"', text)
    else:
        text += f'\n[prompts]\ndir = "{new_dir}"\n'
    quinn.config.path.write_text(text)
    quinn.app.reload(load_config(quinn.config.path, env=quinn.config.env))
    await quinn.send(alice, "Hello", "Anyone there?")
    assert "Reloaded-template-marker-7731" in _replies(llm_server)[-1].text


async def _documents(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    notes = ("notes.txt", "text/plain", b"The locker code is 4471. " * 120)  # 3 kB
    await quinn.send(alice, "Notes", "My notes are attached.", attachments=(notes,))
    assert "The locker code is 4471." in _replies(llm_server)[-1].text
    _edit(quinn, "[policy]\n", "[documents]\nmax_file_kb = 1\n\n[policy]\n")
    await quinn.send(alice, "Notes again", "My notes, again.", attachments=(notes,))
    prompt = _replies(llm_server)[-1].text
    assert "more than the limit of 1 kB" in prompt and "The locker code is 4471." not in prompt.split("Notes again")[-1]


async def _budget(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    await quinn.send(alice, "Long", "A long mail about my garden. " * 200)
    assert "more characters, not shown here" not in _replies(llm_server)[-1].text
    _edit(quinn, "[policy]\n", "[budget]\nmail_tokens = 200\n\n[policy]\n")
    await quinn.send(alice, "Long again", "Another long mail about my garden. " * 200)
    assert "more characters, not shown here" in _replies(llm_server)[-1].text, "the new budget did not reach a prompt"


async def _llm(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    _edit(quinn, 'model = "openai/gpt-test"', 'model = "openai/gpt-reloaded"')
    await quinn.send(alice, "Hello", "Which model answers?")
    assert _replies(llm_server)[-1].model == "gpt-reloaded"


async def _smtp(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    _edit(quinn, "[smtp]\n", '[smtp]\nfrom_name = "Quinn Reloaded"\n')
    await quinn.send(alice, "Hello", "Who writes back?")
    [raw] = mail_lab.dovecot.messages(alice)
    assert "Quinn Reloaded" in email.message_from_bytes(raw, policy=email.policy.default)["From"]


async def _log_level(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    _edit(quinn, 'log_level = "INFO"', 'log_level = "DEBUG"')
    assert logging.getLogger().level == logging.DEBUG


async def _poll_interval(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    _edit(quinn, "poll_interval_s = 0.5", "poll_interval_s = 0.25")
    assert await quinn.app._wait_s() == 0.25


async def _max_message_kb(quinn: Any, mail_lab: Any, llm_server: Any) -> None:
    alice = mail_lab.new_user("alice")
    _edit(quinn, "[imap]\n", "[imap]\nmax_message_kb = 1\n")
    await quinn.send(alice, "Long", "A long mail. " * 200)
    [(state, reason)] = quinn.query("SELECT state, reason FROM mail_state")
    assert state == "quarantined" and "1 KiB" in reason


CASES: dict[str, Callable[..., Any]] = {
    "policy": _policy, "memory": _memory, "documents": _documents, "budget": _budget, "prompts": _prompts,
    "llm": _llm, "smtp": _smtp,
    "log_level": _log_level, "imap.poll_interval_s": _poll_interval, "imap.max_message_kb": _max_message_kb,
}  # fmt: skip


def test_every_reloadable_section_and_key_has_a_case() -> None:
    """A section made reloadable later gets its case here, or this fails."""
    assert set(CASES) == set(RELOADABLE_SECTIONS) | set(RELOADABLE_KEYS)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_reload_reaches_the_next_action(name, make_quinn, mail_lab, llm_server) -> None:
    llm_server.responder = plain_model
    root = logging.getLogger()
    level = root.level
    quinn = await make_quinn(QUIET)
    try:
        await CASES[name](quinn, mail_lab, llm_server)
    finally:
        root.setLevel(level)


async def test_restart_only_keys_are_reported_and_left_alone(make_quinn, mail_lab, llm_server) -> None:
    llm_server.responder = plain_model
    quinn = await make_quinn(QUIET)
    path = quinn.config.path
    folder = quinn.app.config.imap.folder
    path.write_text(path.read_text().replace("[imap]\n", '[imap]\nfolder = "Elsewhere"\n', 1))
    plan = quinn.app.reload(load_config(path, env=quinn.config.env))
    assert "imap.folder" in plan.needs_restart and quinn.app.config.imap.folder == folder
