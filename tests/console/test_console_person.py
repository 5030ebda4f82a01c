"""A person on the console (issue 20): People's passages, files and consent; a memory pinned and marked private;
the person's memories exported; a purge refused without the typed address and done with it. In-process over a
real libSQL file; each change checked in what the database holds, the change log and the audit log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from quinn.agent import audit_log
from quinn.agent.consent import opt_out
from quinn.console.person_pages import pseudonym
from quinn.documents import Extracted, Section
from quinn.documents.library import keep_documents
from quinn.mailbox.message import Attachment
from quinn.memory.passages import index_message
from tests.console.conftest import ALICE, BOB, csrf_of, log_in


@pytest.fixture
def client(app):
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def audit_rows(world, action: str) -> list[audit_log.Entry]:
    return [e for e in audit_log.listing(world.store.db) if e.action == action]


def test_people_show_passages_files_and_opt_out(world, client):
    store = world.store
    assert index_message(store, ALICE, "<m1@example.org>", "in") == 1
    lease = Extracted("lease.pdf", "application/pdf", "pdf", 9, "ab" * 32, (Section("p.1", "The lease runs a year."),))
    kept = keep_documents(store, ALICE, "<m1@example.org>", None, [lease],
                          [Attachment("lease.pdf", "application/pdf", 9, b"x" * 9)], max_file_bytes=1024)  # fmt: skip
    assert kept == 1
    opt_out(store.db, BOB, datetime.now(UTC), None)
    log_in(client)
    page = client.get("/people").text
    alice_row = page.split(f">{ALICE}</a>")[1].split("</tr>")[0]
    bob_row = page.split(f">{BOB}</a>")[1].split("</tr>")[0]
    assert '<td class="passages">1 / 1</td>' in alice_row and '<td class="documents">1</td>' in alice_row
    assert '<td class="passages">0 / 0</td>' in bob_row and '<td class="documents">0</td>' in bob_row
    assert "opted out" in bob_row and "opted out" not in alice_row
    assert 'id="opted-out"' in client.get(f"/people/{BOB}").text
    assert 'id="opted-out"' not in client.get(f"/people/{ALICE}").text


def test_pin_and_unpin_in_place_with_the_admin_in_the_change_log(world, client):
    log_in(client)
    mid = world.memory_id
    token = csrf_of(client.get(f"/memories/{mid}").text)
    response = client.post(f"/memories/{mid}/pin", data={"csrf": token, "pinned": "1", "reason": "a <b>key</b> fact"},
                           follow_redirects=False)  # fmt: skip
    assert response.status_code == 303 and response.headers["location"] == f"/memories/{mid}"
    memory = world.store.get(mid)
    assert memory.immutable and memory.current and len(world.store.history(mid)) == 1  # no new version
    page = client.get(f"/memories/{mid}").text
    assert 'id="pinned"' in page and 'id="unpin"' in page and "a <b>key</b>" not in page
    refused = client.post(f"/memories/{mid}/edit", data={"csrf": token, "content": "changed"})
    assert refused.status_code == 400 and "immutable" in refused.text  # pinned: edit refuses, as in the CLI
    client.post(f"/memories/{mid}/pin", data={"csrf": token, "pinned": "0"})
    assert not world.store.get(mid).immutable
    changes = [(c.change, c.reason) for c in world.store.changes(mid)]
    assert ("pinned", "pinned in the console by root: a <b>key</b> fact") in changes
    assert ("unpinned", "unpinned in the console by root") in changes
    assert [e.actor for e in audit_rows(world, "pin memory")] == ["root"]
    assert [e.actor for e in audit_rows(world, "unpin memory")] == ["root"]
    assert client.post(f"/memories/{mid}/pin", data={"csrf": token, "pinned": "yes"}).status_code == 400


def test_mark_private_and_back_as_new_versions(world, client):
    log_in(client)
    mid = world.memory_id
    assert not world.store.get(mid).private
    token = csrf_of(client.get(f"/memories/{mid}").text)
    response = client.post(f"/memories/{mid}/private", data={"csrf": token, "private": "1"}, follow_redirects=False)
    new_id = int(response.headers["location"].rsplit("/", 1)[1])
    new = world.store.get(new_id)
    assert new_id != mid and new.private and new.metadata["private"] is True and new.current
    assert new.content == "Alice's sister is called Jo" and not world.store.get(mid).current
    assert 'id="private"' in client.get(f"/memories/{new_id}").text
    response = client.post(f"/memories/{new_id}/private", data={"csrf": token, "private": "0"}, follow_redirects=False)
    last = world.store.get(int(response.headers["location"].rsplit("/", 1)[1]))
    assert not last.private and last.version == 3
    assert [c.reason for c in world.store.changes(last.id) if c.change == "updated"][-1] == (
        "marked not private in the console by root"
    )
    assert len(audit_rows(world, "mark memory private")) == 1
    assert len(audit_rows(world, "mark memory not private")) == 1
    personal = world.store.add(ALICE, "Alice's PIN is <i>4321</i>", type="personal")  # private by its type
    page = client.get(f"/memories/{personal}").text
    assert "its type is personal" in page and f"/memories/{personal}/private" not in page and "<i>" not in page
    summary = world.store.add(ALICE, 'Summary of the email thread "Jobs": Alice is interviewing.', type="summary")
    page = client.get(f"/memories/{summary}").text  # private by its type too: no button that would do nothing
    assert "it is a thread's summary" in page and f"/memories/{summary}/private" not in page


def test_export_is_the_cli_document_as_a_download(world, client):
    log_in(client)
    world.store.forget(world.memory_id)
    token = csrf_of(client.get(f"/people/{ALICE}").text)
    response = client.post(f"/people/{ALICE}/export", data={"csrf": token, "format": "json"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    assert response.headers["content-disposition"] == 'attachment; filename="memories-alice@example.org.json"'
    document = json.loads(response.text)
    assert document["user_id"] == ALICE
    assert {m["content"] for m in document["memories"]} == {"Alice's sister is called Jo", "Prefers short replies"}
    assert "Bob" not in response.text  # another user's memories never
    yaml_export = client.post(f"/people/{ALICE}/export", data={"csrf": token, "format": "yaml"})
    assert yaml_export.headers["content-type"].startswith("application/yaml") and "user_id: alice" in yaml_export.text
    assert client.post(f"/people/{ALICE}/export", data={"csrf": token, "format": "xml"}).status_code == 400
    entries = audit_rows(world, "export memories")
    assert [(e.actor, e.object, e.user_id) for e in entries] == [("root", f"user {ALICE}", ALICE)] * 2


def test_purge_needs_the_typed_address_then_deletes_only_that_person(world, client):
    db = world.store.db
    log_in(client)
    token = csrf_of(client.get(f"/people/{ALICE}").text)
    for typed in ("", BOB, "alice@example.or", "alice"):
        refused = client.post(f"/people/{ALICE}/purge", data={"csrf": token, "confirm": typed})
        assert refused.status_code == 400 and "does not match" in refused.text
    assert db.query_value("SELECT count(*) FROM memories WHERE user_id = ?", (ALICE,)) == 2
    assert not audit_rows(world, "purge user")
    done = client.post(f"/people/{ALICE}/purge", data={"csrf": token, "confirm": f" {ALICE.upper()} "})
    assert done.status_code == 200 and f"Purged {ALICE}" in done.text
    assert 'id="mailbox-left"' in done.text and "quinn memory purge alice@example.org --yes --mailbox" in done.text
    for table in ("memories", "memory_versions", "sessions", "messages", "mail_state", "passages"):
        assert db.query_value(f"SELECT count(*) FROM {table} WHERE user_id = ?", (ALICE,)) == 0, table
    assert db.query_value("SELECT count(*) FROM memories WHERE user_id = ?", (BOB,)) == 1
    assert db.query_value("SELECT count(*) FROM mail_state WHERE user_id = ?", (BOB,)) == 1
    [entry] = audit_rows(world, "purge user")
    assert entry.actor == "root" and entry.object == pseudonym(ALICE) and entry.user_id is None
    assert ALICE not in client.get("/audit").text and ALICE not in client.get("/people").text


def test_purge_runs_the_mailbox_part_when_the_console_has_it(world, client):
    asked: list[str] = []
    world.console.purge_mailbox = lambda user: asked.append(user) or 3
    log_in(client)
    token = csrf_of(client.get(f"/people/{BOB}").text)
    done = client.post(f"/people/{BOB}/purge", data={"csrf": token, "confirm": BOB})
    assert asked == [BOB] and 'id="mailbox-done"' in done.text and "3 messages deleted" in done.text
    assert "3 mails from the mailbox" in audit_rows(world, "purge user")[0].detail


def test_read_only_sees_no_forms_and_gets_403(world, client):
    log_in(client, "viewer")
    person = client.get(f"/people/{ALICE}").text
    memory = client.get(f"/memories/{world.memory_id}").text
    assert "/purge" not in person and "/export" not in person
    assert "/pin" not in memory and "/private" not in memory
    token = csrf_of(person)
    posts = {f"/memories/{world.memory_id}/pin": {"pinned": "1"}, f"/memories/{world.memory_id}/private":
             {"private": "1"}, f"/people/{ALICE}/export": {"format": "json"}, f"/people/{ALICE}/purge":
             {"confirm": ALICE}}  # fmt: skip
    for path, form in posts.items():
        response = client.post(path, data={"csrf": token, **form})
        assert response.status_code == 403 and "read-only" in response.text, path
    memory_row = world.store.get(world.memory_id)
    assert memory_row.current and not memory_row.immutable and not memory_row.private
    assert world.store.db.query_value("SELECT count(*) FROM memories WHERE user_id = ?", (ALICE,)) == 2
    assert not [e for e in audit_log.listing(world.store.db) if e.actor == "viewer"]


def test_attacker_address_stays_inert_on_the_purge_page(world, client):
    evil = "o'<b>x;rm@example.org"  # a legal local part (RFC 5322 atext), hostile to HTML and to a shell
    world.store.add(evil, "A memory", type="fact")
    log_in(client)
    token = csrf_of(client.get("/people").text)
    done = client.post(f"/people/{quote(evil, safe='@')}/purge", data={"csrf": token, "confirm": evil})
    assert done.status_code == 200 and "<b>" not in done.text
    assert "quinn memory purge &#39;o&#39;&#34;&#39;&#34;&#39;&lt;b&gt;x;rm@example.org&#39; --yes" in done.text
    assert world.store.db.query_value("SELECT count(*) FROM memories WHERE user_id = ?", (evil,)) == 0


def test_a_persons_page_shows_everything_else_that_shapes_their_replies(world, client):
    """Issue 35: the short-term state (beliefs included), conversation reviews with their reward, thread
    summaries, the graph and the files kept are on the person's page, escaped (their words are data)."""
    from quinn.agent import state
    from quinn.mailbox import Sessions
    from quinn.memory import Relation, save_graph

    store, now = world.store, datetime.now(UTC)
    with store.db.transaction() as tx:
        state.update_user_state(tx, ALICE, {"agent_beliefs": "Alice <b>prefers</b> trains."}, now)
        state.add_conversation_summary(tx, "s-1", ALICE, summary="Planned the lake trip.", feedback_text="thanks",
                                       reward_score=0.5, improvement_suggestion="Be brief.", prompt_version="reply@x",
                                       now=now)  # fmt: skip
    memory = store.add(ALICE, "Alice's sister Clara lives in Porto.")
    save_graph(store, ALICE, [("Alice", "person"), ("Clara", "person")], [Relation("Alice", "has sister", "Clara",
                                                                                  memory)], now)  # fmt: skip
    assert Sessions(store.db).summaries_of(ALICE) == []
    log_in(client)
    page = client.get(f"/people/{ALICE}").text
    shaping = page.split('id="shaping"')[1].split("<h2>")[0]
    assert "agent beliefs" in shaping and "Alice &lt;b&gt;prefers&lt;/b&gt; trains." in shaping
    assert "Planned the lake trip." in shaping and "0.5" in shaping and "Be brief." in shaping
    assert "Alice has sister Clara" in shaping and f"/memories/{memory}" in shaping


def test_forgetting_a_memory_takes_its_fact_out_of_what_was_written_from_it(world, client):
    """Issue 35: the console's forget of "Alice lives in Berlin" takes Berlin out of her short-term state, thread
    summaries, passages and graph (the audit log says where); Bob's Berlin stays."""
    from tests.agent.test_forgetting import berlin_rows, written_from_berlin

    store = world.store
    lives = written_from_berlin(store, ALICE, "Alice", 11)
    written_from_berlin(store, BOB, "Bob", 12)
    log_in(client)
    page = client.get(f"/memories/{lives}").text
    forgot = client.post(f"/memories/{lives}/forget", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert forgot.status_code == 303 and not store.get(lives).active
    assert berlin_rows(store, ALICE) == {}
    assert "Alice works as a pharmacist." in client.get(f"/people/{ALICE}").text
    assert len(berlin_rows(store, BOB)) == 8  # what written_from_berlin wrote: eight places
    [entry] = audit_rows(world, "forget memory")
    assert "also out of: 1 note of our recent conversations" in entry.detail, entry
