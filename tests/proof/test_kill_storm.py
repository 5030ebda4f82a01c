"""Kill storm: 200 mails from 20 users, the daemon SIGKILLed at random moments and restarted.

Every legitimate mail must end with exactly one reply in its sender's inbox, none lost; auto-replies, bounces
and list mail are never answered. The daemon is a real ``quinn run`` subprocess against Dovecot and aiosmtpd.
"""

from __future__ import annotations

import email
import email.policy
import random
import time
import uuid
from collections import Counter
from email.message import EmailMessage

import pytest

from quinn.db import Database
from quinn.lab.wait import wait_for
from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import Json, RecordedRequest, Text

USERS = 20
MAILS_PER_USER = 10
KILLS = 10


def legit(sender: str, quinn: str, n: int) -> tuple[str, bytes]:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = quinn
    msg["Subject"] = f"Question {n}"
    msg["Message-ID"] = message_id = f"<{uuid.uuid4().hex}@example.test>"
    msg["Date"] = "Tue, 24 Nov 2026 08:00:00 +0000"
    msg.set_content(f"Question number {n}: what should I do next about my garden?")
    return message_id, msg.as_bytes()


def automatic(kind: str, sender: str, quinn: str) -> tuple[str, bytes]:
    msg = EmailMessage()
    msg["From"] = sender if kind != "bounce" else "MAILER-DAEMON@example.test"
    msg["To"] = quinn
    msg["Subject"] = f"{kind} message"
    msg["Message-ID"] = message_id = f"<{uuid.uuid4().hex}@example.test>"
    if kind == "auto-reply":
        msg["Auto-Submitted"] = "auto-replied"
    elif kind == "list":
        msg["List-Id"] = "<garden.lists.example.test>"
    elif kind == "bulk":
        msg["Precedence"] = "bulk"
    msg.set_content("I am away until Monday." if kind == "auto-reply" else "Automatic message.")
    raw = msg.as_bytes()
    if kind == "bounce":
        raw = b"Return-Path: <>\r\n" + raw
    return message_id, raw


def answer(request: RecordedRequest) -> Json | Text:
    if request.purpose == EXTRACTION:
        return Json({"new": [], "updated": [], "contradicted": []})
    return Text("Water the tomatoes in the morning.")


# Hundreds of replies within minutes, to mail appended without an MX stamp: the outbound caps (issue 30) would
# defer most of it for an hour, and these proofs are about crashes, not caps.
NO_CAPS = "[policy]\nmax_unauthenticated_replies_per_hour = 1000\nmax_replies_per_domain_per_hour = 1000\n"


def fill_mailbox(dovecot, quinn: str, senders: list[str], per_sender: int) -> tuple[dict[str, str], set[str]]:
    """Append ``per_sender`` legitimate mails of each sender and one automatic mail to Quinn's inbox; returns the
    Message-IDs that must be answered once (with their sender) and those never to be answered."""
    expected: dict[str, str] = {}
    never: set[str] = set()
    for i, sender in enumerate(senders):
        for n in range(per_sender):
            message_id, raw = legit(sender, quinn, n)
            expected[message_id] = sender
            dovecot.append(quinn, raw)
        message_id, raw = automatic(["auto-reply", "bounce", "list", "bulk"][i % 4], sender, quinn)
        never.add(message_id)
        dovecot.append(quinn, raw)
    return expected, never


def replies_by_parent(dovecot, senders: list[str]) -> Counter[str]:
    """How many replies each mail got (by In-Reply-To), counted in its senders' inboxes."""
    replies: Counter[str] = Counter()
    for sender in senders:
        for raw in dovecot.messages(sender):
            parsed = email.message_from_bytes(raw, policy=email.policy.default)
            replies[str(parsed["In-Reply-To"])] += 1
    return replies


@pytest.mark.timeout(900)
@pytest.mark.parametrize("in_flight", [None, 8], ids=["default", "8-in-flight"])
def test_kill_storm(dovecot, smtp_lab, llm_server, lab_config, quinn_daemon, users, in_flight):
    """With the default number of mails in flight, and with 8 (issue 16): a kill catches several at once."""
    rng = random.Random(20261122)
    llm_server.responder = answer
    service = f"[service]\nmails_in_flight = {in_flight}\n" if in_flight else ""
    config = lab_config(extra='[embeddings]\nbackend = "none"\n' + service + NO_CAPS)
    quinn = config.address
    senders = [users(f"user{i}") for i in range(USERS)]
    expected, never = fill_mailbox(dovecot, quinn, senders, MAILS_PER_USER)

    kills = 0
    daemon = quinn_daemon(config)
    while kills < KILLS:
        daemon.wait_for_log("quinn started", timeout_s=120)
        time.sleep(rng.uniform(0.2, 1.5))
        daemon.kill()
        kills += 1
        daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)

    wait_for(lambda: not dovecot.messages(quinn), "every mail out of the inbox", 300, interval_s=0.5, log=daemon.log)
    assert daemon.terminate() == 0

    replies = replies_by_parent(dovecot, senders)
    answered_once = sum(1 for mid in expected if replies[mid] == 1)
    twice = {mid: n for mid, n in replies.items() if n > 1}
    missing = [mid for mid in expected if replies[mid] == 0]
    answered_automatic = [mid for mid in never if replies[mid]]
    db = Database.open(str(config.db_path), migrate=False)
    states = dict(db.query("SELECT state, count(*) FROM mail_state GROUP BY state"))
    db.close()
    print(f"kill storm: {len(expected)} legitimate + {len(never)} automatic mails, {kills} SIGKILLs; "
          f"answered once {answered_once}, twice {len(twice)}, missing {len(missing)}, automatic answered "
          f"{len(answered_automatic)}; ledger {states}")  # fmt: skip
    assert not missing
    assert not twice
    assert not answered_automatic
    assert answered_once == len(expected)
