"""Helpers for the mailbox tests: configs through the public config API, mails to send, and reading what the
daemon recorded in its database file."""

from __future__ import annotations

import email
import email.policy
import json
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from quinn.config import Config, parse_config, resolve_secrets
from quinn.db import Database
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import FORMAT_TOOL_PREFIX, Json, RecordedRequest, Text
from tests.lab.smtp import LAB_AUTHSERV

PASSWORD_ENV = "QUINN_TEST_IMAP_PASSWORD"


def lab_settings(
    dovecot: Dovecot, user: str, *, smtp_port: int = 25, env: dict[str, str] | None = None, **sections: dict[str, Any]
) -> Config:
    """A validated Config for `user` on `dovecot`, its secrets resolved from `env` (plus the lab's IMAP password)
    as ``load_config`` does; `sections` override keys."""
    raw: dict[str, dict[str, Any]] = {
        "imap": {
            "host": "127.0.0.1",
            "port": dovecot.port,
            "username": user,
            "password_env": PASSWORD_ENV,
            "tls": "none",
            "timeout_s": 5.0,
        },
        "smtp": {"host": "127.0.0.1", "port": smtp_port, "tls": "none", "from_address": user},
        "llm": {"model": "openai/gpt-test", "base_url": "http://127.0.0.1:9/v1"},
        "policy": {"authserv_id": LAB_AUTHSERV},  # the lab's MX stamps mail it relays (tests/lab/smtp.py)
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    config = parse_config(raw)
    resolve_secrets(config, {PASSWORD_ENV: dovecot.password, **(env or {})})
    return config


def make_mail(
    sender: str,
    to: str | list[str],
    subject: str = "Hello",
    body: str = "Hi Quinn, a question.",
    *,
    message_id: str | None = None,
    headers: dict[str, str | list[str]] | None = None,
    cc: list[str] | None = None,
    in_reply_to: str | None = None,
    references: list[str] | None = None,
) -> bytes:
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


def ledger(db_path: Path) -> dict[str, dict[str, Any]]:
    """The daemon's mail ledger, read from its database file: Message-ID -> the newest row as a dict."""
    db = Database.open(str(db_path), migrate=False)
    try:
        rows = db.query(
            "SELECT message_id, folder, uidvalidity, uid, state, reason, user_id, attempts, moved, thread_key,"
            " sender_key FROM mail_state ORDER BY updated_at, uid"
        )
    finally:
        db.close()
    names = (
        "message_id",
        "folder",
        "uidvalidity",
        "uid",
        "state",
        "reason",
        "user_id",
        "attempts",
        "moved",
        "thread_key",
        "sender_key",
    )
    return {row[0]: dict(zip(names, row, strict=True)) for row in rows}


def ledger_rows(db_path: Path) -> list[dict[str, Any]]:
    """Every ledger row (several per mail after a UIDVALIDITY change), oldest first."""
    db = Database.open(str(db_path), migrate=False)
    try:
        rows = db.query("SELECT message_id, uidvalidity, uid, state, reason, attempts FROM mail_state ORDER BY rowid")
    finally:
        db.close()
    names = ("message_id", "uidvalidity", "uid", "state", "reason", "attempts")
    return [dict(zip(names, row, strict=True)) for row in rows]


def query(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One read-only query on the daemon's database file."""
    db = Database.open(str(db_path), migrate=False)
    try:
        return db.query(sql, params)
    finally:
        db.close()


def replies_to(messages: list[bytes], message_id: str) -> list[bytes]:
    """The messages whose In-Reply-To is `message_id`."""
    found = []
    for raw in messages:
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        if (msg["In-Reply-To"] or "").strip() == message_id:
            found.append(raw)
    return found


def plain_model(request: RecordedRequest) -> Json | Text:
    """A scripted model that answers every reply prompt with a short text and every structured request (memory
    extraction) with an empty result, so runs that do not test memory stay quiet and fast."""
    body = json.dumps(request.body_json)
    if '"json_schema"' in body or any(name.startswith(FORMAT_TOOL_PREFIX) for name in request.tool_names):
        return Json({"new": [], "updated": [], "contradicted": []})
    return Text("Thanks for your mail. Here is my answer.")
