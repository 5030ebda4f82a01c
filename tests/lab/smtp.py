"""The lab's SMTP server and MX (``quinn.lab.smtp``, shared with ``quinn demo``), and what only the tests use: the
`MailLab` the ``mail_lab`` fixture hands out and fresh addresses."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from quinn.lab.dovecot import Dovecot
from quinn.lab.smtp import LAB_AUTHSERV, Received, SmtpLab, mx_stamp

__all__ = ["LAB_AUTHSERV", "MailLab", "Received", "SmtpLab", "mx_stamp", "unique_address"]


@dataclass
class MailLab:
    """What the `mail_lab` fixture hands a test: the servers and a maker of fresh addresses."""

    dovecot: Dovecot
    smtp: SmtpLab
    new_user: Callable[[str], str]


def unique_address(name: str = "user", domain: str = "example.test") -> str:
    """A fresh address such as ``alice-1a2b3c4d@example.test`` (a new empty mailbox in the lab)."""
    return f"{name}-{uuid.uuid4().hex[:8]}@{domain}"
