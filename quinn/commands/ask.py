"""``quinn ask --as ADDRESS "..."``: try Quinn from the terminal, before pointing it at a mailbox.

The message goes through ``Quinn.ask``: the daemon's own path for a trusted user's mail (session, memory, the
reply template and its tools, extraction), with no IMAP and no SMTP. It needs the model and the database, not
the mail passwords. The person at the terminal is the operator, who may read and change any user's memory anyway
(``quinn memory``), so ``--as`` is trusted by construction: no mail server vouches for it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any

from quinn.commands.output import add_json_flag, answer
from quinn.config import Config
from quinn.errors import ConfigError

DEFAULT_SUBJECT = "A question from the terminal"
ASK_DOMAIN = "quinn-ask.invalid"  # RFC 2606: the Message-IDs of asked messages name no real host


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn ask``."""
    ask = with_config(add_json_flag(sub.add_parser(
        "ask", help="answer one message from the terminal as if ADDRESS had mailed it (nothing is sent)",
        description="Answer one message as Quinn answers mail: the user's memory, the reply prompt and its tools, "
        "and memory extraction afterwards, all as in the daemon; nothing is read from or sent to a mailbox. "
        "--as is trusted as if the mail server had authenticated it: the terminal is the operator's, who may read "
        "and change every user's memory anyway. Needs the model and the database, no mail password.",
    )))  # fmt: skip
    ask.add_argument("--as", dest="user", required=True, metavar="ADDRESS",
                     help="the user the message is from (trusted: you are the operator)")  # fmt: skip
    ask.add_argument("text", help='the message text, or "-" to read it from stdin')
    ask.add_argument("--subject", default=DEFAULT_SUBJECT, help="the message's subject (a thread is joined by it)")
    ask.set_defaults(handler=ask_command, secrets_of=("llm", "database", "embeddings"))


def message(
    config: Config, user: str, subject: str, text: str, now: datetime | None = None, domain: str = ASK_DOMAIN
) -> bytes:
    """The asked message as a mail to Quinn's own address (``quinn demo`` mails it; its ids name ``domain``)."""
    if "@" not in user or any(c.isspace() for c in user.strip()):
        raise ConfigError(f"--as {user!r} is not a mail address", "give the user's address, e.g. alice@example.org")
    if not text.strip():
        raise ConfigError("the message is empty", 'write the message as the last argument, or "-" and pipe it in')
    msg = EmailMessage()
    msg["From"] = user.strip()
    msg["To"] = config.smtp.from_address
    msg["Subject"] = subject
    msg["Date"] = format_datetime(now or datetime.now(UTC))
    msg["Message-ID"] = make_msgid("ask", domain=domain)
    msg.set_content(text)
    return msg.as_bytes()


def ask_command(args: argparse.Namespace, config: Config) -> int:
    """Print the reply, the memories the prompt showed the model, and what was learnt."""
    from quinn.app import Quinn
    from quinn.mailbox import parse_email

    text = sys.stdin.read() if args.text == "-" else args.text
    email = parse_email(message(config, args.user, args.subject, text))
    app = Quinn(config)

    async def run() -> Any:
        try:
            await app.open_memory()
            return await app.ask(email)
        finally:
            await app.close()

    asked = asyncio.run(run())

    def listed(memories: list[Any]) -> list[dict[str, Any]]:
        return [{"id": m.id, "type": m.type, "content": m.content} for m in memories]

    data = {"user": asked.user, "reply": asked.answer.body, "memories_used": listed(asked.used),
            "learnt": listed(asked.learnt)}  # fmt: skip

    def show(console: Any) -> None:
        console.print(asked.answer.body.rstrip())
        for title, rows in (("Memories used", data["memories_used"]), ("Learnt", data["learnt"])):
            console.print(f"\n{title}:" + ("" if rows else " none"))
            for row in rows:
                console.print(f"  [memory:{row['id']}] ({row['type']}) {row['content']}")

    return answer(args, data, show)
