"""``quinn memory …`` against a real database file: tables for people, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from quinn import cli
from quinn.agent import audit_log
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.embed import LocalEmbedder, OpenAIEmbedder
from tests.agent.test_forgetting import berlin_rows, written_from_berlin
from tests.lab.llm_server import ScriptedLLM

ALICE = "alice@example.test"
CONFIG = """
[imap]
host = "127.0.0.1"
username = "quinn@example.test"
password_env = "QUINN_TEST_IMAP_PASSWORD"
[smtp]
host = "127.0.0.1"
from_address = "quinn@example.test"
[llm]
model = "openai/gpt-test"
[database]
url = "{db}"
[embeddings]
{embeddings}
"""
ENV = {"QUINN_TEST_IMAP_PASSWORD": "unused"}


class Lab:
    """A quinn.toml on a fresh database file, the store behind it, and a way to run the CLI in-process."""

    def __init__(self, tmp_path: Path, llm: ScriptedLLM, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp_path, self.llm, self.capsys = tmp_path, llm, capsys
        self.db_path = tmp_path / "quinn.db"
        self.config = self.write_config("quinn.toml", self.db_path)
        self.embedder = OpenAIEmbedder("scripted-embed", llm.openai_base_url, None)

    def write_config(self, name: str, db_path: Path, embeddings: str | None = None) -> Path:
        scripted = f'backend = "openai"\nmodel = "scripted-embed"\nbase_url = "{self.llm.openai_base_url}"'
        embeddings = embeddings or scripted
        path = self.tmp_path / name
        path.write_text(CONFIG.format(db=db_path, embeddings=embeddings), encoding="utf-8")
        return path

    def store(self) -> MemoryStore:
        return MemoryStore.open(str(self.db_path), embedder=self.embedder)

    def run(self, *argv: str, config: Path | None = None) -> tuple[int, str, str]:
        """``quinn ARGV -c CONFIG`` through ``cli.main``: exit code, stdout, stderr."""
        self.capsys.readouterr()
        code = cli.main([*argv, "-c", str(config or self.config)])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str, config: Path | None = None) -> object:
        code, out, err = self.run(*argv, "--json", config=config)
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def lab(tmp_path: Path, llm_server: ScriptedLLM, capsys, monkeypatch: pytest.MonkeyPatch) -> Lab:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    # cli.main configures the root logger for a real process; here it would replace pytest's log capture.
    monkeypatch.setattr(cli, "setup_logging", lambda *args, **kwargs: None)
    return Lab(tmp_path, llm_server, capsys)


@pytest.fixture
def alice(lab: Lab) -> dict[str, int]:
    store = lab.store()
    try:
        deadline = store.add(ALICE, "Project Alpha deadline is June 30", scope="domain", type="fact",
                             domain="work", tags=["alpha"], valid_from="2026-05-02")  # fmt: skip
        moved = store.update(deadline, "Project Alpha deadline moved to July 15", valid_from="2026-06-10")
        [tea, allergy] = store.add_many([
            NewMemory(ALICE, "Alice prefers green tea", type="preference", tags=("drinks",)),
            NewMemory(ALICE, "Alice is allergic to peanuts", type="personal", immutable=True),
        ])  # fmt: skip
        store.add("bob@example.test", "Bob prefers coffee", type="preference")
    finally:
        store.close()
    return {"deadline": deadline, "moved": moved, "tea": tea, "allergy": allergy}


def test_list_as_table_and_json_with_filters(lab: Lab, alice: dict[str, int]):
    code, out, _err = lab.run("memory", "list", ALICE)
    assert code == 0
    assert f"memories of {ALICE} (3)" in out and "Alice prefers green tea" in out and "Bob" not in out
    records = lab.json("memory", "list", ALICE)
    assert isinstance(records, list)
    assert {r["id"] for r in records} == {alice["moved"], alice["tea"], alice["allergy"]}
    assert all(r["user_id"] == ALICE for r in records)
    assert [r["id"] for r in lab.json("memory", "list", ALICE, "--type", "preference")] == [alice["tea"]]  # type: ignore[index]
    assert [r["id"] for r in lab.json("memory", "list", ALICE, "--tag", "alpha")] == [alice["moved"]]  # type: ignore[index]
    past = lab.json("memory", "list", ALICE, "--as-of", "2026-06-01")
    assert [r["content"] for r in past] == ["Project Alpha deadline is June 30"]  # type: ignore[index]
    assert len(lab.json("memory", "list", ALICE, "--include-inactive")) == 4  # type: ignore[arg-type]
    assert len(lab.json("memory", "list", ALICE, "--limit", "1")) == 1  # type: ignore[arg-type]


def test_show_and_its_errors(lab: Lab, alice: dict[str, int]):
    record = lab.json("memory", "show", str(alice["tea"]))
    assert record["content"] == "Alice prefers green tea" and record["tags"] == ["drinks"]  # type: ignore[index]
    code, out, _err = lab.run("memory", "show", str(alice["tea"]))
    assert code == 0 and "green tea" in out and "valid_from" in out
    code, out, err = lab.run("memory", "show", "4242")
    assert (code, out) == (1, "")
    assert err == "quinn: memory 4242 not found (hint: find ids with: quinn memory list USER)\n"
    code, _out, err = lab.run("memory", "list", ALICE, "--as-of", "someday")
    assert code == 1 and err.count("\n") == 1 and "filter as_of 'someday' is not a date" in err


def test_search_does_not_count_as_a_retrieval(lab: Lab, alice: dict[str, int]):
    hits = lab.json("memory", "search", ALICE, "Project Alpha deadline", "-k", "2")
    assert isinstance(hits, list) and hits[0]["id"] == alice["moved"] and hits[0]["score"] > 0
    assert {h["user_id"] for h in hits} == {ALICE}
    code, out, _err = lab.run("memory", "search", ALICE, "tea", "--type", "preference")
    assert code == 0 and "green tea" in out and "deadline" not in out
    store = lab.store()
    try:
        assert store.get(alice["moved"]).access_count == 0  # type: ignore[union-attr]
    finally:
        store.close()


def test_edit_history_and_the_immutable_rule(lab: Lab, alice: dict[str, int]):
    edited = lab.json("memory", "edit", str(alice["tea"]), "Alice prefers jasmine tea", "--reason", "user mail")
    assert edited == {"previous": alice["tea"], "id": edited["id"], "version": 2}  # type: ignore[index]
    history = lab.json("memory", "history", str(alice["tea"]))
    assert [v["content"] for v in history["versions"]] == ["Alice prefers green tea", "Alice prefers jasmine tea"]  # type: ignore[index]
    assert [c["change"] for c in history["changes"]] == ["created", "updated", "superseded"]  # type: ignore[index]
    assert history["changes"][1]["reason"] == "user mail"  # type: ignore[index]
    code, out, _err = lab.run("memory", "history", str(alice["moved"]))
    assert code == 0 and "June 30" in out and "July 15" in out and "superseded" in out
    code, out, err = lab.run("memory", "edit", str(alice["allergy"]), "not allergic")
    assert code == 1 and out == ""
    assert err == f"quinn: memory {alice['allergy']} is immutable; only an operator can update it\n"
    code, out, _err = lab.run("memory", "edit", str(alice["allergy"]), "Alice is allergic to peanuts and cashews",
                              "--allow-immutable")  # fmt: skip
    assert code == 0 and "(version 2)" in out
    code, _out, err = lab.run("memory", "edit", str(alice["tea"]), "again")
    assert code == 1 and f"memory {alice['tea']} is not current" in err and "hint:" in err


def test_edit_and_forget_write_the_audit_log_as_the_console_does(lab: Lab, alice: dict[str, int],
                                                                    monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    monkeypatch.setenv("SUDO_USER", "olly")  # run through sudo: the caller is who did it
    edited = lab.json("memory", "edit", str(alice["tea"]), "Alice prefers jasmine tea", "--reason", "user mail")
    assert lab.json("memory", "forget", str(edited["id"])) == {"id": edited["id"], "forgotten": True, "elsewhere": {}}  # type: ignore[index]
    store = lab.store()
    try:
        entries = [(e.actor, e.action, e.object, e.user_id, e.detail) for e in audit_log.listing(store.db)]
    finally:
        store.close()
    assert entries == [
        ("cli:olly", "forget memory", f"memory {edited['id']}", ALICE,  # type: ignore[index]
         "forgotten by an operator; from the command line"),
        ("cli:olly", "edit memory", f"memory {alice['tea']}", ALICE,
         f"new version: memory {edited['id']}; user mail; from the command line"),  # type: ignore[index]
    ]  # fmt: skip
    code, _out, _err = lab.run("memory", "forget", str(alice["allergy"]))  # refused (immutable): nothing audited
    assert code == 1
    store = lab.store()
    try:
        assert len(audit_log.listing(store.db)) == 2
    finally:
        store.close()


def test_forget_and_purge(lab: Lab, alice: dict[str, int]):
    assert lab.json("memory", "forget", str(alice["tea"])) == {"id": alice["tea"], "forgotten": True, "elsewhere": {}}
    assert alice["tea"] not in {r["id"] for r in lab.json("memory", "list", ALICE)}  # type: ignore[union-attr]
    code, _out, err = lab.run("memory", "forget", str(alice["allergy"]))
    assert code == 1 and "immutable" in err
    code, out, err = lab.run("memory", "purge", ALICE)
    assert (code, out) == (1, "")
    assert err == f"quinn: purge deletes every trace of {ALICE} and cannot be undone (hint: add --yes to confirm)\n"
    purged = lab.json("memory", "purge", ALICE, "--yes")
    assert purged["removed"]["memories"] == 4  # type: ignore[index]
    assert lab.json("memory", "list", ALICE, "--include-inactive") == []
    assert len(lab.json("memory", "list", "bob@example.test")) == 1  # type: ignore[arg-type]


def test_export_and_import_between_databases(lab: Lab, alice: dict[str, int], tmp_path: Path):
    code, out, _err = lab.run("memory", "export", ALICE)
    assert code == 0 and len(json.loads(out)["memories"]) == 4
    target = tmp_path / "alice.yaml"
    code, out, err = lab.run("memory", "export", ALICE, "-o", str(target))
    assert code == 0 and out == "" and err == f"exported 4 memories of {ALICE} to {target}\n"
    assert len(yaml.safe_load(target.read_text())["memories"]) == 4
    other = lab.write_config("other.toml", tmp_path / "other.db")
    assert lab.json("memory", "import", str(target), "--user", "carol@example.test", config=other) == {
        "imported": 4, "skipped": 0,
    }  # fmt: skip
    code, out, _err = lab.run("memory", "import", str(target), "--user", "carol@example.test", config=other)
    assert (code, out) == (0, "imported 0 memories, skipped 4 already present\n")
    carol = lab.json("memory", "list", "carol@example.test", "--as-of", "2026-06-01", config=other)
    assert [r["content"] for r in carol] == ["Project Alpha deadline is June 30"]  # type: ignore[index]

    broken = tmp_path / "broken.json"
    document = json.loads(lab.run("memory", "export", ALICE)[1])
    document["memories"][2]["scope"] = "everywhere"
    broken.write_text(json.dumps(document))
    code, out, err = lab.run("memory", "import", str(broken), config=other)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "record memories[2], field scope: 'everywhere' is not one of" in err and "nothing was imported" in err
    code, _out, err = lab.run("memory", "import", str(tmp_path / "missing.json"), config=other)
    assert code == 1 and "import file" in err and "not found" in err
    code, _out, err = lab.run("memory", "export", ALICE, "-o", str(tmp_path / "no" / "such" / "dir.json"))
    assert code == 1 and "does not exist" in err


def test_reembed_after_switching_to_the_local_model(lab: Lab, alice: dict[str, int], embedder: LocalEmbedder):
    local = lab.write_config("local.toml", lab.db_path, 'backend = "local"\nmodel = "all-MiniLM-L6-v2"')
    result = lab.json("memory", "reembed", "--batch-size", "2", config=local)
    # every row of both users, all versions; no mail, so no conversation passage
    assert result == {"reembedded": 5, "passages_reembedded": 0, "passages_indexed": 0,
                      "model": "local/all-MiniLM-L6-v2"}  # fmt: skip
    store = lab.store()
    try:
        blob = store.db.query_value("SELECT embedding FROM memories WHERE id = ?", (alice["tea"],))
    finally:
        store.close()
    expected = embedder.embed(["Alice prefers green tea"])[0]
    assert np.allclose(np.frombuffer(blob, dtype=np.float32), expected, atol=1e-5)
    assert lab.json("memory", "reembed", config=local)["reembedded"] == 0
    hits = lab.json("memory", "search", ALICE, "When is the Alpha project due?", config=local)
    assert hits[0]["id"] == alice["moved"] and hits[0]["vector_similarity"] is not None  # type: ignore[index]
    none = lab.write_config("none.toml", lab.db_path, 'backend = "none"')
    code, _out, err = lab.run("memory", "reembed", config=none)
    assert code == 1 and "reembed needs an embedder" in err


def test_the_installed_command_runs_in_a_process(lab: Lab, alice: dict[str, int]):
    env = {**os.environ, **ENV, "HF_HUB_OFFLINE": "1"}

    def quinn(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "quinn", *argv, "-c", str(lab.config)], capture_output=True,
                              text=True, env=env, timeout=120)  # fmt: skip

    listed = quinn("memory", "list", ALICE, "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3
    missing = quinn("memory", "show", "999")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == ["quinn: memory 999 not found (hint: find ids with: quinn memory list USER)"]


def test_memory_without_a_subcommand_shows_usage(lab: Lab, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["memory"])
    assert info.value.code == 2
    assert "SUBCOMMAND" in capsys.readouterr().err


def test_pin_and_unpin_change_the_mark_in_place(lab: Lab, alice: dict[str, int]):
    assert lab.json("memory", "pin", str(alice["tea"])) == {"id": alice["tea"], "immutable": True}
    code, _out, err = lab.run("memory", "edit", str(alice["tea"]), "Alice prefers coffee")
    assert code == 1 and "is immutable" in err  # pinned: what decay and consolidation leave alone
    code, out, _err = lab.run("memory", "unpin", str(alice["allergy"]), "--reason", "no longer needed")
    assert code == 0 and "no longer pinned" in out
    store = lab.store()
    try:
        tea, allergy = store.get(alice["tea"]), store.get(alice["allergy"])
        changes = [(c.change, c.reason) for c in store.changes(alice["allergy"])]
        actions = [e.action for e in audit_log.listing(store.db)]
    finally:
        store.close()
    assert tea.immutable and tea.version == 1 and not allergy.immutable and allergy.version == 1  # no new version
    assert changes[-1] == ("unpinned", "no longer needed") and actions == ["unpin memory", "pin memory"]


def test_forget_by_id_takes_the_fact_out_of_what_was_written_from_it(lab: Lab):
    """Issue 35: `quinn memory forget ID` on "Alice lives in Berlin" takes Berlin out of her short-term state,
    thread summaries, passages and graph (saying where), and leaves Bob's Berlin alone."""
    store = lab.store()
    try:
        lives = written_from_berlin(store, ALICE, "Alice", 1)
        written_from_berlin(store, "bob@example.test", "Bob", 2)
    finally:
        store.close()
    code, out, err = lab.run("memory", "forget", str(lives))
    assert code == 0, err
    assert "also taken out of: 1 note of our recent conversations, 1 thread summary" in out, out
    store = lab.store()
    try:
        assert berlin_rows(store, ALICE) == {}
        assert store.db.query("SELECT user_info FROM user_state WHERE user_id = ?", (ALICE,)) == [
            ("Alice works as a pharmacist.",)
        ]
        assert len(berlin_rows(store, "bob@example.test")) == 8  # what written_from_berlin wrote: eight places
    finally:
        store.close()
