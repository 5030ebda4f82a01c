"""Issue 18's acceptance, through ``quinn run`` (Dovecot, aiosmtpd, libSQL file, the real embedding model, the
scripted model over HTTP): a user mails a PDF with a planted fact; a day later, in a new thread, she asks about
it, and the reply prompt the model received holds the fact with its ``[doc:NAME p.N]`` citation. Then she purges
her memory, and no byte of the file, its text or its name is left in the database file or its -wal."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from quinn.lab.wait import wait_for
from tests.lab.brain import Brain
from tests.lab.documents import make_pdf
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import Text
from tests.lab.mails import query
from tests.proof.test_purge import every_row, found_in_files, found_in_rows, marker, reply_to

DAY0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def test_a_fact_in_a_mailed_pdf_is_recalled_with_its_citation_and_purged(
    dovecot, smtp_lab, llm_server, lab_config, quinn_daemon, users, local_embedder
):
    alice = users("alice")
    fact, title, filename = marker("fact"), marker("title"), f"{marker('name')}.pdf"
    pdf = make_pdf([f"Storage unit rental {title}.", f"Gate code of the storage unit: {fact}.\nOpen 7 to 22."])
    config = lab_config()
    quinn = config.address
    brain = Brain(llm_server)
    brain.reply = lambda request: Text("Thanks, noted.")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    def converse(subject: str, body: str, message_id: str, **kwargs):
        _mid, raw = build_mail(alice, quinn, subject, body, message_id=message_id, **kwargs)
        smtp_lab.send(alice, [quinn], raw)
        return wait_for(lambda: reply_to(dovecot, alice, message_id), f"the reply to {message_id}", timeout_s=90,
                        log=daemon.log)  # fmt: skip

    converse("Storage", "Here is the rental contract for the storage unit.", "<doc-1@example.test>", date=DAY0,
             attachments=((filename, "application/pdf", pdf),))  # fmt: skip
    first = brain.prompt("Here is the rental contract")
    assert f"[doc:{filename} p.2]\nGate code of the storage unit: {fact}." in first  # shown right away

    converse("Quick question", "What is the gate code of my storage unit?", "<doc-2@example.test>",
             date=DAY0 + timedelta(days=1))  # fmt: skip
    later = brain.prompt("What is the gate code of my storage unit?")
    assert "Files attached to this email" not in later  # no file on this mail: recalled by search
    recalled = re.findall(r"^- (\[doc:[^\]]*\]) \(a file they sent on ([0-9-]+), \"Storage\"\) (.*)$", later, re.M)
    assert (f"[doc:{filename} p.2]", "2026-11-02", f"Gate code of the storage unit: {fact}. Open 7 to 22.") in recalled
    sessions = query(config.db_path, "SELECT count(DISTINCT session_id) FROM messages WHERE user_id = ?", (alice,))
    assert sessions == [(2,)]  # a new thread

    question = converse("Privacy", "Please delete everything you know about me.", "<doc-3@example.test>")
    [code] = set(re.findall(r"Q-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}", question.get_body(("plain",)).get_content()))
    receipt = converse("Re: Privacy", f"Yes, delete it all.\n\n> Confirmation code: {code}", "<doc-4@example.test>",
                       in_reply_to=str(question["Message-ID"]))  # fmt: skip
    assert "1 file you sent me" in receipt.get_body(("plain",)).get_content()
    assert daemon.terminate() == 0
    rows = every_row(config.db_path)
    assert rows["documents"] == [] and rows["message_documents"] == []
    needles = [fact, title, filename.removesuffix(".pdf")]
    leftovers = found_in_rows(rows, needles) + found_in_files(config.db_path, needles)
    assert not leftovers, "the purged user's file is still in the database:\n" + "\n".join(leftovers)
    # The file's bytes themselves (the PDF is stored uncompressed, so the fact is in them as text too).
    assert pdf[: len(pdf) // 2] not in config.db_path.read_bytes()
