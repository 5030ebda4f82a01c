"""The admin commands (users, sessions, mail, prompts) against a real libSQL file, as an operator runs them.

The database is written by the daemon's own modules (ledger, outbox, sessions, memory store), then every
command runs as a ``quinn`` subprocess, in both forms: the table for people and ``--json`` (parsed).
``mail status --retry`` runs against the live lab: a mail the SMTP server rejected is retried and answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path

import pytest

from quinn.clock import utcnow
from quinn.db import Database
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.outbox import Outbox
from quinn.mailbox.parse import parse_email
from quinn.mailbox.threads import Sessions
from quinn.memory.store import MemoryStore
from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import Json, RecordedRequest, Text

ALICE, BOB = "alice@example.test", "bob@example.test"
SUBJECT = "[/b] Trip to Lisbon [red]"  # rich markup in mail data must print as it is
CONFIG = """
[imap]
host = "127.0.0.1"
port = 1
username = "quinn@example.test"
password_env = "QUINN_ADMIN_TEST_IMAP_PASSWORD"
[smtp]
host = "127.0.0.1"
port = 1
from_address = "quinn@example.test"
[llm]
model = "openai/gpt-test"
api_key_env = "QUINN_ADMIN_TEST_LLM_KEY"
[database]
url = "quinn.db"
"""


def email_bytes(sender: str, subject: str, body: str, message_id: str, in_reply_to: str | None = None,
                to: str = "quinn@example.test") -> bytes:  # fmt: skip
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"], msg["Message-ID"] = sender, to, subject, message_id
    msg["Date"] = "Sat, 21 Nov 2026 09:00:00 +0000"  # before the reply, which is stored as sent now
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    msg.set_content(body)
    return msg.as_bytes()


@pytest.fixture
def admin_db(tmp_path: Path) -> dict[str, object]:
    """A database as the daemon leaves it: two users, sessions, replies, a failure, a quarantine, memories."""
    config = tmp_path / "quinn.toml"
    config.write_text(CONFIG, encoding="utf-8")
    db = Database.open(str(tmp_path / "quinn.db"))
    ledger, outbox, sessions = MailLedger(db), Outbox(db), Sessions(db)
    store = MemoryStore(db, None)
    first = parse_email(email_bytes(ALICE, SUBJECT, "I fly to Lisbon on Friday.", "<a1@x.test>"))
    second = parse_email(email_bytes(ALICE, "Re: " + SUBJECT, "Which hotel?", "<a2@x.test>", "<a1@x.test>"))
    session = sessions.assign(first, ALICE)
    sessions.store_inbound(session, ALICE, first)
    sessions.assign(second, ALICE)
    sessions.store_inbound(session, ALICE, second)
    sessions.store_outbound(session, ALICE, "<r1@quinn>", "<a1@x.test>", "Re: " + SUBJECT, "quinn@example.test",
                            [ALICE], "Have a good flight.")  # fmt: skip
    for uid, (mid, state, reason, user) in enumerate(
        [("<a1@x.test>", "replied", "handle", ALICE), ("<a2@x.test>", "failed", "SMTP 550 5.7.1 Rejected", ALICE),
         ("<junk@x.test>", "quarantined", "unparseable: no headers", None),
         ("<b1@x.test>", "ignored", "auto-reply (Auto-Submitted: auto-replied)", BOB)], start=1
    ):  # fmt: skip
        key = MailKey("INBOX", 7, uid)
        ledger.receive(key)
        ledger.set(key, state, reason, message_id=mid, user_id=user)
        ledger.mark_moved(key)
    ledger.receive(MailKey("INBOX", 7, 5))
    ledger.defer(MailKey("INBOX", 7, 5), "LLM down", utcnow() + timedelta(minutes=5))
    outbox.put("<r1@quinn>", "<a1@x.test>", ALICE, session, [ALICE], b"raw", template="reply",
               prompt_version="reply@aaaaaaaaaaaa")  # fmt: skip
    outbox.mark("<r1@quinn>", "sent")
    outbox.put("<r2@quinn>", "<a2@x.test>", ALICE, session, [ALICE], b"raw", template="reply",
               prompt_version="reply@bbbbbbbbbbbb")  # fmt: skip
    outbox.mark("<r2@quinn>", "failed", "550 5.7.1 Rejected")
    store.add(ALICE, "Alice flies to Lisbon on Friday.", scope="episodic", type="goal")
    store.add(ALICE, "Alice prefers short answers.", scope="profile", type="preference")
    store.add(BOB, "Bob works nights.", scope="profile", type="fact")
    db.execute("INSERT INTO conversation_summaries (session_id, user_id, summary, reward_score, improvement_suggestion,"
               " prompt_version, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
               (session, ALICE, "Alice asked about her trip.", 0.75, "Ask for the dates up front.",
                "reply@aaaaaaaaaaaa", "2026-11-22T10:00:00+00:00"))  # fmt: skip
    db.close()
    return {"config": config, "session": session}


def quinn(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # No secrets in the environment: read-only admin commands must not need the IMAP password or the API key.
    base = {k: v for k, v in os.environ.items() if not k.startswith("QUINN_")}
    return subprocess.run([sys.executable, "-m", "quinn", *args, "-c", str(config)], capture_output=True, text=True,
                          timeout=60, env={**base, **(env or {})})  # fmt: skip


def as_json(result: subprocess.CompletedProcess[str]):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.lab  # runs a process
def test_users_list(admin_db):
    users = {u["user"]: u for u in as_json(quinn(admin_db["config"], "users", "list", "--json"))}
    assert set(users) == {ALICE, BOB}
    assert users[ALICE] | {"last_seen": None} == {"user": ALICE, "memories": 2, "sessions": 1, "messages": 3,
                                                   "mails": 2, "last_seen": None}  # fmt: skip
    assert users[BOB]["memories"] == 1 and users[BOB]["sessions"] == 0 and users[BOB]["mails"] == 1
    table = quinn(admin_db["config"], "users", "list")
    assert table.returncode == 0 and ALICE in table.stdout and "memories" in table.stdout


@pytest.mark.lab  # runs a process
def test_sessions_list_and_show(admin_db):
    listed = as_json(quinn(admin_db["config"], "sessions", "list", "--user", ALICE.upper(), "--json"))
    assert [s["id"] for s in listed] == [admin_db["session"]]
    assert listed[0]["messages"] == 3
    assert as_json(quinn(admin_db["config"], "sessions", "list", "--user", BOB, "--json")) == []
    shown = as_json(quinn(admin_db["config"], "sessions", "show", admin_db["session"], "--json"))
    assert shown["user"] == ALICE and shown["subject"] == SUBJECT
    assert [m["direction"] for m in shown["messages"]] == ["in", "in", "out"]
    assert "I fly to Lisbon on Friday." in shown["messages"][0]["body"]
    assert {"<a1@x.test>", "<a2@x.test>"} <= set(shown["message_ids"])
    table = quinn(admin_db["config"], "sessions", "show", admin_db["session"])
    assert table.returncode == 0, table.stderr
    assert "Have a good flight." in table.stdout and SUBJECT in table.stdout  # printed as text, not as markup


@pytest.mark.lab  # runs a process
def test_sessions_show_unknown_is_one_line_with_a_hint(admin_db):
    result = quinn(admin_db["config"], "sessions", "show", "no-such-session")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "quinn: no session no-such-session (hint: list them with `quinn sessions list [--user ADDRESS]`)"
    ]


@pytest.mark.lab  # runs a process
def test_mail_status(admin_db):
    report = as_json(quinn(admin_db["config"], "mail", "status", "--json"))
    assert report["counts"] == {"replied": 1, "failed": 1, "quarantined": 1, "ignored": 1, "deferred": 1}
    assert report["outbox"] == {"sent": 1, "failed": 1}
    attention = {item["key"]: item for item in report["attention"]}
    assert attention["INBOX:7:2"]["state"] == "failed"
    assert attention["INBOX:7:2"]["reason"] == "SMTP 550 5.7.1 Rejected"
    assert attention["INBOX:7:3"]["reason"] == "unparseable: no headers"
    assert attention["INBOX:7:5"]["next_attempt_at"]
    assert "INBOX:7:1" not in attention  # replied mail needs nobody
    table = quinn(admin_db["config"], "mail", "status")
    assert table.returncode == 0
    assert "SMTP 550 5.7.1 Rejected" in table.stdout and "--retry KEY" in table.stdout


@pytest.mark.parametrize(
    ("key", "message"),
    [("INBOX:7:1", "mail INBOX:7:1 is replied, not failed or quarantined (hint: only failed or quarantined mail can be "
                   "retried)"),
     ("INBOX:7:99", "no mail INBOX:7:99 in the ledger (hint: copy a key from `quinn mail status`)"),
     ("nonsense", "mail key 'nonsense' is not FOLDER:UIDVALIDITY:UID (hint: copy the key from `quinn mail status`)")],
)  # fmt: skip
@pytest.mark.lab  # runs a process
def test_mail_retry_refuses_what_it_cannot_retry(admin_db, key, message):
    result = quinn(admin_db["config"], "mail", "status", "--retry", key, env={"QUINN_ADMIN_TEST_IMAP_PASSWORD": "x"})
    assert result.returncode != 0
    assert result.stderr.strip() == f"quinn: {message}"


@pytest.mark.lab  # runs a process
def test_prompts_stats(admin_db):
    stats = {s["prompt_version"]: s for s in as_json(quinn(admin_db["config"], "prompts", "stats", "--json"))}
    assert stats["reply@aaaaaaaaaaaa"] == {
        "prompt_version": "reply@aaaaaaaaaaaa", "replies": 1, "summaries": 1, "avg_reward": 0.75,
        "last_used": stats["reply@aaaaaaaaaaaa"]["last_used"], "latest_suggestion": "Ask for the dates up front.",
    }  # fmt: skip
    assert stats["reply@bbbbbbbbbbbb"]["summaries"] == 0 and stats["reply@bbbbbbbbbbbb"]["avg_reward"] is None
    table = quinn(admin_db["config"], "prompts", "stats")
    assert table.returncode == 0 and "reply@aaaaaaaaaaaa" in table.stdout


@pytest.mark.lab  # runs a process
def test_admin_commands_refuse_a_missing_database(tmp_path):
    config = tmp_path / "quinn.toml"
    config.write_text(CONFIG.replace('url = "quinn.db"', 'url = "nowhere/quinn.db"'), encoding="utf-8")
    for args in (("users", "list"), ("mail", "status"), ("sessions", "list"), ("prompts", "stats")):
        result = quinn(config, *args, "--json")
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"quinn: database {tmp_path / 'nowhere' / 'quinn.db'} does not exist (hint:")
        assert not (tmp_path / "nowhere").exists()


def test_mail_retry_answers_a_failed_mail(mail_lab, lab_config, llm_server, quinn_daemon):
    alice = mail_lab.new_user("alice")
    config = lab_config(extra='[embeddings]\nbackend = "none"\n')

    def respond(request: RecordedRequest):
        if request.purpose == EXTRACTION:
            return Json({"new": [], "updated": [], "contradicted": []})
        return Text("Here is your answer.")

    llm_server.responder = respond
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    mail_lab.smtp.fail_next(1, 550)  # Quinn's reply is refused for good: the mail fails
    mail_lab.dovecot.append(config.address, email_bytes(alice, "Hello", "Please answer", "<retry-1@x.test>",
                                                        to=config.address))  # fmt: skip
    daemon.wait_for_log("-> failed")
    env = {"QUINN_TEST_IMAP_PASSWORD": config.env["QUINN_TEST_IMAP_PASSWORD"]}
    report = as_json(quinn(config.path, "mail", "status", "--json", env=env))
    [failed] = [item for item in report["attention"] if item["state"] == "failed"]
    assert failed["message_id"] == "<retry-1@x.test>" and "550" in failed["reason"]
    assert mail_lab.dovecot.messages(alice) == []

    without_password = quinn(config.path, "mail", "status", "--retry", failed["key"])
    assert without_password.returncode == 2 and "QUINN_TEST_IMAP_PASSWORD" in without_password.stderr
    done = as_json(quinn(config.path, "mail", "status", "--retry", failed["key"], "--json", env=env))
    assert done == {"key": failed["key"], "state": "retried", "moved": 1, "to": "INBOX"}

    [reply] = mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    assert b"Here is your answer." in reply
    daemon.wait_for_log("-> replied")
    report = as_json(quinn(config.path, "mail", "status", "--json", env=env))
    assert report["counts"].get("failed", 0) == 0 and report["counts"]["replied"] == 1
    assert report["counts"]["retried"] == 1
    assert daemon.terminate() == 0


@pytest.mark.lab  # runs a process
def test_database_copy_moves_everything_to_a_libsql_server(admin_db):
    from tests.lab.sqld import INSTALL_HINT, Sqld, find_sqld

    if find_sqld() is None:
        pytest.fail(f"sqld is not installed: {INSTALL_HINT}", pytrace=False)
    config = admin_db["config"]
    local = {args: as_json(quinn(config, *args, "--json")) for args in (("users", "list"), ("mail", "status"))}
    with Sqld() as server:
        done = as_json(quinn(config, "database", "copy", "--to", server.url, "--json"))
        assert done["to"] == server.url
        tables = done["tables"]
        assert tables["memories"] == 3 and tables["messages"] == 3 and tables["mail_state"] == 5
        assert tables["outbox"] == 2 and tables["conversation_summaries"] == 1 and tables["memory_versions"] >= 3
        assert not any("fts" in name for name in tables)  # rebuilt by the target's triggers, not copied
        remote = config.with_name("remote.toml")
        remote.write_text(CONFIG.replace('url = "quinn.db"', f'url = "{server.url}"'), encoding="utf-8")
        for args, expected in local.items():
            assert as_json(quinn(remote, *args, "--json")) == expected, args
        db = Database.open(server.url)
        try:  # full-text search works on the server: the triggers indexed the copied rows
            assert db.query_value("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'Lisbon'") == 1
            assert db.query_value("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'hotel'") == 1
            assert db.query_value("PRAGMA user_version") >= 1
        finally:
            db.close()
        again = quinn(config, "database", "copy", "--to", server.url)
        assert again.returncode == 1
        assert again.stderr.strip().startswith("quinn: target database is not empty (memories, messages, mail_state")


def test_memory_purge_with_mailbox_deletes_their_mail_too(mail_lab, lab_config):
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    config = lab_config(extra='[embeddings]\nbackend = "none"\n')
    quinn_address, dovecot = config.address, mail_lab.dovecot
    dovecot.append(quinn_address, email_bytes(alice, "Hi", "Note", "<p-1@x.test>", to=quinn_address), "Quinn.Processed")
    dovecot.append(quinn_address, email_bytes(quinn_address, "Re: Hi", "Reply", "<p-2@x.test>", to=alice),
                   "Quinn.Sent")  # fmt: skip
    dovecot.append(quinn_address, email_bytes(bob, "Hi", "Bob's", "<p-3@x.test>", to=quinn_address), "Quinn.Processed")
    env = {"QUINN_TEST_IMAP_PASSWORD": config.env["QUINN_TEST_IMAP_PASSWORD"]}

    without_password = quinn(config.path, "memory", "purge", alice, "--yes", "--mailbox")
    assert without_password.returncode == 2 and "QUINN_TEST_IMAP_PASSWORD" in without_password.stderr
    assert len(dovecot.messages(quinn_address, "Quinn.Processed")) == 2  # nothing was deleted

    done = as_json(quinn(config.path, "memory", "purge", alice, "--yes", "--mailbox", "--json", env=env))
    assert done["user"] == alice and done["removed"]["mailbox"] == 2
    assert dovecot.messages(quinn_address, "Quinn.Sent") == []
    [kept] = dovecot.messages(quinn_address, "Quinn.Processed")
    assert b"<p-3@x.test>" in kept  # bob's mail stays


@pytest.mark.lab  # runs a process
def test_users_list_and_the_user_metric_count_the_same_people(admin_db, tmp_path):
    """Carol's only trace is a mail in the ledger (an auto-reply of hers, ignored); the metric once counted
    sessions and memories only, the store memories and messages: all three now read ``quinn.users``."""
    from quinn.metrics import DatabaseCollector

    carol = "carol@example.test"
    db = Database.open(str(tmp_path / "quinn.db"))
    try:
        key = MailKey("INBOX", 7, 9)
        MailLedger(db).receive(key)
        MailLedger(db).set(key, "ignored", "auto-reply", message_id="<c1@x.test>", user_id=carol)
        listed = {u["user"] for u in as_json(quinn(admin_db["config"], "users", "list", "--json"))}
        metric = next(f for f in DatabaseCollector(db).collect() if f.name == "quinn_users")
        assert listed == {ALICE, BOB, carol}
        assert metric.samples[0].value == len(listed)
        assert MemoryStore(db, None).users() == sorted(listed)
    finally:
        db.close()


@pytest.mark.lab  # runs a process
def test_mail_drafts_lists_approves_and_discards_audited(admin_db, tmp_path):
    from quinn.agent import audit_log
    from quinn.mailbox.smtp import compose_reply

    db = Database.open(str(tmp_path / "quinn.db"))
    outbox, ids = Outbox(db), []
    for n in (1, 2):
        reply = compose_reply(parse_email(email_bytes(ALICE, f"Draft {n}", "Hi", f"<d{n}@x.test>")), f"Answer {n}",
                              own_address="quinn@example.test")  # fmt: skip
        outbox.put(reply.message_id, f"<d{n}@x.test>", ALICE, None, reply.recipients, reply.raw)
        outbox.mark(reply.message_id, "drafted")
        ids.append(reply.message_id)
    db.close()
    config = admin_db["config"]
    listed = as_json(quinn(config, "mail", "drafts", "--json"))
    assert [(d["id"], d["state"], d["subject"], d["body"]) for d in listed] == [
        (ids[0], "drafted", "Re: Draft 1", "Answer 1\n"), (ids[1], "drafted", "Re: Draft 2", "Answer 2\n")]  # fmt: skip
    approved = quinn(config, "mail", "drafts", "--approve", ids[0])
    assert approved.returncode == 0 and "the daemon sends it on its next pass" in approved.stdout
    assert as_json(quinn(config, "mail", "drafts", "--discard", ids[1], "--json")) == {
        "id": ids[1],
        "state": "discarded",
    }
    again = quinn(config, "mail", "drafts", "--discard", ids[0])
    assert again.returncode == 1 and f"reply {ids[0]} is approved, not a draft awaiting review" in again.stderr
    db = Database.open(str(tmp_path / "quinn.db"))
    try:
        assert [Outbox(db).get(i).state for i in ids] == ["approved", "discarded"]
        actions = [(e.action, e.object) for e in reversed(audit_log.listing(db))]
        assert actions == [("approve draft", f"draft {ids[0]}"), ("discard draft", f"draft {ids[1]}")]
    finally:
        db.close()
