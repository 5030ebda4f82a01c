"""`quinn import` through the real lab (issue 32): an mbox, a Maildir and an IMAP folder on the real Dovecot, taken
in by the real CLI (``quinn.cli.main``; a subprocess where it is to be killed), with the real embedder, the
scripted model for extraction and the session review, and the libSQL file read back. What is asserted is what
Quinn stores: ledger rows, sessions, messages, recall passages, attached files, memories and their versions,
conversation summaries; and what it must not do: send anything, change the source, take in mail nobody vouched
for, lose a mail that is not mail.
"""

from __future__ import annotations

import contextlib
import io
import json
import mailbox
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from quinn.agent.consent import opt_out
from quinn.cli import main
from quinn.db import Database
from tests.lab.brain import Brain, memory_id
from tests.lab.daemon import LabConfig
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import Json, RecordedRequest, Text
from tests.lab.mails import query
from tests.lab.smtp import MailLab, mx_stamp

ALICE = "alice@example.test"
BOB = "bob@elsewhere.test"
PERMIT = b"Parking permit number: PX-4411\n"
GARBAGE = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n"


def history(quinn: str) -> dict[str, bytes]:
    """Alice's history as her mail server stored it (stamped by the lab's MX), a list mail, and one mail of Bob
    that nobody authenticated. Keys name the mails in the assertions."""
    when = [datetime(2023, 3, 1, 9, tzinfo=UTC), datetime(2023, 3, 2, 9, tzinfo=UTC),
            datetime(2023, 6, 10, 9, tzinfo=UTC), datetime(2024, 1, 5, 9, tzinfo=UTC),
            datetime(2024, 2, 1, 9, tzinfo=UTC)]  # fmt: skip
    a1, raw_a1 = build_mail(ALICE, "support@old.example.test", "Moving", "Hi, I live in Lisbon now and work at "
                            "Acme as a designer.", date=when[0], message_id="<a1@example.test>")  # fmt: skip
    _, raw_a2 = build_mail(ALICE, "support@old.example.test", "Re: Moving", "Also: my locker is number 12.",
                           date=when[1], in_reply_to=a1, message_id="<a2@example.test>")  # fmt: skip
    _, raw_list = build_mail("news@example.test", quinn, "Newsletter", "Our weekly news.", name="News",
                             date=when[2], message_id="<list1@example.test>")  # fmt: skip
    raw_list = raw_list.replace(b"Subject:", b"List-Id: <news.example.test>\nSubject:", 1)
    _, raw_bob = build_mail(BOB, quinn, "Hello", "I am Bob and I live in Oslo.", name="Bob", date=when[3],
                            message_id="<b1@elsewhere.test>")  # fmt: skip
    _, raw_b1 = build_mail(ALICE, quinn, "New address", "I moved to Porto last month; my parking permit is "
                           "attached.", date=when[4], message_id="<a3@example.test>",
                           attachments=(("parking.txt", "text/plain", PERMIT),))  # fmt: skip
    return {"a1": mx_stamp(raw_a1, ALICE), "a2": mx_stamp(raw_a2, ALICE),
            "list": mx_stamp(raw_list, "news@example.test"), "bob": raw_bob, "a3": mx_stamp(raw_b1, ALICE)}  # fmt: skip


def history_mbox(config: LabConfig, folder: Path) -> Path:
    """``history`` as an mbox file in ``folder``."""
    path = folder / "archive.mbox"
    box = mailbox.mbox(path)
    for raw in history(config.address).values():
        box.add(raw)
    box.close()
    return path


def teach(brain: Brain) -> None:
    """The scripted model: Lisbon learnt, then contradicted by Porto; every session review gives a summary."""
    brain.learn["Lisbon"] = {"new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    brain.learn["Porto"] = lambda request: {
        "contradicted": [
            {"id": memory_id(request, "Alice lives in Lisbon."), "content": "Alice moved to Porto.", "type": "fact"}
        ]
    }
    brain.learn["Oslo"] = {"new": [{"content": "Bob lives in Oslo.", "type": "fact"}]}

    def reply(request: RecordedRequest) -> Any:
        if request.purpose == "SessionReview":
            return Json({"summary": "Alice wrote about where she lives."})
        return Text("an import never asks for a reply")

    brain.reply = reply


def quinn_import(config: LabConfig, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """``quinn import ... --json`` as an operator runs it: through ``quinn.cli.main`` in this process (the CLI's
    own code, without a second interpreter's start-up), or with ``fault`` (QUINN_FAULT, a SIGKILL at that point)
    as a subprocess, which the kill ends."""
    argv = ["import", *args, "--json", "-c", str(config.path)]
    if fault:
        env = {**os.environ, **config.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "QUINN_FAULT": fault}
        return subprocess.run([sys.executable, "-m", "quinn", *argv], capture_output=True, text=True, env=env,
                              timeout=240)  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    saved = {name: os.environ.get(name) for name in config.env}
    os.environ.update(config.env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def stored(db: Path) -> dict[str, Any]:
    """What the import left in the database, as the assertions read it."""

    def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return query(db, sql, params)

    return {
        "ledger": sorted(rows("SELECT message_id, state FROM mail_state WHERE folder LIKE 'import:%'"), key=str),
        "sessions": rows("SELECT user_id, count(*) FROM sessions WHERE merged_into IS NULL GROUP BY user_id"),
        "messages": sorted(r[0] for r in rows("SELECT message_id FROM messages WHERE direction = 'in'")),
        "passages": rows("SELECT count(*) FROM passages")[0][0],
        "file_passages": [r[0] for r in rows("SELECT content FROM passages WHERE document_id IS NOT NULL")],
        "documents": [r[0] for r in rows("SELECT kind FROM documents")],
        "current": sorted(r[0] for r in rows("SELECT content FROM memories WHERE valid_to IS NULL")),
        "memories": rows("SELECT count(*) FROM memories")[0][0],
        "versions": rows("SELECT count(*) FROM memory_versions")[0][0],
        "summaries": rows("SELECT count(*) FROM conversation_summaries")[0][0],
        "queued": rows("SELECT count(*) FROM learning_queue")[0][0],
        "outbox": rows("SELECT count(*) FROM outbox")[0][0],
    }


def assert_alice_imported(db: Path) -> dict[str, Any]:
    """Alice's three mails in two threads, Porto current, her file searchable; nobody else's memory."""
    now = stored(db)
    assert now["messages"] == ["<a1@example.test>", "<a2@example.test>", "<a3@example.test>"]
    assert now["sessions"] == [(ALICE, 2)]  # a1 and its reply a2 are one thread; a3 another
    assert now["current"] == ["Alice moved to Porto."]  # Lisbon closed by the later mail, kept in history
    assert now["memories"] == 2 or now["versions"] >= 2
    assert any("PX-4411" in text for text in now["file_passages"]) and now["documents"] == ["text"]
    assert now["passages"] > len(now["file_passages"])  # the mails' own text is searchable too
    assert now["queued"] == 0 and now["outbox"] == 0  # all learnt, nothing answered
    return now


def test_maildir_import_stores_threads_memory_files_and_judges_trust(lab_config, brain: Brain, mail_lab: MailLab,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    config = lab_config(idle=False)
    mails = history(config.address)
    box = mailbox.Maildir(tmp_path / "Maildir", create=True)
    for raw in mails.values():
        box.add(raw)
    (tmp_path / "Maildir" / "new" / "0000.scan.pdf").write_bytes(GARBAGE)  # not mail: quarantined, never lost
    teach(brain)
    source = str(tmp_path / "Maildir")

    dry = summary_of(quinn_import(config, source, "--dry-run"))
    assert dry["outcomes"] == {"imported": 3, "ignored": 1, "not trusted": 1, "quarantined": 1}
    assert not config.db_path.exists()  # a dry run writes nothing, not even a schema
    assert not brain.server.requests or all(r.kind == "embeddings" for r in brain.server.requests)

    first = summary_of(quinn_import(config, source))
    assert first["outcomes"] == {"imported": 3, "ignored": 1, "not trusted": 1, "quarantined": 1}, first
    assert first["not_vouched_senders"] == {BOB: 1}
    assert "list mail" in " ".join(first["reasons"])
    [quarantined] = first["quarantined"]
    assert "not an email" in quarantined["reason"] and Path(quarantined["copy"]).read_bytes() == GARBAGE
    assert (tmp_path / "Maildir" / "new" / "0000.scan.pdf").read_bytes() == GARBAGE  # the source is untouched
    now = assert_alice_imported(config.db_path)
    # Memory by thread: one extraction for a1+a2 (dated, in one call), one for a3; then the latest thread reviewed
    # (the person's short-term state); the older one, with no reply of Quinn's to judge, closed without a review.
    extractions = brain.extractions()
    assert len(extractions) == 2, extractions
    assert "Lisbon" in extractions[0] and "locker" in extractions[0] and "[2023-03-02]" in extractions[0]
    assert first["learning"] == {"batches": 2, "mails": 3, "memories_new": 1, "memories_updated": 1, "deferred": 0}
    assert now["summaries"] == 1 and first["jobs"]["session_close"].startswith("ok")
    assert query(config.db_path, "SELECT DISTINCT status FROM sessions") == [("closed",)]
    assert len(brain.requests("SessionReview")) == 1
    assert not brain.requests("reply") and not mail_lab.dovecot.messages(ALICE)  # nothing answered, nothing sent

    again = summary_of(quinn_import(config, source))  # idempotent: nothing new
    assert again["outcomes"] == {"already imported": 3, "ignored": 1, "not trusted": 1, "quarantined": 1}
    assert stored(config.db_path) == now and len(brain.extractions()) == 2
    looked = summary_of(quinn_import(config, source, "--dry-run", "--vouch", BOB))  # reads the ledger, writes nothing
    assert looked["outcomes"] == {"already imported": 3, "ignored": 1, "imported": 1, "quarantined": 1}
    assert stored(config.db_path) == now

    vouched = summary_of(quinn_import(config, source, "--vouch", "elsewhere.test"))  # the operator's word
    assert vouched["outcomes"]["imported"] == 1 and vouched["people"] == [ALICE, BOB]
    assert "Bob lives in Oslo." in stored(config.db_path)["current"]
    assert query(config.db_path, "SELECT user_id FROM memories WHERE content = 'Bob lives in Oslo.'") == [(BOB,)]


def test_mbox_import_resumes_after_a_kill_without_duplicates(lab_config, brain: Brain, tmp_path: Path) -> None:
    config = lab_config(idle=False)
    path = history_mbox(config, tmp_path)
    teach(brain)

    killed = quinn_import(config, str(path), fault="after_store:2")  # the 2nd mail stored, not queued, not done
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert stored(config.db_path)["messages"] == ["<a1@example.test>", "<a2@example.test>"]
    killed = quinn_import(config, str(path), fault="after_learn:1")  # the first thread's memories stored
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert stored(config.db_path)["current"] == ["Alice lives in Lisbon."]

    done = summary_of(quinn_import(config, str(path)))  # every mail was taken in by the second run
    assert done["outcomes"] == {"already imported": 3, "ignored": 1, "not trusted": 1}, done
    # The first thread's batch was interrupted after its memories were stored: done without asking again.
    assert done["learning"] == {"batches": 2, "mails": 3, "memories_new": 0, "memories_updated": 1, "deferred": 0}
    assert_alice_imported(config.db_path)
    assert len(brain.extractions()) == 2
    twice = "SELECT message_row, position FROM passages GROUP BY message_row, position, document_id HAVING count(*) > 1"
    assert query(config.db_path, twice) == []  # the mail stored before the first kill was not indexed twice
    assert query(config.db_path, "SELECT count(*) FROM memories WHERE content = 'Alice lives in Lisbon.'") == [(1,)]


def test_a_mail_whose_text_no_longer_parses_stays_queued_while_its_thread_is_learnt(
    lab_config, brain: Brain, tmp_path: Path
) -> None:
    """A batch learns the mails of one thread together; one that no longer parses when its turn comes is left on
    the learning queue for a rerun, not marked learnt with the others."""
    config = lab_config(idle=False)
    path = history_mbox(config, tmp_path)
    teach(brain)
    brain.learn["Porto"] = {"new": [{"content": "Alice moved to Porto.", "type": "fact"}]}  # Lisbon comes later
    killed = quinn_import(config, str(path), fault="before_learn:1")  # all taken in, nothing learnt yet
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    db = Database.open(str(config.db_path))  # a1's queued copy is damaged since
    try:
        db.execute("UPDATE learning_queue SET raw = X'' WHERE message_id = '<a1@example.test>'")
    finally:
        db.close()
    again = quinn_import(config, str(path))
    assert again.returncode == 1, again.stderr[-2000:]  # something is left to do: run again
    done = json.loads(again.stdout)
    assert done["learning"]["deferred"] == 1 and done["learning"]["mails"] == 2, done["learning"]  # a2, a3
    assert query(config.db_path, "SELECT message_id FROM learning_queue") == [("<a1@example.test>",)]


def test_an_archive_with_an_unreadable_file_a_forged_earlier_copy_and_a_fragment_loses_nothing(
    lab_config, brain: Brain, tmp_path: Path
) -> None:
    """A dangling link is named with how to fix it, and the rest is imported; an unstamped copy of a mail, dated
    before the stamped one, does not hold the stamped one back; a fragment that is not mail is quarantined with a
    copy, named by its source, written again and listed by a rerun that finds it missing."""
    config = lab_config(idle=False)
    mails = history(config.address)
    forged = mails["a1"].replace(b"Date: ", b"X-Old-Date: ", 1).replace(
        b"Subject:", b"Date: Tue, 28 Feb 2023 09:00:00 +0000\nSubject:", 1)  # fmt: skip
    forged = b"\n".join(line for line in forged.split(b"\n") if not line.startswith(b"Authentication-Results"))
    box = mailbox.Maildir(tmp_path / "Maildir", create=True)
    second = mails["a1"].replace(b"Subject:", b"X-Copy: 2\nSubject:", 1)  # the same mail again, other bytes
    for raw in (forged, mails["a1"], second, b"Dear Quinn,\nthis is a letter, not a mail.\n"):
        box.add(raw)
    (tmp_path / "Maildir" / "new" / "9999.dangling").symlink_to(tmp_path / "gone.eml")
    teach(brain)
    quarantine = tmp_path / "quarantine"
    expected = {"imported": 1, "duplicate": 1, "not trusted": 1, "quarantined": 1, "unreadable": 1}
    dry = quinn_import(config, str(tmp_path / "Maildir"), "--dry-run")
    assert json.loads(dry.stdout)["outcomes"] == expected and not config.db_path.exists()  # as the run will find
    first = quinn_import(config, str(tmp_path / "Maildir"), "--quarantine-dir", str(quarantine))
    assert first.returncode == 1, first.stderr[-2000:]  # the link is to fix
    report = json.loads(first.stdout)
    assert report["outcomes"] == expected, report
    assert [u["where"].rsplit(" ", 1)[-1] for u in report["unreadable"]] == ["9999.dangling"]
    assert "FileNotFoundError" in report["unreadable"][0]["reason"]
    assert stored(config.db_path)["messages"] == ["<a1@example.test>"]
    (copy,) = [q["copy"] for q in report["quarantined"]]
    assert Path(copy).read_bytes() == b"Dear Quinn,\nthis is a letter, not a mail.\n"
    shutil.rmtree(quarantine)  # lost, or never written by a killed run
    (tmp_path / "Maildir" / "new" / "9999.dangling").unlink()
    second = summary_of(quinn_import(config, str(tmp_path / "Maildir"), "--quarantine-dir", str(quarantine)))
    assert second["outcomes"] == {"already imported": 1, "duplicate": 2, "quarantined": 1}, second
    assert [q["copy"] for q in second["quarantined"]] == [copy] and Path(copy).exists()


def test_imap_folder_import_reads_without_changing_the_folder(lab_config, brain: Brain, mail_lab: MailLab) -> None:
    config = lab_config(idle=False)
    dovecot = mail_lab.dovecot
    for raw in history(config.address).values():
        dovecot.append(config.address, raw, folder="Archive")
    before = dovecot.messages(config.address, "Archive")
    teach(brain)

    result = summary_of(quinn_import(config, "imap:Archive"))
    assert result["outcomes"] == {"imported": 3, "ignored": 1, "not trusted": 1}, result
    assert_alice_imported(config.db_path)
    assert dovecot.messages(config.address, "Archive") == before  # nothing moved, deleted or rewritten
    assert all(b"\\Seen" not in flags for flags in dovecot.flags(config.address, "Archive"))
    with dovecot.connect(config.address) as client:  # the folder was examined, not selected: still \Recent
        assert client.select_folder("Archive")[b"RECENT"] == len(before)
    rows = query(config.db_path, "SELECT DISTINCT folder, uidvalidity > 0 FROM mail_state")
    assert rows == [("import:imap:Archive", 1)]

    # The old address's Sent folder: our answer to Alice joins her first thread as its outbound side, is
    # searchable for her, and teaches nothing (it is not her words).
    extractions = len(brain.extractions())
    _, answer = build_mail("support@old.example.test", ALICE, "Re: Moving", "Welcome to Lisbon! Your locker key "
                           "is at the front desk.", name="Old desk", date=datetime(2023, 3, 1, 15, tzinfo=UTC),
                           in_reply_to="<a1@example.test>", message_id="<s1@old.example.test>")  # fmt: skip
    dovecot.append(config.address, answer, folder="Sent")
    sent = summary_of(quinn_import(config, "imap:Sent", "--sent"))
    assert sent["outcomes"] == {"imported": 1} and sent["people"] == [ALICE]
    [(session, user, sent_at)] = query(config.db_path, "SELECT session_id, user_id, sent_at FROM messages"
                                       " WHERE direction = 'out'")  # fmt: skip
    assert user == ALICE and sent_at.startswith("2023-03-01T15")
    first = query(config.db_path, "SELECT session_id FROM messages WHERE message_id = '<a1@example.test>'")
    assert first == [(session,)]  # the same thread as the mail it answers
    found = query(config.db_path, "SELECT count(*) FROM passages WHERE message_id = '<s1@old.example.test>'")
    assert found[0][0] >= 1 and len(brain.extractions()) == extractions

    missing = quinn_import(config, "imap:NoSuchFolder")
    assert missing.returncode == 2 and "no IMAP folder 'NoSuchFolder'" in missing.stderr


@pytest.mark.parametrize("content", [GARBAGE, b"", b"Dear Quinn,\nthis is a letter, not a mailbox.\n"])
def test_a_file_that_is_not_mail_is_named_and_nothing_is_written(lab_config, tmp_path: Path, content: bytes) -> None:
    config = lab_config(idle=False)
    path = tmp_path / "scan.pdf"
    path.write_bytes(content)
    result = quinn_import(config, str(path))
    assert result.returncode == 2  # the CLI's one place for a QuinnError: one line, the config error's code
    assert f"{path} is not an mbox file" in result.stderr and "Maildir" in result.stderr  # what to pass instead
    assert path.read_bytes() == content
    assert not config.db_path.exists()  # refused before the database was opened


def test_opted_out_and_not_allowed_people_are_imported_as_live_mail_is_handled(lab_config, brain: Brain,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    """An allowlist rejects Bob's mail even vouched for; Alice asked not to be remembered: her mail is kept for
    threading, never indexed, learnt from or reviewed (quinn/agent/consent.py), as for her live mail."""
    config = lab_config(idle=False, extra='[policy]\nallow = ["example.test"]\n')
    db = Database.open(str(config.db_path))
    opt_out(db, ALICE, datetime(2025, 1, 1, tzinfo=UTC), None)
    db.execute("CREATE TABLE test_queued (user_id TEXT)")  # whose raw mail ever entered the learning queue
    db.execute("CREATE TRIGGER test_queued_log AFTER INSERT ON learning_queue BEGIN"
               " INSERT INTO test_queued VALUES (new.user_id); END")  # fmt: skip
    db.close()
    box = mailbox.Maildir(tmp_path / "Maildir", create=True)
    for raw in history(config.address).values():
        box.add(raw)
    teach(brain)

    result = summary_of(quinn_import(config, str(tmp_path / "Maildir"), "--vouch", BOB))
    assert result["outcomes"] == {"imported": 3, "ignored": 1, "rejected": 1}, result
    assert f"rejected: not allowed: {BOB}" in result["reasons"]
    now = stored(config.db_path)
    assert now["messages"] == ["<a1@example.test>", "<a2@example.test>", "<a3@example.test>"]  # kept for threads
    assert now["passages"] == 0 and now["documents"] == [] and now["memories"] == 0 and now["queued"] == 0
    assert brain.extractions() == [] and not brain.requests("SessionReview")
    db = Database.open(str(config.db_path))
    try:
        assert db.query("SELECT user_id FROM test_queued WHERE user_id = ?", (ALICE,)) == []
    finally:
        db.close()


async def test_a_source_server_that_goes_away_mid_import_is_one_clear_error(tmp_path: Path) -> None:
    """The IMAP source's connection dies while a mail is read: the import stops with what to do (run it again),
    not a traceback, and the mail is left for the rerun (not final)."""
    from quinn.config import parse_config
    from quinn.engine.importing import Importer
    from quinn.engine.parts import Parts
    from quinn.errors import ConnectError
    from quinn.mailbox import MailKey, MailLedger, MailSource, SourceMail

    class Dropping(MailSource):
        label = "imap:Archive"
        folder = "import:imap:Archive"

        def mails(self):  # type: ignore[no-untyped-def]
            def read() -> bytes:
                raise ConnectionResetError("connection reset by peer")

            yield SourceMail(MailKey(self.folder, 1, 7), "imap:Archive uid 7", 100, b"From: a@b.test\n\n", None, read)

    config = parse_config({
        "imap": {"host": "127.0.0.1", "username": "q", "password_env": "UNUSED"},
        "smtp": {"host": "127.0.0.1", "from_address": "quinn@example.test"},
        "llm": {"model": "openai/x", "base_url": "http://127.0.0.1:9/v1"},  # never asked: the import stops first
        "database": {"url": str(tmp_path / "q.db")}, "embeddings": {"backend": "none"},
    })  # fmt: skip
    parts = Parts.build(config)
    await parts.open_memory()
    try:
        with pytest.raises(ConnectError, match="the IMAP connection failed after 1 mails") as raised:
            await Importer(parts, quarantine_dir=tmp_path / "q").run(Dropping())
        assert "run the same import again" in str(raised.value.hint)
        assert parts.db is not None
        record = MailLedger(parts.db).get(MailKey("import:imap:Archive", 1, 7))
        assert record is not None and not record.final
    finally:
        await parts.close()


def test_an_own_words_import_learns_each_mail_on_its_own_date_with_no_extraction_call(
    lab_config, brain: Brain, tmp_path: Path
) -> None:
    config = lab_config(idle=False, extra='[memory]\nlearn = "own_words"\n')
    path = history_mbox(config, tmp_path)
    teach(brain)

    done = summary_of(quinn_import(config, str(path)))
    assert done["outcomes"] == {"imported": 3, "ignored": 1, "not trusted": 1}, done
    # One learning step per mail (the first thread's two mails are not batched): each statement dated by its own
    # mail, in Alice's words; none from the model.
    assert done["learning"]["batches"] == 3 and brain.extractions() == []
    current = query(config.db_path, "SELECT content, substr(valid_from, 1, 10) FROM memories WHERE user_id = ? AND "
                    "valid_to IS NULL ORDER BY id", (ALICE,))  # fmt: skip
    assert current == [
        ("I live in Lisbon now and work at Acme as a designer.", "2023-03-01"),  # the greeting cut
        ("Also: my locker is number 12.", "2023-03-02"),
        ("I moved to Porto last month; my parking permit is attached.", "2024-02-01"),
    ]
