"""The Prompts pages in-process: the templates with their variables, an edit refused with the checker's message
and nothing saved, a preview with a person's real memory (escaped), saving as a new version that a separate
PromptStore (the daemon's) picks up without a restart, diffs, rollback, the audit log, and the read-only role."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log, proposals
from quinn.agent.prompts import PromptStore
from quinn.agent.samples import sample_variables
from quinn.clock import utcnow
from quinn.config import load_config
from quinn.console.app import Console
from quinn.console.routes import build_app
from quinn.console.serve import prompt_parts
from tests.console.conftest import ALICE, BROKEN, CONFIG, EXTEND, csrf_of, log_in

SYNTAX = "{% block system %}{% if %}{% endblock %}"


@pytest.fixture
def admin_dir(world, tmp_path: Path) -> Path:
    return tmp_path / "prompts"


@pytest.fixture
def client(world, admin_dir: Path):
    admin_dir.mkdir()
    path = world.config_path.with_name("full.toml")
    path.write_text(CONFIG.replace("[console]", f'[prompts]\ndir = "{admin_dir}"\n[console]'), encoding="utf-8")
    full = load_config(path, env={"Q_IMAP": "x", "Q_CONSOLE_ROOT": "x", "Q_CONSOLE_VIEWER": "x"})  # admins: below
    console = Console(full.console, world.store, admins=world.console.admins, **prompt_parts(full, world.store))
    with TestClient(build_app(console), base_url="http://127.0.0.1") as client:
        yield client


def edit(client, action: str, source: str, **fields: str):  # type: ignore[no-untyped-def]
    page = client.get("/prompts/reply").text
    return client.post(f"/prompts/reply/{action}", data={"csrf": csrf_of(page), "source": source, **fields},
                       follow_redirects=False)  # fmt: skip


def test_the_list_names_every_template_its_version_and_variables(client):
    log_in(client)
    page = client.get("/prompts").text
    for name in ("reply", "extract", "digest", "reflect", "session_close"):
        assert f'href="/prompts/{name}"' in page
    assert "reply@" in page and "packaged default" in page
    assert "others_on_thread" in page and "user.address" in page  # prompts/README.md's variables
    one = client.get("/prompts/reply").text
    assert "You are {{ assistant.name }}" in one and "memory_enabled" in one
    assert client.get("/prompts/nothing").status_code == 400


def test_a_broken_edit_is_refused_with_the_message_and_nothing_saved(world, client, admin_dir: Path):
    log_in(client)
    for source, message in ((BROKEN, "supper"), (SYNTAX, "Expected an expression")):
        for action in ("preview", "save"):
            response = edit(client, action, source)
            assert response.status_code == 400 and message in response.text, (action, response.text[-2000:])
            assert "reply.j2:" in response.text  # the file and line, as `quinn prompts check` says
    assert list(admin_dir.iterdir()) == []
    assert audit_log.listing(world.store.db) == []


def test_preview_uses_the_persons_real_memory_escaped(world, client, admin_dir: Path):
    world.store.add(ALICE, "Alice's cat is <script>alert(1)</script>", type="personal")
    log_in(client)
    response = edit(client, "preview", EXTEND, user=ALICE, text="What is my cat called?")
    assert response.status_code == 200, response.text[-2000:]
    assert "The template passes the checks" in response.text
    assert "Sign as &#34;Quinn from MARK&#34;" in response.text or "Sign as &quot;Quinn from MARK" in response.text
    assert "sister is called Jo" in response.text  # Alice's profile, from the store
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text and "<script>" not in response.text
    sample = edit(client, "preview", EXTEND).text  # nobody chosen: the sample data
    assert "sister is called Jo" not in sample and "Sign as" in sample
    assert list(admin_dir.iterdir()) == []  # a preview saves nothing
    nobody = edit(client, "preview", EXTEND.replace("MARK", "kept"), user="not-an-address")
    assert nobody.status_code == 400 and "not an email address" in nobody.text and "Quinn from kept" in nobody.text


def test_save_diff_rollback_and_the_daemon_sees_it_without_a_restart(world, client, admin_dir: Path):
    daemon = PromptStore(admin_dir, samples=sample_variables)  # the running daemon's own store
    default_version = daemon.render("reply", sample_variables()["reply"]).version
    log_in(client)
    assert edit(client, "save", EXTEND.replace("MARK", "one"), reason="first").status_code == 303
    first = daemon.render("reply", sample_variables()["reply"])
    assert "Quinn from one" in first.system and first.version != default_version
    assert edit(client, "save", EXTEND.replace("MARK", "two")).status_code == 303
    second = daemon.render("reply", sample_variables()["reply"])
    assert "Quinn from two" in second.system
    page = client.get("/prompts/reply").text
    assert second.version in page and first.version in page and "the admin's copy" in page
    diff = client.get("/prompts/reply/diff", params={"from": first.version, "to": "current"}).text
    assert "-Sign as &#34;Quinn from one&#34;." in diff and "+Sign as &#34;Quinn from two&#34;." in diff
    back = client.post("/prompts/reply/rollback", data={"csrf": csrf_of(page), "version": first.version},
                       follow_redirects=False)  # fmt: skip
    assert back.status_code == 303
    assert daemon.render("reply", sample_variables()["reply"]).version == first.version
    default = client.post("/prompts/reply/rollback", data={"csrf": csrf_of(page), "version": "default"},
                          follow_redirects=False)  # fmt: skip
    assert default.status_code == 303 and not (admin_dir / "reply.j2").exists()
    assert daemon.render("reply", sample_variables()["reply"]).version == default_version
    entries = audit_log.listing(world.store.db)
    assert [(e.actor, e.action, e.object) for e in entries] == [
        ("root", "roll back template", "template reply"), ("root", "roll back template", "template reply"),
        ("root", "save template", "template reply"), ("root", "save template", "template reply"),
    ]  # fmt: skip
    assert entries[-1].detail == f"{default_version} -> {first.version}; first"
    assert entries[-2].detail == f"{first.version} -> {second.version}"  # no reason given: none shown
    assert "template reply" in client.get("/audit").text


def test_read_only_may_look_not_preview_save_or_roll_back(client, admin_dir: Path):
    log_in(client, "viewer")
    page = client.get("/prompts/reply").text
    assert "readonly" in page and "save-template" not in page and "Roll back" not in page
    assert 'id="preview"' not in page  # a preview runs typed template text: the admin role's (docs/console.md)
    assert edit(client, "preview", EXTEND).status_code == 403
    assert edit(client, "save", EXTEND).status_code == 403
    refused = client.post("/prompts/reply/rollback", data={"csrf": csrf_of(page), "version": "default"})
    assert refused.status_code == 403 and list(admin_dir.iterdir()) == []


def test_template_text_is_escaped_in_the_editor(client):
    log_in(client)
    hostile = EXTEND.replace("MARK", "</textarea><script>alert(1)</script>")
    assert edit(client, "save", hostile).status_code == 303
    page = client.get("/prompts/reply").text
    assert "<script>" not in page and "&lt;/textarea&gt;&lt;script&gt;" in page


def test_without_a_prompts_dir_nothing_can_be_saved(app, world):
    with TestClient(app, base_url="http://127.0.0.1") as plain:
        log_in(plain)
        page = plain.get("/prompts/reply").text
        assert "save-template" not in page
        response = edit(plain, "save", EXTEND)
        assert response.status_code == 400 and "admin template directory" in response.text


def test_a_directory_the_service_may_not_write_is_a_clear_refusal(client, admin_dir: Path, monkeypatch):
    def read_only(*_args: object) -> None:
        raise OSError(30, "Read-only file system")  # what ProtectSystem=strict answers for /etc

    log_in(client)
    monkeypatch.setattr("quinn.agent.proposals.os.replace", read_only)
    response = edit(client, "save", EXTEND)
    assert response.status_code == 400 and "Read-only file system" in response.text
    assert "ReadWritePaths" in response.text and list(admin_dir.iterdir()) == []  # no temporary file left either


def test_a_file_broken_by_hand_is_shown_with_its_error_and_can_be_fixed(client, admin_dir: Path):
    (admin_dir / "reply.j2").write_text(BROKEN, encoding="utf-8")  # before the console ever loaded it
    log_in(client)
    listed = client.get("/prompts").text
    assert "supper" in listed and "reply.j2:" in listed
    page = client.get("/prompts/reply")
    assert page.status_code == 200 and "does not compile" in page.text and "supper()" in page.text
    assert edit(client, "save", EXTEND).status_code == 303
    assert "does not compile" not in client.get("/prompts/reply").text


def test_proposals_are_read_escaped_then_accepted_or_rejected_and_audited(world, client, admin_dir: Path):
    db = world.store.db
    daemon = PromptStore(admin_dir, samples=sample_variables)
    version, text = daemon.text_of("reply")
    proposals.keep_version(db, version, "reply", text, utcnow())
    plain = "Answer in plain text suitable for an email."
    evidence = {"scored": 3, "mean_reward": -0.2, "suggestions": ["<script>alert(1)</script> be brief"]}
    shorter = proposals.add(db, "reply", version, text.replace(plain, "Answer in <b>three</b> sentences."),
                            "Shorter <i>please</i>.", evidence, utcnow())  # fmt: skip
    other = proposals.add(db, "reply", version, text.replace(plain, "Answer in verse."), "Poetic.", {}, utcnow())
    log_in(client, "viewer")
    page = client.get(f"/proposals/{shorter}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; be brief" in page and "<script>" not in page
    assert "+Answer in &lt;b&gt;three&lt;/b&gt; sentences." in page and "Shorter &lt;i&gt;please" in page
    assert 'id="accept"' not in page
    assert client.post(f"/proposals/{shorter}/accept", data={"csrf": csrf_of(page)}).status_code == 403
    client.cookies.clear()
    log_in(client)
    listed = client.get("/proposals").text
    assert f'href="/proposals/{shorter}"' in listed and f'href="/proposals/{other}"' in listed
    page = client.get(f"/proposals/{shorter}").text
    accepted = client.post(f"/proposals/{shorter}/accept", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert accepted.status_code == 303
    assert "Answer in <b>three</b> sentences." in daemon.render("reply", sample_variables()["reply"]).system
    refused = client.post(f"/proposals/{other}/accept", data={"csrf": csrf_of(page)})  # it rewrote the old text
    assert refused.status_code == 400 and "changed since proposal" in refused.text
    assert client.post(f"/proposals/{other}/reject", data={"csrf": csrf_of(page)}).status_code == 200
    assert [p.status for p in proposals.listing(db)] == ["rejected", "accepted"]
    assert "No proposals waiting" in client.get("/proposals").text
    assert [(e.action, e.object) for e in audit_log.listing(db)] == [
        ("reject proposal", f"proposal {other}"),
        ("accept proposal", f"proposal {shorter}"),
    ]
    assert f'href="/proposals/{shorter}"' in client.get("/audit").text
    assert daemon.text_of("reply")[0] in [v for v, _at, _t in proposals.versions(db, "reply")]  # to roll back to
    assert client.get("/proposals/999").status_code == 400
