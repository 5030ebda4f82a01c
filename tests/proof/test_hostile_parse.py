"""Hostile mail through the real daemon (issue 30): a mail that is slow to read never stalls another user's mail,
and a mail the daemon never comes back from is quarantined, bytes kept, after ``POISON_STRIKES`` tries.

On c7b109b a References field of 80,000 ids (1.7 MB) was parsed on the event loop in ~54 s, another user's mail
waited behind it, threading then failed with "too many SQL variables", and after every SIGKILL the restarted
daemon took the mail over and froze again. ``quinn run`` subprocesses against Dovecot, the stamping SMTP server
and the scripted model.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from quinn.lab.wait import wait_for
from quinn.mailbox import POISON_STRIKES
from tests.lab.mails import ledger, make_mail, plain_model, query, replies_to

QUARANTINE = "Quinn.Quarantine"  # [imap] quarantine_folder as the lab's Dovecot names it
IDS = 80_000
#: Generous: bob's reply comes a few seconds after the start; on c7b109b it waited over a minute.
ANSWERED_WITHIN_S = 30


def eighty_thousand_ids(sender: str, quinn: str, message_id: str) -> bytes:
    """The issue's mail: a References field of 80,000 message ids (~1.7 MB, far under max_message_kb), folded
    three ids a line. Written by hand: the stdlib's header folding takes ~20 s over it."""
    refs = [b"<id%06d@evil.test>" % n for n in range(IDS)]
    folded = b"\r\n ".join(b" ".join(refs[i : i + 3]) for i in range(0, IDS, 3))
    head = (f"From: {sender}\r\nTo: {quinn}\r\nSubject: So many ids\r\nDate: Sun, 22 Nov 2026 09:00:00 +0000\r\n"
            f"Message-ID: {message_id}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n")  # fmt: skip
    return head.encode() + b"References: " + folded + b"\r\n\r\nDo you see this?\r\n"


def start_with_two_mails(mail_lab: Any, lab_config: Any, llm_server: Any, extra: str = "") -> tuple[Any, dict]:
    """The hostile mail first (lower UID, so it is read first), then bob's plain question."""
    llm_server.responder = plain_model
    config = lab_config(idle=False, extra='[embeddings]\nbackend = "none"\n', imap_extra=extra)
    quinn, mallory, bob = config.address, mail_lab.new_user("mallory"), mail_lab.new_user("bob")
    mail_lab.smtp.send(mallory, quinn, eighty_thousand_ids(mallory, quinn, "<flood@evil.test>"))
    mail_lab.smtp.send(bob, quinn, make_mail(bob, quinn, "Tomatoes", "When do I water them?", message_id="<bob@x>"))
    wait_for(lambda: len(mail_lab.dovecot.messages(quinn)) == 2, "both mails delivered", 30)
    return config, {"quinn": quinn, "mallory": mallory, "bob": bob}


@pytest.mark.timeout(240)
def test_80k_ids_do_not_delay_another_users_mail(mail_lab, lab_config, llm_server, quinn_daemon) -> None:
    config, who = start_with_two_mails(mail_lab, lab_config, llm_server)
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)
    started = time.monotonic()
    bob_inbox = lambda: mail_lab.dovecot.messages(who["bob"])  # noqa: E731
    wait_for(lambda: replies_to(bob_inbox(), "<bob@x>"), "bob's reply", 120, log=daemon.log)
    waited = time.monotonic() - started
    print(f"bob's reply {waited:.1f} s after the start, behind a mail of {IDS} References ids")
    assert waited < ANSWERED_WITHIN_S, daemon.log()[-3000:]
    # The flood itself is handled like any mail (threaded with its ids cut to 20), not deferred or stuck.
    wait_for(lambda: ledger(config.db_path).get("<flood@evil.test>", {}).get("moved"), "the flood filed", 60,
             log=daemon.log)  # fmt: skip
    row = ledger(config.db_path)["<flood@evil.test>"]
    assert row["state"] == "replied", row
    assert row["thread_key"] == "<id000000@evil.test>"  # the References root names the thread
    assert daemon.terminate() == 0


@pytest.mark.timeout(420)  # four daemon starts
def test_a_mail_the_daemon_is_killed_over_is_quarantined_after_the_strike_limit(
    mail_lab, lab_config, llm_server, quinn_daemon
) -> None:
    """Killed while it reads the flood (QUINN_FAULT after its fetch), three times: the next start quarantines it
    unread, with the reason and the whole mail kept, and answers bob."""
    config, who = start_with_two_mails(mail_lab, lab_config, llm_server)
    for kill in range(1, POISON_STRIKES + 1):
        config.env["QUINN_FAULT"] = "after_fetch:1"  # the first mail fetched: the flood, lowest UID
        daemon = quinn_daemon(config)
        assert daemon.proc is not None
        assert daemon.proc.wait(timeout=120) == -signal.SIGKILL, daemon.log()
        strikes = query(config.db_path, "SELECT strikes FROM mail_state ORDER BY uid LIMIT 1")
        assert strikes == [(kill,)], f"after kill {kill}: {strikes}"
    config.env.pop("QUINN_FAULT")
    daemon = quinn_daemon(config)
    wait_for(lambda: mail_lab.dovecot.messages(config.address, QUARANTINE), "the flood quarantined", 120,
             log=daemon.log)  # fmt: skip
    wait_for(lambda: replies_to(mail_lab.dovecot.messages(who["bob"]), "<bob@x>"), "bob's reply", 120, log=daemon.log)
    rows = query(config.db_path, "SELECT state, reason, moved FROM mail_state ORDER BY uid")
    state, reason, moved = rows[0]
    assert (state, moved) == ("quarantined", 1)
    assert reason.startswith(f"poison: {POISON_STRIKES} tries at reading it never ended"), reason
    (kept,) = mail_lab.dovecot.messages(config.address, QUARANTINE)
    assert kept.count(b"<id0") == IDS  # the bytes are kept for the operator, whole
    assert not replies_to(mail_lab.dovecot.messages(who["mallory"]), "<flood@evil.test>")
    assert daemon.terminate() == 0


def many_attachments(sender: str, quinn: str, count: int) -> bytes:
    """A mail of ``count`` tiny attachments (~150 bytes each): ~0.1 s of work per 1,000 for the MIME parser."""
    part = (b'--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="f%d.bin"'
            b"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAAA\r\n")  # fmt: skip
    head = (
        f"From: {sender}\r\nTo: {quinn}\r\nSubject: files\r\nMessage-ID: <files@x>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n'
    )
    return head.encode() + b"".join(part % n for n in range(count)) + b"--b--\r\n"  # fmt: skip


@pytest.mark.timeout(300)
def test_a_parse_past_its_deadline_is_killed_and_the_mail_quarantined_after_the_strike_limit(
    mail_lab, lab_config, llm_server, quinn_daemon
) -> None:
    """15,000 attachments take a second or two to parse; past [imap] parse_timeout_s the child is killed, the
    mail waits for the next pass, and the third kill quarantines it. Bob's mail, behind it, is answered meanwhile."""
    llm_server.responder = plain_model
    config = lab_config(idle=False, extra='[embeddings]\nbackend = "none"\n', imap_extra="parse_timeout_s = 0.5")
    quinn, mallory, bob = config.address, mail_lab.new_user("mallory"), mail_lab.new_user("bob")
    mail_lab.smtp.send(mallory, quinn, many_attachments(mallory, quinn, 15_000))
    mail_lab.smtp.send(bob, quinn, make_mail(bob, quinn, "Tomatoes", "When do I water them?", message_id="<bob@x>"))
    wait_for(lambda: len(mail_lab.dovecot.messages(quinn)) == 2, "both mails delivered", 60)
    daemon = quinn_daemon(config)
    wait_for(lambda: replies_to(mail_lab.dovecot.messages(bob), "<bob@x>"), "bob's reply", 120, log=daemon.log)
    wait_for(lambda: mail_lab.dovecot.messages(quinn, QUARANTINE), "the slow mail quarantined", 120, log=daemon.log)
    state, reason = query(config.db_path, "SELECT state, reason FROM mail_state ORDER BY uid LIMIT 1")[0]
    assert state == "quarantined"
    assert reason.startswith(f"poison: {POISON_STRIKES} tries"), reason
    assert "parse_timeout_s = 0.5 s" in reason, reason
    assert daemon.log().count("tried again at the next pass") == POISON_STRIKES
    assert daemon.terminate() == 0
