"""``quinn kb`` (issue 18's knowledge base) against a real libSQL file, as an operator runs it: add (files and
directories, a bad file reported while the rest are added, unchanged files skipped, a changed one replaced in
place), list, search, remove and reindex, in both forms (the table and ``--json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quinn.cli import main
from quinn.config import DocumentsConfig
from quinn.db import Database
from quinn.documents.knowledge import add_file
from quinn.memory.passages import KNOWLEDGE_OWNER
from quinn.memory.store import MemoryStore
from tests.commands.test_admin_cli import CONFIG as ADMIN_CONFIG
from tests.lab.documents import make_pdf


def config_text(db: Path, backend: str) -> str:
    """The admin tests' quinn.toml, on ``db`` and with the ``backend`` embedder."""
    return ADMIN_CONFIG.replace('url = "quinn.db"', f'url = "{db}"') + f'[embeddings]\nbackend = "{backend}"\n'


HANDBOOK = make_pdf(["Staff handbook of Example Ltd.", "The office wifi password is lemon-kiwi-42.\nAsk Dana."])


@pytest.fixture
def setup(tmp_path: Path):
    """(run, folder): ``run(*args)`` is ``quinn ARGS -c CONFIG`` returning (exit code, stdout, stderr)."""
    config = tmp_path / "quinn.toml"
    config.write_text(config_text(tmp_path / "quinn.db", "none"))
    folder = tmp_path / "kb"
    folder.mkdir()

    def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        code = main([args[0], args[1], "-c", str(config), *args[2:]])
        out, err = capsys.readouterr()
        return code, out, err

    return run, folder, tmp_path / "quinn.db"


def kb_rows(db_path: Path, sql: str) -> list[tuple]:
    db = Database.open(str(db_path))
    try:
        return db.query(sql, (KNOWLEDGE_OWNER,))
    finally:
        db.close()


def test_add_list_search_update_remove(setup, capsys):
    run, folder, db_path = setup
    (folder / "handbook.pdf").write_bytes(HANDBOOK)
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.md").write_text("# Parking\n\nVisitors park on level -2, bay 17.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog")
    (folder / ".hidden.txt").write_text("never added")

    code, out, _ = run(capsys, "kb", "add", str(folder), "--json")
    assert code == 1  # one file failed; the others were still added
    results = {r["name"]: r for r in json.loads(out)}
    assert set(results) == {"broken.pdf", "handbook.pdf", "notes.md"}
    assert results["handbook.pdf"]["status"] == "added" and results["notes.md"]["status"] == "added"
    assert results["broken.pdf"]["status"] == "failed" and "damaged" in results["broken.pdf"]["reason"]

    code, out, _ = run(capsys, "kb", "add", str(folder / "handbook.pdf"), str(folder / "sub"), "--json")
    assert code == 0 and [r["status"] for r in json.loads(out)] == ["unchanged", "unchanged"]

    code, out, _ = run(capsys, "kb", "list", "--json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and set(listed) == {"handbook.pdf", "notes.md"}
    assert (listed["handbook.pdf"]["kind"], listed["handbook.pdf"]["pages"]) == ("pdf", 2)
    assert listed["handbook.pdf"]["size"] == len(HANDBOOK) and listed["handbook.pdf"]["sections"] == 2
    code, out, _ = run(capsys, "kb", "list")
    assert code == 0 and "handbook.pdf" in out and "notes.md" in out

    code, out, _ = run(capsys, "kb", "search", "wifi password", "--json")
    assert code == 0 and json.loads(out)[0]["citation"] == "[doc:handbook.pdf p.2]"
    assert "lemon-kiwi-42" in json.loads(out)[0]["content"]

    # A changed file replaces its passages in place: the old text is gone, the new one found.
    (folder / "sub" / "notes.md").write_text("# Parking\n\nVisitors now park on level -3, bay 5.\n")
    code, out, _ = run(capsys, "kb", "add", str(folder / "sub" / "notes.md"), "--json")
    assert code == 0 and json.loads(out)[0]["status"] == "updated"
    notes = "SELECT content FROM passages WHERE user_id = ? AND document = 'notes.md'"
    contents = [r[0] for r in kb_rows(db_path, notes)]
    assert contents and all("level -3" in c for c in contents)
    assert kb_rows(db_path, "SELECT count(*) FROM documents WHERE user_id = ?") == [(2,)]

    code, out, _ = run(capsys, "kb", "remove", "handbook.pdf")
    assert code == 0 and "removed handbook.pdf" in out
    assert kb_rows(db_path, "SELECT DISTINCT document FROM passages WHERE user_id = ?") == [("notes.md",)]
    assert kb_rows(db_path, "SELECT count(*) FROM documents WHERE user_id = ?") == [(1,)]
    code, out, _ = run(capsys, "kb", "search", "wifi password", "--json")
    assert code == 0 and json.loads(out) == []
    code, _, err = run(capsys, "kb", "remove", "handbook.pdf")
    assert code != 0 and "no file 'handbook.pdf' in the knowledge base" in err


def test_a_missing_path_and_the_same_bytes_under_two_names_fail_with_reasons(setup, capsys):
    run, folder, _db = setup
    (folder / "a.txt").write_text("The cafeteria opens at 8.")
    (folder / "b.txt").write_text("The cafeteria opens at 8.")
    (folder / "sub").mkdir()
    (folder / "sub" / "a.txt").write_text("The cafeteria closes at 15.")
    code, out, _ = run(capsys, "kb", "add", str(folder / "a.txt"), str(folder / "b.txt"), str(folder / "nope.txt"),
                       str(folder / "sub"), "--json")  # fmt: skip
    rows = json.loads(out)
    assert code == 1 and [r["status"] for r in rows] == ["added", "failed", "failed", "failed"]
    code, out, _ = run(capsys, "kb", "list", "--json")
    assert [(r["name"], r["kind"], r["pages"], r["sections"]) for r in json.loads(out)] == [("a.txt", "text", 0, 1)]
    assert "already in it as a.txt" in rows[1]["reason"] and "cannot read it" in rows[2]["reason"]
    assert rows[3]["reason"] == f"{folder / 'a.txt'} has the same name; rename one of them"


def test_reindex_embeds_every_knowledge_base_passage(tmp_path: Path, capsys):
    config = tmp_path / "quinn.toml"
    config.write_text(config_text(tmp_path / "quinn.db", "local"))
    (tmp_path / "handbook.pdf").write_bytes(HANDBOOK)
    assert main(["kb", "add", "-c", str(config), str(tmp_path / "handbook.pdf")]) == 0
    embedded = "SELECT count(*) FROM passages WHERE user_id = ? AND embedding_model IS NOT NULL"
    assert kb_rows(tmp_path / "quinn.db", embedded) == [(2,)]
    db = Database.open(str(tmp_path / "quinn.db"))
    db.execute("UPDATE passages SET embedding = NULL, embedding_model = NULL")  # as after a model change
    db.close()
    capsys.readouterr()
    assert main(["kb", "reindex", "-c", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"reembedded": 2}
    assert kb_rows(tmp_path / "quinn.db", embedded) == [(2,)]
    assert main(["kb", "search", "-c", str(config), "how do I get on the network", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["citation"] == "[doc:handbook.pdf p.2]"


def test_a_file_the_embedder_fails_on_is_reported_and_nothing_of_it_kept(tmp_path: Path):
    class Down:
        model_id, dim = "down", 4

        def embed(self, texts):
            raise RuntimeError("the embedding server is down")

    (tmp_path / "faq.md").write_text("Opening hours: 9 to 5.")
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), Down())  # type: ignore[arg-type]
    try:
        added = add_file(store, tmp_path / "faq.md", DocumentsConfig())
        assert (added.status, added.reason) == ("failed", "not stored: RuntimeError: the embedding server is down")
        assert store.db.query("SELECT count(*) FROM documents") == [(0,)]
        assert store.db.query("SELECT count(*) FROM passages") == [(0,)]
    finally:
        store.close()


def test_a_file_scoped_to_domains_is_listed_with_its_scope_and_rescoped_in_place(setup, capsys):
    run, folder, db_path = setup
    (folder / "payroll.md").write_text("# Payroll\n\nThe salary review closes on 3 December.\n")
    code, out, _ = run(capsys, "kb", "add", str(folder / "payroll.md"), "--domain", "Example.org", "--domain",
                       "@example.com", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)[0]["status"] == "added"
    assert kb_rows(db_path, "SELECT domain FROM document_domains WHERE document_id IN"
                   " (SELECT id FROM documents WHERE user_id = ?) ORDER BY domain") == [("example.com",),
                                                                                        ("example.org",)]  # fmt: skip
    code, out, _ = run(capsys, "kb", "list", "--json")
    assert json.loads(out)[0]["domains"] == ["example.com", "example.org"]
    code, out, _ = run(capsys, "kb", "list")
    assert "example.com, example.org" in out
    code, out, _ = run(capsys, "kb", "add", str(folder / "payroll.md"), "--domain", "example.org", "--json")
    assert json.loads(out)[0]["status"] == "rescoped"  # the same bytes: not read or embedded again
    code, out, _ = run(capsys, "kb", "add", str(folder / "payroll.md"), "--json")
    assert json.loads(out)[0]["status"] == "rescoped"
    code, out, _ = run(capsys, "kb", "list")
    assert "everyone" in out
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "kb", "add", str(folder / "payroll.md"), "--domain", "not a domain")
    assert exit_.value.code == 2 and "'not a domain' is not a mail domain" in capsys.readouterr().err
