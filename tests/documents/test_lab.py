"""Attached files through the real pipeline (issue 18), in-process against the lab (Dovecot, aiosmtpd, libSQL, the
real embedding model, the scripted model over HTTP): what the reply prompt shows of the new mail's files, what is
stored, and that bad files never cost the mail its answer. The daemon-level acceptance is test_e2e.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from quinn.documents.library import PART_BYTES, document_bytes
from tests.lab.brain import Brain, new_mail
from tests.lab.documents import encrypted_pdf, make_pdf
from tests.lab.inprocess import LabQuinn, build_mail

DAY0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
LEASE = make_pdf(
    [
        "Lease agreement, Rua Augusta 12, Lisbon.",
        "The deposit is 1,850 euros, paid to account PT50-0001-7777.\nKeys are handed over on 1 March.",
    ]
)


def files_block(prompt: str) -> str:
    """The attached-files part of a reply prompt."""
    match = re.search(r"Files attached to this email\..*?=== end of attached files ===", prompt, re.S)
    return match.group(0) if match else ""


async def test_good_and_bad_files_reach_the_prompt_and_the_mail_is_answered(make_quinn, mail_lab, brain: Brain):
    alice = mail_lab.new_user("alice")
    quinn: LabQuinn = await make_quinn("[documents]\nmax_file_kb = 64\n")
    files = (
        ("lease.pdf", "application/pdf", LEASE),
        ("locked.pdf", "application/pdf", encrypted_pdf(["hidden text"])),
        ("broken.pdf", "application/pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog"),
        ("../../etc/passwd.pdf", "text/plain", make_pdf(["Not a password file."])),  # path trick, lying type
        ("huge.txt", "text/plain", b"x" * (70 * 1024)),
        ("tool.exe", "application/x-msdownload", b"MZ\x90\x00payload"),
    )
    await quinn.send(alice, "Flat", "Here is the lease and some other files. What is the deposit?", attachments=files)
    assert len(quinn.replies(alice, 1)) == 1  # answered, whatever the files were

    block = files_block(brain.prompt("What is the deposit?"))
    assert '=== file 1: "lease.pdf" (pdf, ' in block
    assert "[doc:lease.pdf p.2]\nThe deposit is 1,850 euros, paid to account PT50-0001-7777." in block
    assert '"locked.pdf"' in block and "Could not be read: it is encrypted (protected by a password)" in block
    assert '"broken.pdf"' in block and "Could not be read: the PDF is damaged" in block
    assert '=== file 4: "passwd.pdf" (pdf, ' in block and "Not a password file." in block and "../" not in block
    assert '"huge.txt"' in block and "Could not be read: it is 70 kB, more than the limit of 64 kB" in block
    assert '"tool.exe"' in block and 'Could not be read: "application/x-msdownload" is not a kind of file' in block

    kept = quinn.query("SELECT d.kind, m.name, d.size, d.error IS NULL FROM message_documents m JOIN documents d"
                       " ON d.id = m.document_id WHERE m.user_id = ? ORDER BY m.position", (alice,))  # fmt: skip
    # The oversize file is refused, not kept; the unreadable ones are kept with their reason.
    assert [(kind, name, ok) for kind, name, _size, ok in kept] == [
        ("pdf", "lease.pdf", 1), ("pdf", "locked.pdf", 0), ("pdf", "broken.pdf", 0), ("pdf", "passwd.pdf", 1),
        ("unknown", "tool.exe", 0)]  # fmt: skip
    [(lease_id,)] = quinn.query("SELECT id FROM documents WHERE user_id = ? AND size = ?", (alice, len(LEASE)))
    assert quinn.app.store is not None and document_bytes(quinn.app.store.db, alice, lease_id) == LEASE
    cited = quinn.query("SELECT document, ref FROM passages WHERE user_id = ? AND document_id IS NOT NULL"
                        " ORDER BY position", (alice,))  # fmt: skip
    assert cited == [("lease.pdf", "p.1"), ("lease.pdf", "p.2"), ("passwd.pdf", "p.1")]


async def test_a_file_is_kept_once_and_found_only_by_its_owner(make_quinn, mail_lab, brain: Brain):
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn: LabQuinn = await make_quinn()
    attached = (("lease.pdf", "application/pdf", LEASE),)
    await quinn.send(alice, "Flat", "The lease, for your records.", attachments=attached)
    await quinn.send(alice, "Flat again", "Sending the lease once more.", attachments=attached)
    await quinn.send(bob, "Deposit", "What is the deposit for the flat on Rua Augusta?", name="Bob")
    await quinn.send(alice, "Question", "What is the deposit for the flat on Rua Augusta?")
    quinn.replies(alice, 3)
    quinn.replies(bob, 1)

    assert quinn.query("SELECT count(*) FROM documents") == [(1,)]  # once by content hash
    assert quinn.query("SELECT count(*) FROM message_documents WHERE user_id = ?", (alice,)) == [(2,)]
    bobs, alices = brain.prompts("What is the deposit for the flat on Rua Augusta?")
    assert "1,850" not in bobs and "lease.pdf" not in bobs  # alice's file never reaches bob
    assert "[doc:lease.pdf p.2] (a file they sent on " in alices and "The deposit is 1,850 euros" in alices


async def test_an_unverified_senders_files_are_neither_read_nor_kept(make_quinn, mail_lab, brain: Brain):
    mallory = mail_lab.new_user("mallory")
    quinn: LabQuinn = await make_quinn()
    _mid, raw = build_mail(mallory, quinn.address, "Invoice", "Please read the invoice.",
                           attachments=(("invoice.pdf", "application/pdf", LEASE),))  # fmt: skip
    mail_lab.dovecot.append(quinn.address, raw)  # not through the MX: no Authentication-Results stamp
    await quinn.process()
    assert len(quinn.replies(mallory, 1)) == 1
    block = files_block(brain.prompt("Please read the invoice."))
    assert '"invoice.pdf"' in block and "Could not be read: files are read only for mail that may use memory" in block
    assert "1,850" not in block
    assert quinn.query("SELECT count(*) FROM documents") == [(0,)]
    assert quinn.query("SELECT count(*) FROM passages WHERE document_id IS NOT NULL") == [(0,)]


async def test_files_of_someone_who_asked_not_to_be_remembered_are_shown_not_kept(make_quinn, mail_lab, brain):
    alice = mail_lab.new_user("alice")
    quinn: LabQuinn = await make_quinn()
    await quinn.send(alice, "Privacy", "Please stop remembering me.")
    await quinn.send(alice, "Flat", "What is the deposit in this lease?", attachments=(("lease.pdf", "application/pdf",
                                                                                        LEASE),))  # fmt: skip
    quinn.replies(alice, 2)
    assert "The deposit is 1,850 euros" in files_block(brain.prompt("What is the deposit in this lease?"))
    assert quinn.query("SELECT count(*) FROM documents") == [(0,)]
    assert quinn.query("SELECT count(*) FROM message_documents") == [(0,)]


async def test_a_mail_that_is_only_a_file_and_a_picture_is_answered_and_kept(make_quinn, mail_lab, brain: Brain):
    alice = mail_lab.new_user("alice")
    quinn: LabQuinn = await make_quinn()
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + (64).to_bytes(4, "big") + (32).to_bytes(4, "big") + b"\0" * 40
    await quinn.send(alice, "Lease", "", attachments=(("lease.pdf", "application/pdf", LEASE),
                                                      ("keys.png", "image/png", png)))  # fmt: skip
    assert len(quinn.replies(alice, 1)) == 1
    block = files_block(brain.prompt('subject "Lease"'))
    assert "[doc:lease.pdf p.2]\nThe deposit is 1,850 euros" in block
    assert '"keys.png" (image, 64 bytes) ===\n(a picture (PNG, 64x32 pixels): Quinn does not see pictures' in block
    kept = quinn.query("SELECT kind, size FROM documents WHERE user_id = ? ORDER BY id", (alice,))
    assert kept == [("pdf", len(LEASE)), ("image", len(png))]  # a picture is kept, described by its metadata
    cited = quinn.query("SELECT document, ref, position FROM passages WHERE user_id = ? AND direction = 'in'"
                        " ORDER BY position", (alice,))  # fmt: skip
    assert cited == [("lease.pdf", "p.1", 0), ("lease.pdf", "p.2", 1)]  # the empty body has no passage of its own


async def test_files_are_kept_whole_on_a_libsql_server(sqld, lab_config, mail_lab, llm_server) -> None:
    """The bytes live in the database for a remote libSQL server too: a 7 MB file (about the most a mail within
    the default 10 MB [imap] max_message_kb can carry, base64 costing a third) goes to sqld and back intact."""
    from tests.lab.mails import plain_model

    llm_server.responder = plain_model
    alice = mail_lab.new_user("alice")
    quinn = LabQuinn(lab_config(extra='[embeddings]\nbackend = "none"\n', db_path=sqld.url), mail_lab)
    await quinn.start()
    try:
        picture = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)) * (7 * 4096)
        await quinn.send(alice, "Files", "The lease and a photo.", attachments=(
            ("lease.pdf", "application/pdf", LEASE), ("flat.png", "image/png", picture)))  # fmt: skip
        quinn.replies(alice, 1)
        kept = quinn.query("SELECT name, document_id FROM message_documents WHERE user_id = ? ORDER BY position",
                           (alice,))  # fmt: skip
        assert quinn.app.store is not None
        assert [(name, document_bytes(quinn.app.store.db, alice, d)) for name, d in kept] == [
            ("lease.pdf", LEASE), ("flat.png", picture)]  # fmt: skip
        parts = quinn.query("SELECT count(*) FROM document_parts WHERE document_id = ?", (kept[1][1],))
        assert parts == [(8,)]  # 1 MiB each: 7 MiB and the 24 bytes of the header
        cited = quinn.query("SELECT document, ref FROM passages WHERE user_id = ? AND document_id IS NOT NULL",
                            (alice,))  # fmt: skip
        assert sorted(cited) == [("lease.pdf", "p.1"), ("lease.pdf", "p.2")]
    finally:
        await quinn.close()


@pytest.mark.parametrize("cc_seen", [False, True])
async def test_a_file_sent_one_to_one_never_reaches_a_mail_with_others(make_quinn, mail_lab, brain, cc_seen):
    """A file's passages carry the audience of the mail that brought it, as the mail's own passages do."""
    alice, carol = mail_lab.new_user("alice"), mail_lab.new_user("carol")
    quinn: LabQuinn = await make_quinn()
    await quinn.send(alice, "Flat", "The lease.", date=DAY0, cc=(carol,) if cc_seen else (),
                     attachments=(("lease.pdf", "application/pdf", LEASE),))  # fmt: skip
    await quinn.send(alice, "Deposit", "What is the deposit for the flat on Rua Augusta?",
                     date=DAY0 + timedelta(days=1), cc=(carol,))  # fmt: skip
    quinn.replies(alice, 2)
    prompt = brain.prompt("What is the deposit for the flat on Rua Augusta?")
    assert ("[doc:lease.pdf p.2]" in prompt) is cc_seen
    assert ("1,850" in prompt) is cc_seen


async def test_the_search_documents_tool_finds_only_the_users_files(make_quinn, mail_lab, llm_server, brain):
    from tests.lab.llm_server import Text, ToolCall

    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn: LabQuinn = await make_quinn()
    await quinn.send(alice, "Flat", "The lease.", date=DAY0, attachments=(("lease.pdf", "application/pdf", LEASE),))
    await quinn.send(alice, "Old flat", "The deposit on my old flat was 900 euros.", date=DAY0 + timedelta(days=1))
    called: set[str] = set()

    def reply(request):  # each one's mail: one search_documents call, then the answer
        who = alice if alice in request.text else bob
        if "Check my files" in new_mail(request) and who not in called:
            called.add(who)
            return ToolCall("search_documents", {"query": "deposit for the flat"})
        return Text("Here is what I found.")

    brain.reply = reply
    for who in (alice, bob):
        await quinn.send(who, "Files", "Check my files: what is the deposit?", date=DAY0 + timedelta(days=2))
    quinn.replies(alice, 3)
    quinn.replies(bob, 1)
    results = {who: {m["content"] for r in llm_server.requests if who in r.text
                     for m in r.body_json.get("messages", []) if m.get("role") == "tool"}
               for who in (alice, bob)}  # fmt: skip
    [alices], [bobs] = results[alice], results[bob]
    assert alices.startswith('[doc:lease.pdf p.2] (a file they sent on 2026-11-02, "Flat") The deposit is 1,850')
    assert "900 euros" not in alices  # the mail about the old flat is not a file
    assert bobs == "No file matches."


@pytest.mark.lab  # runs a process
def test_database_copy_moves_files_to_a_libsql_server_in_small_batches(tmp_path) -> None:
    """`quinn database copy` reads a table a batch at a time; file parts are 1 MiB each, so they go 8 at a time
    (BATCH_ROWS_OF), and arrive on a fresh sqld byte for byte."""
    import os

    from quinn.commands.database import copy_database
    from quinn.db import Database
    from tests.lab.sqld import Sqld

    data = os.urandom(20 * PART_BYTES + 5)  # 21 parts: three batches
    source = Database.open(str(tmp_path / "q.db"))
    try:
        with source.transaction() as tx:
            tx.execute("INSERT INTO documents (user_id, sha256, kind, size, created_at) VALUES ('a@x', 'h', 'pdf', ?,"
                       " 't')", (len(data),))  # fmt: skip
            for part, start in enumerate(range(0, len(data), PART_BYTES)):
                piece = data[start : start + PART_BYTES]
                tx.execute("INSERT INTO document_parts VALUES (1, ?, 'a@x', ?)", (part, piece))
        with Sqld() as server:
            target = Database.open(server.url)
            try:
                assert copy_database(source, target)["document_parts"] == 21
                assert document_bytes(target, "a@x", 1) == data
            finally:
                target.close()
    finally:
        source.close()
