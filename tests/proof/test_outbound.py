"""Hostile outbound (issue 30, part C) through the real pipeline: the lab's stamping MX, Dovecot, `quinn run` with
its console, the scripted model, and what reached the SMTP server.

One daemon with the DEFAULT outbound and budget settings (only authserv_id set, as deploy/SECURITY.md asks) serves
the module, but for the global cap on replies to strangers (``STRANGERS_CAP``, so a few mails reach it). Each test
is one attack of the issue, asserted on what Quinn sent, what the model server received, what the ledger and the
log hold and what the console shows. ``-s`` prints the figures the closing note quotes.
"""

from __future__ import annotations

import email
import email.policy
import re
import time
import uuid
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest

from quinn.console.auth import hash_password
from quinn.lab.wait import wait_for
from quinn.mailbox.parse import MAX_ADDRESSES
from quinn.memory.store import MemoryStore
from tests.conftest import lab_config_text
from tests.console.conftest import DAEMON_CONSOLE, PASSWORDS, TEST_COST, csrf_of
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.llm_server import RecordedRequest, ScriptedLLM, Text, count_tokens
from tests.lab.mails import plain_model, query
from tests.lab.smtp import SmtpLab, unique_address

NO_DMARC = "nodmarc.test"  # a domain without a DMARC record: the lab's MX stamps its mail dmarc=none
RECIPIENTS_CAP = 5  # [policy] max_recipients_per_reply, default
REQUEST_TOKENS = 24000  # [budget] request_tokens, default
REQUEST_TOKENS_UNAUTHENTICATED = 4000  # [budget] request_tokens_unauthenticated, default
STRANGERS_CAP = 4  # [policy] max_unauthenticated_replies_per_hour (default 20)
FIGURES: dict[str, str] = {}


def message(sender: str, to: str, subject: str, body: str, *, reply_to: str | None = None) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    if reply_to:
        msg["Reply-To"] = reply_to
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{uuid.uuid4().hex}@mail.example.test>"
    msg["Date"] = "Mon, 23 Nov 2026 10:00:00 +0000"
    msg.set_content(body)
    return msg.as_bytes()


def many_attachments(sender: str, to: str, subject: str, text: str, count: int) -> bytes:
    """A multipart mail with ``count`` tiny text files, written by hand: EmailMessage takes minutes for 15,000."""
    boundary = f"b{uuid.uuid4().hex}"
    head = (f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{uuid.uuid4().hex}@mail.example.test>"
            f"\r\nDate: Mon, 23 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n"
            f'Content-Type: multipart/mixed; boundary="{boundary}"\r\n\r\n')  # fmt: skip
    parts = [f"--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n"]
    parts += [f'--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; '
              f'filename="f{i:05d}.bin"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAECAwQFBgcICQ==\r\n'
              for i in range(count)]  # fmt: skip
    return (head + "".join(parts) + f"--{boundary}--\r\n").encode()


class OutboundLab:
    """The daemon with its console, alice's memory planted first (a marker in two of her profile memories)."""

    def __init__(self, dovecot, tmp: Path) -> None:
        self.dovecot = dovecot
        self.smtp = SmtpLab(dovecot, no_dmarc=[NO_DMARC])
        self.llm = ScriptedLLM()
        self.quinn = unique_address("quinn")
        self.alice = unique_address("alice")
        self.marker = f"PIN{uuid.uuid4().hex[:10]}"
        self.secret = f"{self.alice} keeps the bank PIN {self.marker} private. Her card number is 4111 {self.marker}."
        self.tmp = tmp
        self.db_path = tmp / "quinn.db"
        self.daemon: QuinnProcess | None = None
        self.console_url = ""

    def responder(self, request: RecordedRequest) -> object:
        if request.purpose == "reply" and self.marker in request.text:
            # The model pastes what memory put in its prompt instead of replying (seen with small models).
            return Text(self.secret)
        return plain_model(request)

    def start(self) -> None:
        self.smtp.start()
        self.llm.start()
        self.llm.responder = self.responder
        store = MemoryStore.open(str(self.db_path), embedder=None)
        store.add(self.alice, self.secret, type="personal", scope="profile")
        store.close()
        extra = (f'[embeddings]\nbackend = "none"\n[policy]\nmax_unauthenticated_replies_per_hour = {STRANGERS_CAP}\n'
                 f"{DAEMON_CONSOLE}")  # fmt: skip
        text = lab_config_text(imap_port=self.dovecot.port, smtp_port=self.smtp.port, address=self.quinn,
                               llm_url=self.llm.openai_base_url, db_path=self.db_path, extra=extra)  # fmt: skip
        path = self.tmp / "quinn.toml"
        path.write_text(text)
        env = {"QUINN_TEST_IMAP_PASSWORD": self.dovecot.password, "QUINN_TEST_LLM_KEY": "k",
               "Q_CONSOLE_ROOT": hash_password(PASSWORDS["root"], **TEST_COST)}  # fmt: skip
        config = LabConfig(path=path, env=env, address=self.quinn, db_path=self.db_path)
        self.daemon = QuinnProcess(config, self.tmp / "quinn.log").start()
        self.daemon.wait_for_log("quinn started", timeout_s=120)
        self.daemon.wait_for_log("console on http://127.0.0.1:", timeout_s=60)
        found = re.search(r"console on (http://127\.0\.0\.1:\d+)/", self.daemon.log())
        assert found, self.daemon.log()[-2000:]
        self.console_url = found.group(1)

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()
        self.smtp.stop()
        self.llm.stop()

    def send(self, raw: bytes, envelope_from: str, *, final: tuple[str, ...] = ("replied", "ignored", "rejected",
             "quarantined", "failed", "deferred"), timeout_s: float = 90) -> str:  # fmt: skip
        """Send through the lab's MX and wait for the ledger's state of the mail (one of ``final``)."""
        message_id = self.message_id(raw)
        self.smtp.send(envelope_from, [self.quinn], raw)
        assert self.daemon is not None

        def state() -> object:
            found = query(self.db_path, "SELECT state FROM mail_state WHERE message_id = ?", (message_id,))
            return found[0][0] if found and found[0][0] in final else None

        reached = wait_for(state, f"a final state for {message_id}", timeout_s, log=self.daemon.log)
        time.sleep(0.3)  # the reply's SMTP hop
        return str(reached)

    @staticmethod
    def message_id(raw: bytes) -> str:
        return str(email.message_from_bytes(raw, policy=email.policy.default)["Message-ID"])

    def replies(self, message_id: str) -> list:
        """What Quinn handed to SMTP in reply to ``message_id`` (the Bcc copy to itself included in rcpt_tos)."""
        found = []
        for received in self.smtp.received:
            head = received.data.split(b"\r\n\r\n", 1)[0]
            if re.search(rb"(?mi)^In-Reply-To:\s*" + re.escape(message_id.encode()), head):
                found.append(received)
        return found

    def reply_prompts(self, token: str) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if r.purpose == "reply" and token in r.text]


@pytest.fixture(scope="module")
def lab(dovecot, tmp_path_factory):
    outbound = OutboundLab(dovecot, tmp_path_factory.mktemp("outbound"))
    try:
        outbound.start()
        yield outbound
    finally:
        outbound.stop()


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if FIGURES:
        print("\n| attack | figure |\n|---|---|")
        for name, figure in FIGURES.items():
            print(f"| {name} | {figure} |")


def test_reply_to_fan_out_reaches_at_most_the_cap(lab):
    """An authenticated sender (the attacker's own domain, DMARC passes) with 300 Reply-To addresses."""
    sender = unique_address("attacker", "attacker.test")
    victims = [unique_address(f"v{i}", "victims.test") for i in range(300)]
    raw = message(sender, lab.quinn, "Newsletter", "Please write to all of them.", reply_to=", ".join(victims))
    assert lab.send(raw, sender) == "replied"
    replies = lab.replies(lab.message_id(raw))
    envelope = {r for reply in replies for r in reply.rcpt_tos if r != lab.quinn}  # without Quinn's own Bcc copy
    FIGURES["300 Reply-To addresses: envelope recipients of the reply"] = f"{len(envelope)} in {len(replies)} mail(s)"
    assert len(envelope) <= RECIPIENTS_CAP and len(replies) == 1
    [reply] = replies
    sent = email.message_from_bytes(reply.data, policy=email.policy.default)
    body = sent.get_body(("plain",)).get_content()
    assert not [v for v in victims if v in body]  # the note lists nobody's address to everyone
    # and says how many got nothing (of the MAX_ADDRESSES the parser keeps of a field: issue 30's parsing bounds)
    assert f"{MAX_ADDRESSES - len(envelope)} of them got nothing" in body
    assert len(sent.get_all("To", [])[0].split(",")) + len(sent.get_all("Cc", []) or []) <= RECIPIENTS_CAP


def test_forged_senders_get_no_reply_by_default(lab):
    """25 mails with forged From addresses (the MX stamps dmarc=fail): no backscatter, nothing lost."""
    mallory = unique_address("mallory", "evil.test")
    ids, states = [], []
    for i in range(25):
        victim = unique_address(f"victim{i}")
        raw = message(victim, lab.quinn, f"Invoice {i}", "Please confirm the attached invoice.")
        ids.append(lab.message_id(raw))
        states.append(lab.send(raw, mallory))
    replies = sum(len(lab.replies(m)) for m in ids)
    FIGURES["25 forged mails (dmarc=fail): replies"] = str(replies)
    assert replies == 0
    reasons = [row[0] for m in ids for row in query(lab.db_path, "SELECT reason FROM mail_state WHERE message_id = ?",
                                                      (m,))]  # fmt: skip
    assert states == ["rejected"] * 25 and all("dmarc=fail" in r and "not answered" in r for r in reasons), reasons


def test_a_stranger_without_a_verdict_keeps_a_plain_answer(lab):
    """No DMARC record for the From domain (dmarc=none): answered, plainly and to From alone."""
    stranger = unique_address("stranger", NO_DMARC)
    raw = message(stranger, lab.quinn, "Opening hours", "When are you open?")
    assert lab.send(raw, stranger) == "replied"
    [reply] = lab.replies(lab.message_id(raw))
    assert [r for r in reply.rcpt_tos if r != lab.quinn] == [stranger]


@pytest.mark.parametrize("who", ["unauthenticated", "authenticated"])
def test_the_prompt_of_a_huge_mail_stays_within_the_budget(lab, who):
    """2.9 MB with 15,000 tiny attachments: what reaches the model is cut to the sender's budget."""
    sender = unique_address("big", NO_DMARC if who == "unauthenticated" else "example.test")  # DMARC none / pass
    token = f"huge{uuid.uuid4().hex[:8]}"
    text = f"{token}\n" + ("All work and no play makes Jack a dull boy.\n" * 3000)
    raw = many_attachments(sender, lab.quinn, f"Files {token}", text, 15000)
    assert 2.7e6 < len(raw) < 3.2e6
    lab.send(raw, sender, timeout_s=240)
    prompts = lab.reply_prompts(token)
    assert prompts, "no reply prompt reached the model"
    biggest = max(count_tokens(r.text) for r in prompts)
    FIGURES[f"15,000 attachments, {who}: largest reply prompt"] = f"{max(len(r.text) for r in prompts)} characters "\
        f"(~{biggest} tokens) in {len(prompts)} request(s)"  # fmt: skip
    budget = REQUEST_TOKENS if who == "authenticated" else REQUEST_TOKENS_UNAUTHENTICATED
    assert biggest <= budget
    assert re.search(r"\(\d+ more attachments not shown\)", prompts[0].text)


def test_model_and_memory_text_never_reach_logs_ledger_or_console(lab):
    """The model pastes alice's memories (a PIN) instead of replying: the mail waits, and the PIN is nowhere."""
    raw = message(lab.alice, lab.quinn, "My PIN", "What is my PIN again?")
    message_id = lab.message_id(raw)
    assert lab.send(raw, lab.alice, final=("deferred", "failed")) == "deferred"
    assert lab.reply_prompts(lab.marker), "the memory did not reach the model"
    assert lab.daemon is not None
    reasons = query(lab.db_path, "SELECT reason FROM mail_state WHERE message_id = ?", (message_id,))
    with httpx.Client(base_url=lab.console_url, timeout=30) as client:
        form = {"csrf": csrf_of(client.get("/login").text), "name": "root", "password": PASSWORDS["root"]}
        assert client.post("/login", data=form).status_code == 303
        page = client.get("/mail").text
    assert message_id.strip("<>") in page or "deferred" in page
    found = {"log": lab.daemon.log().count(lab.marker), "ledger": str(reasons).count(lab.marker),
             "console": page.count(lab.marker)}  # fmt: skip
    FIGURES["marker of a memory echoed by the model: occurrences"] = ", ".join(f"{k} {v}" for k, v in found.items())
    assert found == {"log": 0, "ledger": 0, "console": 0}


def test_replies_to_strangers_are_capped_together(lab):
    """Every stranger has an address of their own, so their replies are also capped all together: past the cap a
    mail waits (deferred, the reason says which cap), it is not dropped."""
    # Module order: the strangers above were answered within this hour and count too.
    replied = query(lab.db_path, "SELECT count(*) FROM mail_state WHERE state = 'replied' AND sender_key LIKE ?",
                    ("unverified:%",))[0][0]  # fmt: skip
    states = []
    for i in range(max(STRANGERS_CAP - int(replied), 0) + 1):
        stranger = unique_address(f"s{i}", NO_DMARC)
        raw = message(stranger, lab.quinn, f"Question {i}", "Are you open on Sunday?")
        states.append(lab.send(raw, stranger))
    assert states[-1] == "deferred" and set(states[:-1]) <= {"replied"}, states
    [reason] = query(lab.db_path, "SELECT reason FROM mail_state WHERE message_id = ?", (lab.message_id(raw),))[0]
    assert reason.startswith(f"rate cap: {STRANGERS_CAP} replies to unverified senders in the last hour")
