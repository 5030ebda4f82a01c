"""Purge by email, end to end: "delete everything you know about me", confirmed, leaves nothing of the user.

Through ``quinn run`` with Dovecot, aiosmtpd, the real embedding model and the scripted model: alice and bob
have memories and conversations carrying unique markers (in memory text, mail bodies, subjects and the
Message-IDs of alice's mail). Alice asks for the purge, gets the question, answers YES. Then:

- the receipt in alice's inbox lists what was removed, per kind, with the counts the database had;
- no table (FTS shadow tables included) holds any of alice's markers or her address;
- neither do the database file's bytes, nor its -wal file;
- bob's memories and conversation are exactly as before.
"""

from __future__ import annotations

import ast
import email
import email.policy
import re
import uuid
from pathlib import Path

import pytest

from quinn.agent.memory_mail import PURGED_AS
from quinn.db import Database
from quinn.lab.wait import wait_for
from quinn.memory.store import MemoryStore
from tests.lab.brain import Brain
from tests.lab.inprocess import body_of, build_mail
from tests.lab.llm_server import Text
from tests.lab.mails import make_mail, plain_model, query
from tests.lab.smtp import mx_stamp

# Bob's memories as a purge of someone else could change them (not the access statistics, flushed at close).
BOB_MEMORIES = "SELECT id, content, version, valid_to, superseded_by, active, embedding FROM memories WHERE user_id = ?"


def receipt_counts(text: str) -> dict[str, int]:
    """The counts a purge receipt states, by table (read back through the receipt's own wording)."""
    counts = {}
    for table, names in PURGED_AS.items():
        found = re.search(r"(\d+) (?:" + "|".join(re.escape(n) for n in names) + r")(?:,|\))", text)
        if found:
            counts[table] = int(found.group(1))
    return counts


PURGED_KINDS = ("memories", "memory_versions", "memory_retrievals", "messages", "passages", "sessions", "session_ids")


def marker(who: str) -> str:
    """A unique token the full-text tokenizer keeps whole (letters then digits: no stemming, no split)."""
    return f"{who}mark{uuid.uuid4().int % 10**12:012d}"


def every_row(db_path: Path) -> dict[str, list[tuple]]:
    """Every row of every table (FTS shadow tables too), read from the file."""
    tables = [name for (name,) in query(db_path, "SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {table: query(db_path, f'SELECT * FROM "{table}"') for table in tables}


def found_in_rows(rows: dict[str, list[tuple]], needles: list[str]) -> list[str]:
    """``table: needle`` for each needle (case-insensitive: FTS stores lowercase tokens) found in a table."""
    hits = []
    for table, items in rows.items():
        text = "\n".join(repr(value) for row in items for value in row).lower()
        text += "\n".join(bytes(v).decode("latin-1").lower() for row in items for v in row if isinstance(v, bytes))
        hits += [f"{table}: {needle}" for needle in needles if needle.lower() in text]
    return hits


def found_in_files(db_path: Path, needles: list[str]) -> list[str]:
    """``file: needle`` for each needle in the bytes of the database file or its -wal file."""
    hits = []
    for path in (db_path, db_path.with_name(db_path.name + "-wal")):
        if path.exists():
            data = path.read_bytes().lower()
            hits += [f"{path.name}: {needle}" for needle in needles if needle.lower().encode() in data]
    return hits


def reply_to(dovecot, user: str, message_id: str) -> email.message.EmailMessage | None:
    for raw in dovecot.messages(user):
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        if str(parsed["In-Reply-To"] or "").strip() == message_id:
            return parsed  # type: ignore[return-value]
    return None


def test_purge_by_email_leaves_nothing(dovecot, smtp_lab, llm_server, lab_config, quinn_daemon, users, local_embedder):
    alice, bob = users("alice"), users("bob")
    hexes = {alice: alice.split("-")[1].split("@")[0]}  # the unique part of her address (FTS splits addresses)
    marks = {who: [marker(who[:5]) for _ in range(6)] for who in (alice, bob)}
    config = lab_config()
    quinn = config.address
    store = MemoryStore(Database.open(str(config.db_path)), local_embedder)
    try:
        for who in (alice, bob):
            m = marks[who]
            store.add(who, f"{who} keeps the spare key in box {m[0]}.", type="personal", scope="profile")
            store.add(who, f"{who} works on the greenhouse project {m[1]}.", type="fact", scope="episodic")
            first = store.add(who, f"{who} waters the plants on Mondays ({m[2]}).", type="fact", scope="episodic")
            store.update(first, f"{who} waters the plants on Tuesdays ({m[2]}).", user_id=who)
    finally:
        store.close()
    brain = Brain(llm_server)
    brain.reply = lambda request: Text("Happy to help with the greenhouse.")
    for who in (alice, bob):  # extraction learns one more marker from each one's mail
        learnt = {"content": f"{who} grows tomatoes named {marks[who][4]}.", "type": "fact", "importance": 0.6}
        brain.learn[marks[who][3]] = {"new": [learnt], "updated": [], "contradicted": []}
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    def converse(who: str, subject: str, body: str, message_id: str, **kwargs) -> email.message.EmailMessage:
        smtp_lab.send(who, quinn, make_mail(who, quinn, subject, body, message_id=message_id, **kwargs))
        return wait_for(lambda: reply_to(dovecot, who, message_id), f"the reply to {message_id}", timeout_s=90,
                        log=daemon.log)  # fmt: skip

    for who in (bob, alice):
        m = marks[who]
        converse(who, f"Greenhouse {m[5]}", f"How is the greenhouse project going? Note {m[3]}: my tomatoes, "
                 f"named {m[4]}, are ripening and I would like a plan for the winter.",
                 f"<{m[5]}.1@example.test>")  # fmt: skip
    a = marks[alice]
    wait_for(lambda: query(config.db_path, "SELECT count(*) FROM memories WHERE content LIKE ?", (f"%{a[4]}%",))[0][0],
             "the memory learnt from alice's mail", log=daemon.log)  # fmt: skip
    question = converse(alice, f"Privacy {a[5]}", "Please delete everything you know about me.",
                        f"<{a[5]}.2@example.test>")  # fmt: skip
    assert len(mail_in_folders(dovecot, quinn, alice)) >= 3  # her mails and Quinn's replies, filed (the control)
    assert "reply to this email with YES" in question.get_body(("plain",)).get_content()
    before = _alice_counts(config.db_path, alice)
    bob_before = query(config.db_path, BOB_MEMORIES, (bob,))
    messages_before = query(config.db_path, "SELECT count(*) FROM messages")[0][0]
    [code] = set(re.findall(r"Q-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", question.get_body(("plain",)).get_content()))
    receipt = converse(alice, f"Re: Privacy {a[5]}", f"Yes, delete it all.\n\n> Confirmation code: {code}",
                       f"<{a[5]}.3@example.test>", in_reply_to=str(question["Message-ID"]),
                       references=[f"<{a[5]}.2@example.test>", str(question["Message-ID"])])  # fmt: skip
    text = receipt.get_body(("plain",)).get_content()
    removed = receipt_counts(text)
    # Her mail, and Quinn's replies to her, leave Quinn's folders too; Bob's stay.
    try:
        gone = wait_for(lambda: not mail_in_folders(dovecot, quinn, alice), "alice's mail gone from the mailbox",
                        log=daemon.log)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"left in {mail_in_folders(dovecot, quinn, alice)}: {exc}") from None
    assert gone and mail_in_folders(dovecot, quinn, bob)
    assert "mails of the purged user deleted from the mailbox" in daemon.log()
    assert daemon.terminate() == 0
    # The receipt leaves out bookkeeping the user never saw; the operator's log line has every count.
    [logged] = re.findall(r"purge confirmed by \S+: (\{.*\})", daemon.log())
    removed |= {k: v for k, v in ast.literal_eval(logged).items() if k not in PURGED_AS}
    rows = every_row(config.db_path)
    leftovers = found_in_rows(rows, [*a, alice, hexes[alice]]) + found_in_files(config.db_path, [*a, hexes[alice]])
    bob_after = query(config.db_path, BOB_MEMORIES, (bob,))
    print(f"purge: receipt lists {removed}; alice's rows before the purge {before}; leftovers of alice "
          f"{len(leftovers)}; bob's memories {len(bob_before)} before, {len(bob_after)} after")  # fmt: skip
    assert text.startswith("Done: I deleted everything I knew about you"), text
    for kind in PURGED_KINDS:  # counts per kind, as the database had them (+ the YES mail's message and id)
        assert removed.get(kind) == before[kind] + (kind in ("messages", "session_ids")), (kind, removed, before)
    assert removed["memories"] >= 5 and removed["memory_retrievals"] >= 1 and removed["mail_state"] >= 3
    assert removed["passages"] >= 2  # her greenhouse mail and the reply to it were recallable (issue 14)
    assert not leftovers, "alice's data is still in the database:\n" + "\n".join(leftovers)
    assert bob_after == bob_before
    assert len(rows["messages"]) == messages_before - before["messages"]
    assert found_in_rows({"messages": rows["messages"]}, [marks[bob][3]]), "bob's conversation must stay"


def mail_in_folders(dovecot, owner: str, who: str) -> list[str]:
    """The folders of ``owner``'s mailbox holding a message from, to or copying ``who`` (one entry per message)."""
    found = []
    for folder in dovecot.folders(owner):
        for raw in dovecot.messages(owner, folder):
            message = email.message_from_bytes(raw, policy=email.policy.default)
            if who in " ".join(str(message.get(h, "")) for h in ("From", "To", "Cc")):
                found.append(folder)
    return found


def _alice_counts(db_path: Path, user: str) -> dict[str, int]:
    """What the purge should remove, counted before it runs."""
    sessions = "(SELECT id FROM sessions WHERE user_id = ?)"
    counts = {
        table: query(db_path, f"SELECT count(*) FROM {table} WHERE user_id = ?", (user,))[0][0]
        for table in ("memories", "memory_versions", "messages", "passages", "sessions")
    }
    counts["session_ids"] = query(db_path, f"SELECT count(*) FROM session_ids WHERE session_id IN {sessions}",
                                  (user,))[0][0]  # fmt: skip
    counts["memory_retrievals"] = query(
        db_path, f"SELECT count(*) FROM memory_retrievals WHERE memory_id IN (SELECT id FROM memories WHERE user_id"
        f" = ?) OR session_id IN {sessions}", (user, user))[0][0]  # fmt: skip
    return counts


async def test_a_receipt_that_waited_for_smtp_stores_nothing_again(make_quinn, mail_lab, llm_server) -> None:
    """The receipt cannot leave (SMTP down): the confirming mail waits and is taken up again; the retry sends the
    receipt written before and stores nothing of the purged user again (no session, no message, no ledger ids)."""
    llm_server.responder = plain_model
    quinn = await make_quinn('[embeddings]\nbackend = "none"\n')
    alice = mail_lab.new_user("alice")
    secret = marker("alice")
    await quinn.send(alice, "Note", f"Hi Quinn, remember my locker code is {secret}.")
    await quinn.send(alice, "Privacy", "Please delete everything you know about me.")
    question = quinn.replies(alice, 2)[-1]
    [code] = set(re.findall(r"Q-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", body_of(question)))
    mail_lab.smtp.down()
    confirm_id, raw = build_mail(alice, quinn.address, "Re: Privacy", f"Yes, delete it all.\n\n> {code}",
                                 in_reply_to=str(question["Message-ID"]))  # fmt: skip
    mail_lab.dovecot.append(quinn.address, mx_stamp(raw, alice))  # through the MX, before SMTP went down
    await quinn.process()
    [(reason,)] = quinn.query("SELECT reason FROM mail_state WHERE state = 'deferred'")
    assert "SMTP" in reason
    mail_lab.smtp.up()
    quinn.execute("UPDATE mail_state SET next_attempt_at = '2000-01-01T00:00:00+00:00' WHERE state = 'deferred'")
    await quinn.process()  # the retry, as when its time has come
    receipt = quinn.replies(alice, 3)[-1]
    assert str(receipt["In-Reply-To"]) == confirm_id
    text = body_of(receipt)
    assert text.startswith("Done: I deleted everything I knew about you (") and "(1 memory," in text, text
    leftovers = found_in_rows(every_row(quinn.config.db_path), [secret, alice, confirm_id])
    assert not leftovers, "after the retried receipt:\n" + "\n".join(leftovers)


async def test_a_review_suggestion_leaves_no_byte_after_a_purge(job_bench, llm_server) -> None:
    """Issue 35: the improvement job copied review suggestions, written about a person's conversation, into its
    run log (job_runs.counts) and the proposal's evidence, where no purge reached them. Now the run log and the
    evidence keep review ids; a purge deletes the proposal drawn from the person's reviews; no byte is left."""
    from quinn.agent import proposals, purge
    from quinn.agent.prompts import PromptStore
    from quinn.clock import iso, utcnow
    from tests.lab.llm_server import Json, RecordedRequest

    alice, bob = "alice@example.test", "bob@example.test"
    secret = marker("alice")
    version, text = PromptStore().text_of("reply")
    proposals.keep_version(job_bench.db, version, "reply", text, utcnow())
    for index, (who, suggestion) in enumerate([(alice, f"Mention {secret} less often."), (alice, "Be shorter."),
                                               (bob, "Keep answers shorter.")]):  # fmt: skip
        job_bench.db.execute(
            "INSERT INTO conversation_summaries (session_id, user_id, summary, reward_score, improvement_suggestion,"
            " prompt_version, created_at) VALUES (?, ?, 'A conversation.', -0.2, ?, ?, ?)",
            (f"s-{index}", who, suggestion, version, iso(utcnow())),
        )  # fmt: skip

    def rewriter(request: RecordedRequest):  # a model quotes what it was asked to answer
        return Json({"source": text + "\n", "rationale": f"Answers: Mention {secret} less often."})

    llm_server.responder = rewriter
    outcome = await job_bench.runner().run_job("improvement")
    assert outcome.status == "ok" and outcome.counts["created"] == 1, outcome
    [proposal] = proposals.listing(job_bench.db)
    assert f"Mention {secret} less often." in proposal.evidence["suggestions"]  # shown while the review exists
    assert secret not in job_bench.db.query("SELECT counts FROM job_runs")[0][0]  # the run log keeps ids

    counts = purge.purge(job_bench.store, alice)
    assert counts["prompt_proposals"] == 1
    assert proposals.listing(job_bench.db) == []  # pending and drawn from alice's reviews: deleted
    db_path = Path(job_bench.config.database.url)
    assert not found_in_rows(every_row(db_path), [secret]) and not found_in_files(db_path, [secret])
    assert job_bench.db.query("SELECT improvement_suggestion FROM conversation_summaries") == [
        ("Keep answers shorter.",)]  # fmt: skip


@pytest.mark.lab  # a second process reads the file
def test_a_purge_with_a_concurrent_reader_leaves_no_byte_or_says_it_could_not(tmp_path: Path) -> None:
    """A backup or a second console holding a read transaction keeps the checkpoint after the vacuum from copying
    the rewritten pages into the file: the purge tries again, and when the reader outlasts the tries its counts,
    its receipt and the operator's log say the bytes are still there; the next vacuum after the reader wipes them."""
    import subprocess
    import sys

    from quinn.agent import purge
    from quinn.agent.memory_mail import purge_report
    from quinn.memory import NOT_WIPED

    db_path = tmp_path / "quinn.db"
    secret = marker("alice")
    store = MemoryStore(Database.open(str(db_path)), None)
    try:
        store.add("alice@example.test", f"Alice keeps the spare key in box {secret}.")
        store.db.vacuum()  # the memory is in the main file, not only in the log
        assert found_in_files(db_path, [secret])
        reader = subprocess.Popen(  # a separate process in a read transaction, as `quinn database copy` or a backup
            [sys.executable, "-c", "import sqlite3, sys; d = sqlite3.connect(sys.argv[1], isolation_level=None); "
             "d.execute('BEGIN'); print(d.execute('SELECT count(*) FROM memories').fetchall(), flush=True); "
             "sys.stdin.readline()", str(db_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "[(1,)]"
            counts = purge.purge(store, "alice@example.test")
            left = found_in_files(db_path, [secret])
            assert not left or counts.get(NOT_WIPED) == 1, f"the purge reported done with {left}"
            if left:
                assert "another program was reading my database" in purge_report(counts)
        finally:
            assert reader.stdin is not None
            reader.stdin.write("\n")
            reader.stdin.close()
            reader.wait(timeout=30)
            if reader.stdout is not None:
                reader.stdout.close()
        assert store.db.vacuum() is True  # the reader gone, the next vacuum reaches the bytes
        assert not found_in_files(db_path, [secret])
    finally:
        store.close()
