"""Issue 18's knowledge-base acceptance through the real processes: the admin runs ``quinn kb add FILE`` (a
subprocess) while ``quinn run`` (another) serves the lab's Dovecot, aiosmtpd and the scripted model; a user's
question then reaches the model with the planted fact and its ``[doc:NAME p.N]`` citation. The same file added
and searched on a libSQL server (sqld) with the CLI. tests/documents/test_kb_lab.py is the in-process version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from quinn.lab.wait import wait_for
from tests.documents.test_kb import config_text
from tests.lab.brain import Brain
from tests.lab.daemon import LabConfig
from tests.lab.documents import make_pdf
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import Text
from tests.proof.test_purge import marker, reply_to


def quinn_cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m quinn ARGS -c CONFIG`` as an operator runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "quinn", args[0], args[1], "-c", str(config), *args[2:]],
        env={**os.environ, **env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def handbook(fact: str) -> bytes:
    return make_pdf(["Staff handbook of Example Ltd. Welcome aboard.",
                     f"Network access.\nThe guest wifi network is ExampleGuest; its password is {fact}."])  # fmt: skip


def test_a_file_added_by_quinn_kb_add_reaches_a_reply_of_the_running_daemon(
    dovecot, smtp_lab, llm_server, lab_config, quinn_daemon, users, tmp_path: Path
):
    alice = users("alice")
    fact, name = marker("wifi"), f"{marker('book')}.pdf"
    (tmp_path / name).write_bytes(handbook(fact))
    config: LabConfig = lab_config()
    brain = Brain(llm_server)
    brain.reply = lambda request: Text("It is in the handbook.")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    added = quinn_cli(config.path, config.env, "kb", "add", str(tmp_path / name), "--json")
    assert added.returncode == 0, added.stderr[-2000:]
    assert [(r["name"], r["status"]) for r in json.loads(added.stdout)] == [(name, "added")]

    _mid, raw = build_mail(alice, config.address, "Getting online", "What is the password of the guest wifi?",
                           message_id="<kb-e2e-1@example.test>")  # fmt: skip
    smtp_lab.send(alice, [config.address], raw)
    wait_for(lambda: reply_to(dovecot, alice, "<kb-e2e-1@example.test>"), "the reply", timeout_s=90, log=daemon.log)
    prompt = brain.prompt("What is the password of the guest wifi?")
    assert f"[doc:{name} p.2] (the knowledge base) Network access. The guest wifi network is ExampleGuest; its" \
           f" password is {fact}." in prompt  # fmt: skip
    assert daemon.terminate() == 0


def test_kb_add_and_search_on_a_libsql_server(sqld, tmp_path: Path):
    fact, name = marker("wifi"), f"{marker('book')}.pdf"
    (tmp_path / name).write_bytes(handbook(fact))
    config = tmp_path / "quinn.toml"
    config.write_text(config_text(sqld.url, "local"))

    added = quinn_cli(config, {}, "kb", "add", str(tmp_path / name), "--json")
    assert added.returncode == 0, added.stderr[-2000:]
    found = quinn_cli(config, {}, "kb", "search", "guest wifi password", "--json")
    assert found.returncode == 0, found.stderr[-2000:]
    hits = json.loads(found.stdout)
    assert hits[0]["citation"] == f"[doc:{name} p.2]"
    assert fact in hits[0]["content"]
    assert quinn_cli(config, {}, "kb", "remove", name, "--json").returncode == 0  # the session's sqld is shared
