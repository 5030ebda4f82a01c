"""Every policy rule with a real message through the lab: SMTP -> Dovecot -> `quinn run` -> reply or no reply.

Two daemons serve the whole module (one start each): an open one (everyone allowed, unauthenticated senders
answered without memory, an alias) and a strict one (an allowlist, authentication required, the rest rejected).
All mails are sent first; each parametrized test then checks one rule in the ledger, in the sender's inbox and
in what Quinn handed to SMTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quinn.lab.wait import wait_for
from tests.conftest import lab_config_text
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import ScriptedLLM
from tests.lab.mails import ledger, make_mail, plain_model, query, replies_to
from tests.lab.smtp import LAB_AUTHSERV, SmtpLab, unique_address

FIXTURES = Path(__file__).parents[1] / "fixtures" / "mail"
AUTHSERV = LAB_AUTHSERV  # the lab MX stamps with it; lab_config_text makes Quinn trust it
Build = Callable[[str, str, str], bytes]  # (quinn, sender, message_id) -> raw mail


@dataclass(frozen=True)
class Case:
    """One mail and what must become of it."""

    id: str
    build: Build
    state: str
    reason: str
    local: str = "alice"  # the sender's local part (robots need theirs)
    domain: str = "example.test"
    null_sender: bool = False  # MAIL FROM:<> (a bounce)
    bcc_only: bool = False  # Quinn only in the envelope
    envelope: str | None = None  # MAIL FROM when it is not the sender (a forger's own domain)


def simple(**headers: str | list[str]) -> Build:
    return lambda quinn, sender, mid: make_mail(sender, quinn, message_id=mid, headers=headers)


def fixture(name: str) -> Build:
    """A fixture file with Quinn's address, the case's sender and Message-ID put in."""

    def build(quinn: str, sender: str, mid: str) -> bytes:
        raw = (FIXTURES / name).read_bytes().replace(b"quinn@quinn.test", quinn.encode())
        raw = re.sub(rb"(?mi)^(From:.*?)[\w.+-]+@[\w.-]+", lambda m: m.group(1) + sender.encode(), raw, count=1)
        return re.sub(rb"(?mi)^Message-ID:.*$", b"Message-ID: " + mid.encode(), raw, count=1)

    return build


def own_id(quinn: str, sender: str, mid: str) -> bytes:
    fake = f"<quinn.{'ab' * 16}@{quinn.rpartition('@')[2]}>"
    return make_mail(sender, quinn, message_id=fake)


def from_quinn(quinn: str, sender: str, mid: str) -> bytes:
    return make_mail(quinn, quinn, message_id=mid)


def bcc(quinn: str, sender: str, mid: str) -> bytes:
    return make_mail(sender, "bob@example.test", message_id=mid)


NEVER_REPLY = [
    Case("auto-submitted", simple(**{"Auto-Submitted": "auto-generated"}), "ignored", "auto-submitted: auto-generated"),
    Case(
        "auto-replied",
        simple(**{"Auto-Submitted": "auto-replied (vacation)"}),
        "ignored",
        "auto-submitted: auto-replied",
    ),
    Case("precedence-bulk", simple(Precedence="bulk"), "ignored", "precedence: bulk"),
    Case("precedence-list", simple(Precedence="list"), "ignored", "precedence: list"),
    Case("precedence-junk", simple(Precedence="junk"), "ignored", "precedence: junk"),
    Case("list-id", simple(**{"List-Id": "Club <club.example.test>"}), "ignored", "list mail: List-Id"),
    Case(
        "list-unsubscribe",
        simple(**{"List-Unsubscribe": "<mailto:leave@example.test>"}),
        "ignored",
        "list mail: List-Unsubscribe",
    ),
    Case("list-post", simple(**{"List-Post": "<mailto:club@example.test>"}), "ignored", "list mail: List-Post"),
    Case("feedback-id", simple(**{"Feedback-ID": "1:2:3:esp"}), "ignored", "list mail: Feedback-ID"),
    Case("null-return-path", simple(), "ignored", "bounce: null Return-Path", null_sender=True),
    Case("multipart-report", fixture("bounce.eml"), "ignored", "bounce: multipart/report", local="postbox"),
    Case("mailer-daemon", simple(), "ignored", "automated sender: mailer-daemon", local="MAILER-DAEMON"),
    Case("postmaster", simple(), "ignored", "automated sender: postmaster", local="postmaster"),
    Case("no-reply", simple(), "ignored", "automated sender: no-reply", local="no-reply"),
    Case("noreply", simple(), "ignored", "automated sender: noreply", local="noreply"),
    Case("bounces", simple(), "ignored", "automated sender: bounces", local="bounces"),
    Case(
        "x-auto-response-suppress", simple(**{"X-Auto-Response-Suppress": "All"}), "ignored", "auto-response suppressed"
    ),
    Case("x-autoreply", simple(**{"X-Autoreply": "yes"}), "ignored", "autoreply header: X-Autoreply"),
    Case(
        "received-loop",
        simple(Received=[f"from hop{i} by hop{i + 1}; Sun, 22 Nov 2026 09:00:00 +0000" for i in range(31)]),
        "ignored",
        "mail loop: 32 Received headers",  # 31 written by the sender, one by the lab MX
    ),
    Case("own-from", from_quinn, "ignored", "own mail: From is quinn"),
    Case(
        "loop-header",
        simple(**{"X-Quinn-Loop": "another-quinn@example.test"}),
        "ignored",
        "own mail: X-Quinn-Loop present",
    ),
    Case("own-message-id", own_id, "ignored", "own mail: Message-ID is one of ours"),
    Case("not-in-to-or-cc", bcc, "ignored", "not addressed to quinn", bcc_only=True),
    # The never-reply fixtures of tests/mailbox/test_policy.py, as files, through the lab.
    Case("fixture-auto_reply", fixture("auto_reply.eml"), "ignored", "auto-submitted: auto-replied"),
    Case("fixture-vacation", fixture("vacation.eml"), "ignored", "autoreply header: X-Autoreply"),
    Case("fixture-list", fixture("list.eml"), "ignored", "list mail: List-Id"),
    Case("fixture-bulk", fixture("bulk.eml"), "ignored", "precedence: bulk"),
    Case(
        "fixture-mailer_daemon",
        fixture("mailer_daemon.eml"),
        "ignored",
        "automated sender: mailer-daemon",
        local="MAILER-DAEMON",
    ),
    Case("fixture-noreply", fixture("noreply.eml"), "ignored", "automated sender: no-reply", local="no-reply-orders"),
    Case(
        "fixture-bounce",
        fixture("bounce.eml"),
        "ignored",
        "bounce: null Return-Path",
        null_sender=True,
        local="MAILER-DAEMON",
    ),
]


def ar(*values: str) -> Build:
    """A mail carrying Authentication-Results fields the sender wrote (the lab's MX stamps its own on top)."""
    return simple(**{"Authentication-Results": list(values)})


FORGER = "mallory@evil.test"  # the envelope sender of forged mail: the lab's MX stamps it dmarc=fail
NO_DMARC = "nodmarc.test"  # a domain without a DMARC record: the lab's MX stamps its mail dmarc=none (no verdict)

OPEN_HANDLED = [
    Case("unauthenticated-no-memory", simple(), "replied", "sender not authenticated: dmarc=none", local="carol",
         domain=NO_DMARC, envelope=FORGER),
    Case("forged-no-backscatter", simple(), "rejected", "sender failed authentication (dmarc=fail): not answered",
         local="erin", envelope=FORGER),
    Case("authenticated-dmarc", simple(), "replied", "authenticated: dmarc=pass header.from=example.test",
         local="dave"),
]  # fmt: skip

STRICT = [
    Case("not-allowed", simple(), "rejected", "not allowed"),
    Case("forged-from", simple(), "rejected", "sender not authenticated: dmarc=fail", domain="trusted.test",
         envelope=FORGER),
    Case("forged-field-of-our-id", ar(f"{AUTHSERV}; dmarc=pass header.from=trusted.test"), "rejected",
         "sender not authenticated: dmarc=fail", domain="trusted.test", envelope=FORGER),
    Case("foreign-authserv-id", ar("mx.evil.test; dmarc=pass header.from=trusted.test"), "rejected",
         "sender not authenticated: dmarc=fail", domain="trusted.test", envelope=FORGER),
    Case("dmarc-pass", simple(), "replied", "authenticated: dmarc=pass header.from=trusted.test",
         domain="trusted.test"),
]  # fmt: skip


@dataclass
class Run:
    """What one daemon did with a batch of mails."""

    quinn: str
    db_path: Path
    dovecot: Dovecot
    smtp: SmtpLab
    llm: ScriptedLLM
    senders: dict[str, str] = field(default_factory=dict)  # case id -> sender address
    ids: dict[str, str] = field(default_factory=dict)  # case id -> Message-ID
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_daemon(
    dovecot: Dovecot, tmp: Path, cases: list[Case], policy: str, extra_mail: Callable[[Run], None] | None = None
) -> Iterator[Run]:
    quinn = unique_address("quinn")
    smtp, llm = SmtpLab(dovecot, no_dmarc=[NO_DMARC]), ScriptedLLM()
    smtp.start()
    llm.start()
    llm.responder = plain_model
    db_path = tmp / "quinn.db"
    extra = f'[embeddings]\nbackend = "none"\n\n[policy]\n{policy}\n'
    text = lab_config_text(
        imap_port=dovecot.port,
        smtp_port=smtp.port,
        address=quinn,
        llm_url=llm.openai_base_url,
        db_path=db_path,
        extra=extra,
    )
    (tmp / "quinn.toml").write_text(text, encoding="utf-8")
    config = LabConfig(
        tmp / "quinn.toml", {"QUINN_TEST_IMAP_PASSWORD": dovecot.password, "QUINN_TEST_LLM_KEY": "k"}, quinn, db_path
    )
    daemon = QuinnProcess(config, tmp / "quinn.log").start()
    run = Run(quinn, db_path, dovecot, smtp, llm)
    try:
        daemon.wait_for_log("quinn started", timeout_s=90)
        for case in cases:
            sender = unique_address(case.local, case.domain)
            raw = case.build(quinn, sender, f"<{case.id}-{sender.partition('@')[0]}@example.test>")
            mid = re.search(rb"(?mi)^Message-ID:\s*(<[^>]+>)", raw).group(1).decode()  # type: ignore[union-attr]
            run.senders[case.id], run.ids[case.id] = sender, mid
            smtp.send("" if case.null_sender else case.envelope or sender, quinn, raw)
        if extra_mail is not None:
            extra_mail(run)
        wanted = set(run.ids.values())

        def all_final() -> bool:
            rows = ledger(db_path)
            return wanted <= {m for m, r in rows.items() if r["state"] not in ("received", "handling") and r["moved"]}

        wait_for(all_final, "every mail handled and filed", timeout_s=120, log=daemon.log)
        run.rows = ledger(db_path)
        yield run
    finally:
        code = daemon.terminate() if daemon.proc and daemon.proc.poll() is None else None
        smtp.stop()
        llm.stop()
        assert code in (0, None), daemon.log()[-3000:]


def sent_replies(run: Run, case_id: str) -> list[bytes]:
    """Everything Quinn handed to SMTP in reply to this case's mail."""
    return replies_to([r.data for r in run.smtp.received], run.ids[case_id])


@pytest.fixture(scope="module")
def open_run(dovecot: Dovecot, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    dave_alt = unique_address("dave-alt")

    def alias_mail(run: Run) -> None:
        run.senders["alias"], run.ids["alias"] = dave_alt, "<alias@example.test>"
        raw = simple()(run.quinn, dave_alt, "<alias@example.test>")
        run.smtp.send(dave_alt, run.quinn, raw)

    policy = f'unauthenticated = "no_memory"\naliases = {{ "dave-main@example.test" = ["{dave_alt}"] }}\n'
    yield from run_daemon(dovecot, tmp_path_factory.mktemp("open"), NEVER_REPLY + OPEN_HANDLED, policy, alias_mail)


@pytest.fixture(scope="module")
def strict_run(dovecot: Dovecot, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    policy = 'allow = ["trusted.test"]\nunauthenticated = "reject"\n'
    yield from run_daemon(dovecot, tmp_path_factory.mktemp("strict"), STRICT, policy)


def check(run: Run, case: Case) -> dict[str, Any]:
    row = run.rows[run.ids[case.id]]
    assert row["state"] == case.state, row
    assert row["reason"].lower().startswith(case.reason.lower()), row
    assert row["moved"] == 1
    replies = replies_to(run.dovecot.messages(run.senders[case.id]), run.ids[case.id])
    assert len(replies) == (1 if case.state == "replied" else 0)
    assert len(sent_replies(run, case.id)) == len(replies)
    return row


@pytest.mark.parametrize("case", NEVER_REPLY, ids=lambda c: c.id)
def test_never_reply(open_run: Run, case: Case) -> None:
    check(open_run, case)


def test_no_memory_without_authentication(open_run: Run) -> None:
    case = OPEN_HANDLED[0]
    row = check(open_run, case)
    carol = open_run.senders[case.id]
    assert row["user_id"] is None and row["sender_key"] == f"unverified:{carol}"  # not carol's: anyone's
    # Answered, but nothing was read from or written to memory for her.
    assert query(open_run.db_path, "SELECT count(*) FROM messages WHERE user_id = ?", (carol,)) == [(0,)]
    assert query(open_run.db_path, "SELECT count(*) FROM memories WHERE user_id = ?", (carol,)) == [(0,)]
    assert query(open_run.db_path, "SELECT count(*) FROM sessions WHERE user_id = ?", (carol,)) == [(0,)]
    assert query(open_run.db_path, "SELECT user_id FROM outbox WHERE in_reply_to = ?", (open_run.ids[case.id],)) == [
        (None,)
    ]


def test_forged_sender_gets_no_reply(open_run: Run) -> None:
    """No backscatter (issue 30): rejected unanswered, recorded with the reason and filed."""
    check(open_run, OPEN_HANDLED[1])


def test_authenticated_sender_gets_memory(open_run: Run) -> None:
    case = OPEN_HANDLED[2]
    check(open_run, case)
    dave = open_run.senders[case.id]
    assert query(open_run.db_path, "SELECT direction FROM messages WHERE user_id = ? ORDER BY id", (dave,)) == [
        ("in",),
        ("out",),
    ]


def test_alias_maps_to_the_main_user(open_run: Run) -> None:
    row = open_run.rows[open_run.ids["alias"]]
    assert (row["state"], row["user_id"]) == ("replied", "dave-main@example.test")
    # The reply goes to the address that wrote; the memory belongs to the main user.
    assert len(replies_to(open_run.dovecot.messages(open_run.senders["alias"]), "<alias@example.test>")) == 1
    assert query(open_run.db_path, "SELECT count(*) FROM messages WHERE user_id = 'dave-main@example.test'") == [(2,)]


def test_ignored_mail_is_filed_unanswered(open_run: Run) -> None:
    with open_run.dovecot.connect(open_run.quinn) as client:
        assert client.select_folder("INBOX", readonly=True)[b"EXISTS"] == 0
        client.select_folder("Quinn.Processed", readonly=True)
        flags = client.fetch(client.search("ALL"), ["FLAGS", "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"])
    answered = {
        bool(b"\\Answered" in f[b"FLAGS"])
        for f in flags.values()
        if b"precedence-bulk" in f[b"BODY[HEADER.FIELDS (MESSAGE-ID)]"]
    }
    assert answered == {False}


@pytest.mark.parametrize("case", STRICT, ids=lambda c: c.id)
def test_strict_policy(strict_run: Run, case: Case) -> None:
    check(strict_run, case)
