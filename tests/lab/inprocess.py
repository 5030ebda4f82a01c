"""Quinn in the test's own process, against the lab: the whole pipeline, one folder pass at a time.

``quinn run`` as a subprocess proves the daemon; this proves the agent's behaviour through the same code path
(IMAP fetch from Dovecot, parse, policy, sessions, context, the model over HTTP through Mirascope, SMTP back
into Dovecot, extraction into the libSQL file with the real embedding model) without a daemon's start-up per
scenario and with a deterministic order: a mail is delivered, then exactly one ``process_folder`` pass runs.
"""

from __future__ import annotations

import email
import email.policy
import itertools
import threading
from dataclasses import dataclass, field
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from quinn.app import Quinn
from quinn.config import load_config
from tests.lab.daemon import LabConfig
from tests.lab.smtp import MailLab

_ids = itertools.count(1)


def build_mail(
    sender: str, to: str, subject: str, body: str, *, name: str = "Alice Example", date: datetime | None = None,
    cc: tuple[str, ...] = (), in_reply_to: str | None = None, references: tuple[str, ...] = (),
    message_id: str | None = None, attachments: tuple[tuple[str, str, bytes], ...] = (), reply_to: str | None = None,
) -> tuple[str, bytes]:  # fmt: skip
    """A plain-text mail as a person would send it, with ``attachments`` as (file name, MIME type, bytes);
    returns (Message-ID, bytes)."""
    msg = EmailMessage()
    msg["From"] = f"{name} <{sender}>"
    msg["To"] = to
    if cc:
        msg["Cc"] = ", ".join(cc)
    if reply_to:
        msg["Reply-To"] = reply_to
    msg["Subject"] = subject
    mid = message_id or f"<lab-{next(_ids)}-{sender.split('@')[0]}@example.test>"
    msg["Message-ID"] = mid
    if date is not None:
        msg["Date"] = format_datetime(date)
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
        msg["References"] = " ".join((*references, in_reply_to))
    msg.set_content(body)
    for filename, content_type, data in attachments:
        maintype, subtype = content_type.split("/", 1)
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return mid, msg.as_bytes()


@dataclass
class LabQuinn:
    """An in-process Quinn wired to the lab; ``await send(...)`` delivers a mail and runs one folder pass."""

    config: LabConfig
    lab: MailLab
    app: Quinn = field(init=False)

    def __post_init__(self) -> None:
        self.app = Quinn(load_config(self.config.path, env=self.config.env))

    @property
    def address(self) -> str:
        return self.config.address

    async def start(self) -> LabQuinn:
        await self.app.start()
        return self

    async def close(self) -> None:
        await self.app.close()

    async def send(self, sender: str, subject: str, body: str, *, process: bool = True, **kwargs: Any) -> str:
        """Mail Quinn from ``sender`` (Cc recipients get a copy too) and let Quinn handle its folder once."""
        mid, raw = build_mail(sender, self.address, subject, body, **kwargs)
        self.lab.smtp.send(sender, [self.address, *kwargs.get("cc", ())], raw)
        if process:
            await self.process()
        return mid

    async def process(self) -> int:
        """One folder pass, after a short IDLE/NOOP so the session sees the new mail (as the daemon's wait does)."""
        await self.app._imap(self.app.mailbox.wait, 0.05, threading.Event())
        return await self.app.process_folder()

    def replies(self, user: str, count: int | None = None) -> list[email.message.EmailMessage]:
        """The replies in ``user``'s inbox (waiting for ``count`` of them when given), parsed."""
        raws = (self.lab.dovecot.wait_for_messages(user, count, timeout_s=30) if count
                else self.lab.dovecot.messages(user))  # fmt: skip
        return [email.message_from_bytes(r, policy=email.policy.default) for r in raws]  # type: ignore[misc]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Read the daemon's database (assertions on what is stored)."""
        assert self.app.store is not None
        return self.app.store.db.query(sql, params)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Change the daemon's database (only to stand for time passing, e.g. a backoff elapsing)."""
        assert self.app.store is not None
        return self.app.store.db.execute(sql, params)


def body_of(message: email.message.EmailMessage) -> str:
    """The plain-text body of a reply."""
    part = message.get_body(("plain",))
    assert part is not None
    return part.get_content()
