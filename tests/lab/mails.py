"""Helpers for the mailbox tests: configs for the lab through the public config API, and mails to send."""

from __future__ import annotations

from email.message import EmailMessage
from typing import Any

from quinn.config import Config, parse_config, resolve_secrets
from tests.lab.dovecot import Dovecot

PASSWORD_ENV = "QUINN_TEST_IMAP_PASSWORD"


def lab_settings(
    dovecot: Dovecot, user: str, *, smtp_port: int = 25, env: dict[str, str] | None = None, **sections: dict[str, Any]
) -> Config:
    """A validated Config for `user` on `dovecot`, its secrets resolved from `env` (plus the lab's IMAP password)
    as ``load_config`` does; `sections` override keys."""
    raw: dict[str, dict[str, Any]] = {
        "imap": {"host": "127.0.0.1", "port": dovecot.port, "username": user, "password_env": PASSWORD_ENV,
                 "tls": "none", "timeout_s": 5.0},
        "smtp": {"host": "127.0.0.1", "port": smtp_port, "tls": "none", "from_address": user},
        "llm": {"model": "openai/gpt-test", "base_url": "http://127.0.0.1:9/v1"},
    }  # fmt: skip
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    config = parse_config(raw)
    resolve_secrets(config, {PASSWORD_ENV: dovecot.password, **(env or {})})
    return config


def make_mail(
    sender: str, to: str | list[str], subject: str = "Hello", body: str = "Hi Quinn, a question.", *,
    message_id: str | None = None, headers: dict[str, str | list[str]] | None = None, cc: list[str] | None = None,
    in_reply_to: str | None = None, references: list[str] | None = None,
) -> bytes:  # fmt: skip
    """An RFC 5322 mail as bytes (CRLF), with any extra headers (a list gives the header several times)."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to if isinstance(to, str) else ", ".join(to)
    if cc:
        msg["Cc"] = ", ".join(cc)
    msg["Subject"] = subject
    msg["Date"] = "Sun, 22 Nov 2026 09:00:00 +0000"
    if message_id:
        msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = " ".join(references)
    for name, value in (headers or {}).items():
        for item in [value] if isinstance(value, str) else value:
            msg[name] = item
    msg.set_content(body)
    return msg.as_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
