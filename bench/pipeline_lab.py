"""The lab side of bench/pipeline.py: the test lab's servers with timestamps, Quinn as a process, mail to send.

Everything here reuses tests/lab (Dovecot, the aiosmtpd lab, the scripted model); what it adds is timing:
``TimedSmtpLab`` notes when each message is in a mailbox (after the lab's IMAP APPEND, before its 250), so
"APPEND -> reply in the inbox" is measured from the moment the mail is in Quinn's INBOX to the moment the
reply is in the sender's. ``BenchDaemon`` runs ``quinn run``'s own body (``lifecycle.serve``) in a child
process with the stage timings kept (``Metrics.keep_samples``) and written out when it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import smtplib
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import compat32
from pathlib import Path
from typing import Any

from imapclient import IMAPClient

from bench.machine import ROOT
from bench.synthetic import Generator
from quinn.lab.wait import WaitTimeout, wait_for
from tests.lab.dovecot import Dovecot
from tests.lab.mails import make_mail
from tests.lab.process import kill_group, tail, track, untrack
from tests.lab.smtp import LAB_AUTHSERV, SmtpLab

IMAP_PASSWORD_ENV = "QUINN_BENCH_IMAP_PASSWORD"
LLM_KEY_ENV = "QUINN_BENCH_LLM_KEY"
NAMES = ("Alice", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas")


class TimedSmtpLab(SmtpLab):
    """The lab's SMTP server, noting (Unix time) when each message is in each recipient's mailbox.

    ``arrived_at[message_id]``: a person's mail is in Quinn's INBOX. ``replied_at[in_reply_to]``: Quinn's reply
    to that mail is in the person's INBOX (Quinn's Bcc copy to itself is delivered after it and not counted).
    """

    def __init__(self, dovecot: Dovecot) -> None:
        super().__init__(dovecot)
        self.arrived_at: dict[str, float] = {}
        self.replied_at: dict[str, float] = {}
        self._times = threading.Lock()

    def _deliver(self, mail_from: str, rcpt_tos: Sequence[str], raw: bytes) -> None:
        headers = BytesHeaderParser(policy=compat32).parsebytes(raw)
        message_id = str(headers["Message-ID"] or "").strip()
        parent = str(headers["In-Reply-To"] or "").strip()
        for rcpt in rcpt_tos:  # one at a time, so each recipient's moment is its own
            super()._deliver(mail_from, [rcpt], raw)
            now = time.time()
            with self._times:
                if parent and rcpt.lower() != mail_from.lower():
                    self.replied_at.setdefault(parent, now)
                elif not parent:
                    self.arrived_at.setdefault(message_id, now)

    def wait_for_replies(self, message_ids: Sequence[str], timeout_s: float) -> list[str]:
        """Wait until every mail in ``message_ids`` has its reply, or ``timeout_s`` passes; returns the missing."""

        def missing() -> list[str]:
            with self._times:
                return [m for m in message_ids if m not in self.replied_at]

        with contextlib.suppress(WaitTimeout):  # the caller reports what is missing
            wait_for(lambda: not missing(), f"replies to {len(message_ids)} mails", timeout_s, interval_s=0.02)
        return missing()


@dataclass
class Mail:
    """One mail a person sends Quinn."""

    sender: str
    to: str
    message_id: str
    raw: bytes


class MailMaker:
    """Plain-text mails with something to learn and a question (so the sensory gate lets extraction run)."""

    def __init__(self, seed: int) -> None:
        self.gen = Generator(seed)
        self.count = 0

    def make(self, sender: str, to: str, phase: str) -> Mail:
        self.count += 1
        [news] = self.gen.memories(1)
        [question], _ = self.gen.queries(1)
        name = NAMES[self.count % len(NAMES)]
        body = (
            f"Hi Quinn,\n\nA quick update from me: {news.text}\n\nCould you tell me what you know about "
            f"{question}?\n\nThanks,\n{name}\n"
        )
        message_id = f"<bench-{phase}-{self.count}@example.test>"
        raw = make_mail(f"{name} <{sender}>", to, f"{question[:40]} ({self.count})", body, message_id=message_id)
        return Mail(sender, to, message_id, raw)


def example_domains() -> str:
    """The ``[[domains]]`` tables of deploy/quinn.example.toml (what an operator starts from), as TOML."""
    example = tomllib.loads((ROOT / "deploy" / "quinn.example.toml").read_text(encoding="utf-8"))
    tables = []
    for domain in example.get("domains", []):
        lines = [f"{key} = {json.dumps(value)}" for key, value in domain.items()]  # JSON strings are TOML strings
        tables.append("[[domains]]\n" + "\n".join(lines))
    return "\n\n".join(tables)


def config_text(
    *,
    dovecot: Dovecot,
    smtp: SmtpLab,
    llm_url: str,
    address: str,
    db_path: Path,
    idle: bool,
    poll_interval_s: float | None,
) -> str:
    """quinn.toml for the bench: the defaults and the example config's domains, but the lab's servers, no TLS,
    the scheduler off (its jobs would call the model at random moments of the run), and the lab's MX trusted
    (its stamp authenticates the senders, as deploy/SECURITY.md has a real server do)."""
    poll = f"poll_interval_s = {poll_interval_s}" if poll_interval_s is not None else ""
    return f"""
log_level = "INFO"

[imap]
host = "127.0.0.1"
port = {dovecot.port}
username = "{address}"
password_env = "{IMAP_PASSWORD_ENV}"
tls = "none"
idle = {str(idle).lower()}
{poll}

[smtp]
host = "127.0.0.1"
port = {smtp.port}
tls = "none"
from_address = "{address}"

[llm]
model = "openai/gpt-bench"
base_url = "{llm_url}"
api_key_env = "{LLM_KEY_ENV}"
timeout_s = 20
max_retries = 0

[database]
url = "{db_path}"

[scheduler]
enabled = false

[policy]
authserv_id = "{LAB_AUTHSERV}"

{example_domains()}
"""


@dataclass
class BenchDaemon:
    """``python -m bench.pipeline --serve CONFIG``: Quinn in its own process group, as ``quinn run`` runs."""

    config_path: Path
    env: dict[str, str]
    log_path: Path
    samples_path: Path
    embed_threads: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0
    ready_s: float | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)

    def start(self, timeout_s: float = 180.0) -> float:
        """Start and wait for "quinn started" in the log; returns the start-up time in seconds."""
        env = {**os.environ, **self.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [
            sys.executable,
            "-m",
            "bench.pipeline",
            "--serve",
            str(self.config_path),
            "--samples",
            str(self.samples_path),
        ]
        if self.embed_threads is not None:
            command += ["--embed-threads", str(self.embed_threads)]
        self.started_s = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        track(self)
        proc = self.proc

        def started() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"it exited with {proc.returncode}")
            return "quinn started" in self.log()

        try:
            wait_for(started, "the bench daemon started", timeout_s)
        except (WaitTimeout, RuntimeError) as exc:
            self.stop()
            raise SystemExit(f"the bench daemon did not start: {exc}\n{tail(self.log_path, 40)}") from None
        self.ready_s = time.monotonic() - self.started_s
        return self.ready_s

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def finish(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """SIGTERM (the daemon finishes the mail in flight), wait, and read the stage timings it wrote."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout_s)
        untrack(self)
        if code != 0 or not self.samples_path.exists():
            raise SystemExit(f"the bench daemon exited with {code}:\n{tail(self.log_path, 40)}")
        self.samples = json.loads(self.samples_path.read_text())
        return self.samples

    def stop(self) -> None:
        """Kill what is left (safety net)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc)
        untrack(self)


def bare_lab(dovecot: Dovecot, smtp: SmtpLab, maker: MailMaker, user: str, box: str, n: int) -> dict[str, Any]:
    """The lab's own cost per mail, without Quinn: the person's mail is sent (SMTP + APPEND into the box), read
    over one logged-in IMAP connection (SEARCH + FETCH BODY.PEEK[], as Quinn reads), and a reply is sent back
    over a new SMTP connection (SMTP + APPEND into the person's INBOX), one mail after the other."""
    parts: dict[str, list[float]] = {"append": [], "fetch": [], "send": [], "total": []}
    client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=30)
    try:
        client.login(box, dovecot.password)
        client.select_folder("INBOX")
        for _ in range(n):
            mail = maker.make(user, box, "bare")
            t0 = time.perf_counter()
            smtp.send(user, box, mail.raw)
            t1 = time.perf_counter()
            client.noop()
            [uid] = client.search(["HEADER", "Message-ID", mail.message_id])
            raw = client.fetch([uid], ["BODY.PEEK[]", "INTERNALDATE"])[uid][b"BODY[]"]
            t2 = time.perf_counter()
            reply = make_mail(
                box,
                user,
                "Re: bench",
                "Thanks for your mail. Here is my answer.",
                message_id=f"<re-{len(raw)}-{uid}@example.test>",
                in_reply_to=mail.message_id,
            )
            with smtplib.SMTP(smtp.host, smtp.port, timeout=30) as conn:
                conn.sendmail(box, [user], reply)
            t3 = time.perf_counter()
            for key, value in (("append", t1 - t0), ("fetch", t2 - t1), ("send", t3 - t2), ("total", t3 - t0)):
                parts[key].append(value)
    finally:
        with contextlib.suppress(Exception):
            client.logout()
    return parts
