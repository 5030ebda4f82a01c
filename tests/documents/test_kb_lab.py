"""Issue 18's knowledge-base acceptance, in-process against the lab (Dovecot, aiosmtpd, libSQL, the real embedding
model, the scripted model over HTTP): a file added with ``quinn kb add`` against the daemon's database reaches
the reply prompt of every user who asks about it in a new thread, with its ``[doc:NAME p.N]`` citation."""

from __future__ import annotations

from pathlib import Path

from quinn.cli import main
from tests.lab.brain import Brain
from tests.lab.documents import make_pdf
from tests.lab.inprocess import LabQuinn

HANDBOOK = make_pdf(
    [
        "Staff handbook of Example Ltd. Welcome aboard.",
        "Network access.\nThe office wifi network is ExampleGuest and its password is lemon-kiwi-42.",
    ]
)


async def test_a_knowledge_base_file_reaches_every_users_reply_with_its_citation(
    make_quinn, mail_lab, brain: Brain, tmp_path: Path
):
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn: LabQuinn = await make_quinn()
    (tmp_path / "handbook.pdf").write_bytes(HANDBOOK)
    # The admin's command, run while the daemon runs, against the same database file.
    assert main(["kb", "add", "-c", str(quinn.config.path), str(tmp_path / "handbook.pdf")]) == 0

    await quinn.send(alice, "Wifi", "What is the password of the office wifi?")
    await quinn.send(bob, "Getting online", "How do I get on the office wifi network?", name="Bob")
    quinn.replies(alice, 1)
    quinn.replies(bob, 1)
    for question in ("What is the password of the office wifi?", "How do I get on the office wifi network?"):
        prompt = brain.prompt(question)
        assert "[doc:handbook.pdf p.2] (the knowledge base) " in prompt
        assert "its password is lemon-kiwi-42" in prompt


async def test_a_user_who_opted_out_still_gets_the_knowledge_base_but_never_a_file_of_another_domain(
    make_quinn, mail_lab, brain: Brain, tmp_path: Path
):
    """Knowledge-base passages are not memory of the person: "stop remembering me" stops Quinn keeping what they
    write, not reading the organisation's handbook for them (docs/architecture.md). A file scoped to another
    mail domain (``--domain``) never reaches their prompt, though it matches the question better."""
    alice = mail_lab.new_user("alice")  # at example.test
    quinn: LabQuinn = await make_quinn()
    (tmp_path / "handbook.pdf").write_bytes(HANDBOOK)
    (tmp_path / "board.md").write_text("# Board\n\nThe password of the office wifi for the board is qzboardfact.\n")
    config = str(quinn.config.path)
    assert main(["kb", "add", "-c", config, str(tmp_path / "handbook.pdf")]) == 0
    assert main(["kb", "add", "-c", config, "--domain", "other.test", str(tmp_path / "board.md")]) == 0

    await quinn.send(alice, "Privacy", "Please stop remembering me.")
    await quinn.send(alice, "Wifi", "What is the password of the office wifi?")
    quinn.replies(alice, 2)
    assert quinn.query("SELECT count(*) FROM memory_consent WHERE user_id = ?", (alice,)) == [(1,)]
    prompt = brain.prompt("What is the password of the office wifi?")
    assert "[doc:handbook.pdf p.2] (the knowledge base) " in prompt
    assert "its password is lemon-kiwi-42" in prompt
    assert "qzboardfact" not in prompt and "board.md" not in prompt
