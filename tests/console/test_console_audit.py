"""The audit log: every console change is one entry (who, what, which object, when, why), the Audit page shows
them newest first to every role, and a purge of the person keeps the entry but not the person."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log
from quinn.agent.purge import purge
from tests.console.conftest import ALICE, csrf_of, log_in


@pytest.fixture
def client(app):
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def test_record_and_list_newest_first(world):
    db = world.store.db
    first = audit_log.record(db, "root", "edit memory", "memory 1", user_id=ALICE, detail="a\nb  c")
    audit_log.record(db, "viewer", "other", "x" * 500)
    entries = audit_log.listing(db)
    assert [e.action for e in entries] == ["other", "edit memory"]
    assert entries[1].id == first and entries[1].detail == "a b c" and entries[1].user_id == ALICE
    assert len(entries[0].object) == audit_log.MAX_FIELD
    assert [e.actor for e in audit_log.listing(db, actor="root")] == ["root"]


def test_console_edit_and_forget_are_audited_and_shown(world, client):
    log_in(client)
    assert "No changes yet" in client.get("/audit").text
    page = client.get(f"/memories/{world.memory_id}").text
    edited = client.post(
        f"/memories/{world.memory_id}/edit",
        follow_redirects=False,
        data={"csrf": csrf_of(page), "content": "Jo is Alice's sister", "reason": "<b>typo</b>"},
    )
    new_id = int(edited.headers["location"].rsplit("/", 1)[1])
    client.post(f"/memories/{new_id}/forget", data={"csrf": csrf_of(page), "reason": "wrong"})
    entries = audit_log.listing(world.store.db)
    assert [(e.actor, e.action, e.object, e.user_id) for e in entries] == [
        ("root", "forget memory", f"memory {new_id}", ALICE),
        ("root", "edit memory", f"memory {world.memory_id}", ALICE),
    ]
    assert entries[1].detail == f"new version: memory {new_id}; <b>typo</b>"
    assert "Jo is Alice" not in entries[1].detail  # the memory's text stays in the store, not in the log
    shown = client.get("/audit").text
    assert shown.index("forget memory") < shown.index("edit memory")  # newest first
    assert "&lt;b&gt;typo&lt;/b&gt;" in shown and "<b>typo" not in shown
    assert f'href="/memories/{world.memory_id}"' in shown


def test_refused_changes_are_not_audited_and_read_only_may_read(world, client):
    assert log_in(client, "viewer").status_code == 303
    page = client.get("/audit")
    assert page.status_code == 200 and "Audit" in page.text
    client.post(f"/memories/{world.memory_id}/forget", data={"csrf": csrf_of(page.text)})
    assert audit_log.listing(world.store.db) == []


def test_a_purge_keeps_the_entry_but_not_the_person(world):
    db = world.store.db
    audit_log.record(db, "root", "forget memory", "memory 1", user_id=ALICE, detail="she asked, sister Jo")
    audit_log.record(db, "root", "edit memory", "memory 3", user_id="bob@example.org", detail="kept")
    assert purge(world.store, ALICE)["audit_log"] == 1
    entries = audit_log.listing(db)
    assert [(e.object, e.user_id, e.detail) for e in entries] == [("memory 3", "bob@example.org", "kept"),
                                                                  ("memory 1", None, "")]  # fmt: skip
