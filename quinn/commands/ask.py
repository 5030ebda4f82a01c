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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from quinn.commands.output import add_json_flag, answer, console, shorten
from quinn.config import Config
from quinn.errors import ConfigError, ConnectError, RetryLater

DEFAULT_SUBJECT = "A question from the terminal"
SUBJECT_CHARS = 60
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
    ask.add_argument("--subject", help="the message's subject: asks with the same one join one thread (default: "
                     "the message's first words, a thread of its own)")  # fmt: skip
    ask.add_argument("--verbose", action="store_true", help="show the log's warnings here (else they go to "
                     "quinn-ask.log beside the database)")  # fmt: skip
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


def default_subject(text: str) -> str:
    """The subject of an asked message without ``--subject``: its first words, so each question is a thread of its
    own, as separate mails would be (issue 34: every ask joined one "A question from the terminal" thread)."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return shorten(first, SUBJECT_CHARS) or DEFAULT_SUBJECT


def log_file(config: Config) -> Path | None:
    """Where ``quinn ask`` keeps its log when the terminal shows only errors: beside a local database."""
    from quinn.db import is_remote

    url = config.database.url
    return None if is_remote(url) else Path(url).parent / "quinn-ask.log"


def ask_command(args: argparse.Namespace, config: Config) -> int:
    """Print the reply as soon as it exists, then learn with a status line on stderr (elapsed time), then what
    was learnt. With ``--json`` the progress goes to stderr as plain lines and the JSON to stdout at the end."""
    from quinn.app import Quinn
    from quinn.logs import quiet_terminal
    from quinn.mailbox import parse_email

    text = sys.stdin.read() if args.text == "-" else args.text
    subject = args.subject if args.subject is not None else default_subject(text)
    email = parse_email(message(config, args.user, subject, text))
    hidden = None if args.verbose else quiet_terminal(log_file(config))
    app = Quinn(config)
    out, err = console(), Console(file=sys.stderr, highlight=False, markup=False)
    started = time.monotonic()
    learning: list[Any] = []  # the status line, once the reply is out

    def listed(memories: list[Any]) -> list[dict[str, Any]]:
        return [{"id": m.id, "type": m.type, "content": m.content} for m in memories]

    def show_rows(title: str, rows: list[dict[str, Any]]) -> None:
        out.print(f"\n{title}:" + ("" if rows else " none"))
        for row in rows:
            out.print(f"  [memory:{row['id']}] ({row['type']}) {row['content']}")

    def replied(answer: Any, used: list[Any]) -> None:
        seconds = time.monotonic() - started
        if not args.json:
            out.print(answer.body.rstrip())
            show_rows("Memories used", listed(used))
            out.file.flush()
        if err.is_terminal and not args.json:
            bar = Progress(SpinnerColumn(), TextColumn(f"reply in {seconds:.0f} s; Quinn is learning from the "
                           "message"), TimeElapsedColumn(), console=err, transient=True)  # fmt: skip
            bar.add_task("learning", total=None)
            bar.start()
            learning.append(bar)
        else:
            print(f"reply in {seconds:.1f} s; learning from the message...", file=sys.stderr, flush=True)

    async def run() -> Any:
        try:
            await app.open_memory()
            return await app.ask(email, replied)
        finally:
            for bar in learning:
                bar.stop()
            await app.close()

    try:
        asked = asyncio.run(run())
    except (ConnectError, RetryLater) as exc:  # the model (or a remote database) did not answer
        raise ConnectError(f"no reply: {exc.message}", "nothing of the message was kept; `quinn check` says "
                           "whether the model and the database answer") from None  # fmt: skip
    if not err.is_terminal or args.json:
        print(f"learning done, {time.monotonic() - started:.1f} s in all", file=sys.stderr, flush=True)
    data = {"user": asked.user, "reply": asked.answer.body, "memories_used": listed(asked.used),
            "learnt": listed(asked.learnt)}  # fmt: skip
    note = hidden() if hidden is not None else None
    if note:
        print(f"({note})", file=sys.stderr)
    return answer(args, data, lambda _console: show_rows("Learnt", data["learnt"]))
