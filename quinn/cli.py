"""The ``quinn`` command. This is the one place where a ``QuinnError`` becomes a line on stderr and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quinn import __version__
from quinn.commands import (
    ask,
    auth,
    configuration,
    database,
    demo,
    evaluate,
    importing,
    init,
    jobs,
    kb,
    mail,
    memory,
    prompts,
    sessions,
    users,
)
from quinn.commands import console as console_group  # `console` is the entry point below
from quinn.config import Config, load_config
from quinn.engine import parts
from quinn.errors import ConfigError, QuinnError
from quinn.logs import RedactingFilter, secret_values, setup_logging
from quinn.sdks import skip_unused

log = logging.getLogger("quinn")
# Command-group modules from quinn.commands, each with register(subparsers, with_config).
GROUPS: list[Any] = [
    init, ask, demo, mail, importing, users, sessions, memory, kb, prompts, evaluate, jobs, database, configuration,
    console_group, auth,
]  # fmt: skip
DEFAULT_CONFIG = "quinn.toml"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="quinn", description="Quinn, the email agent with long-term memory.")
    parser.add_argument("--version", action="version", version=f"quinn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("-c", "--config", default=os.environ.get("QUINN_CONFIG", DEFAULT_CONFIG),
                       help="path of quinn.toml (default: $QUINN_CONFIG or ./quinn.toml)")  # fmt: skip
        return p

    run_parser = with_config(sub.add_parser("run", help="run the daemon in the foreground (logs to stderr)"))
    run_parser.add_argument("--backlog", action="store_true",
                            help="also answer the mail that was in the folder before Quinn first watched it "
                            '(as imap.backlog = "answer"; once answered, it stays answered)')  # fmt: skip
    with_config(sub.add_parser("check", help="check IMAP, SMTP, the LLM and the database; exit 1 on failure"))
    for group in GROUPS:
        group.register(sub, with_config)
    return parser


def main(argv: Sequence[str] | None = None, *, lean_imports: bool = False) -> int:
    """Run one command; returns the exit code. ``lean_imports`` (the ``quinn`` command itself): import only the
    model SDKs the config names (quinn.sdks), for a faster start."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if not getattr(args, "needs_config", True):  # quinn config example: there may be no config yet
            return int(args.handler(args, None))
        # A command that only reads the database sets ``secrets_of=("database",)`` and needs no IMAP password.
        config = load_config(Path(args.config), secrets_of=getattr(args, "secrets_of", None))
        if lean_imports:
            skip_unused(config.llm)
        redactor = setup_logging(config.log_level, config.log_format, secret_values(config))
        if args.command == "run":
            if args.backlog:
                config = config.model_copy(update={"imap": config.imap.model_copy(update={"backlog": "answer"})})
            return run(config, Path(args.config), redactor)
        if args.command == "check":
            return asyncio.run(check(config))
        handler = getattr(args, "handler", None)
        if handler is not None:
            return int(handler(args, config))
    except QuinnError as exc:
        print(f"quinn: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2


def run(config: Config, config_path: Path, redactor: RedactingFilter | None = None) -> int:
    """``quinn run``: the daemon until SIGTERM/SIGINT; SIGHUP reloads (see ``quinn.lifecycle``)."""
    from quinn.app import Quinn
    from quinn.lifecycle import serve

    return serve(Quinn(config), config_path, redactor)


async def check(config: Config) -> int:
    """``quinn check``: each dependency reported as ok or failed with the reason."""
    from quinn.db import is_remote

    results: list[tuple[str, bool, str]] = []

    async def probe(name: str, coro_fn) -> None:
        try:
            detail = await coro_fn()
            results.append((name, True, detail or "ok"))
        except QuinnError as exc:
            results.append((name, False, str(exc)))
        except Exception as exc:  # check reports everything; a traceback would hide the other results
            results.append((name, False, f"{exc.__class__.__name__}: {exc}"))

    headers: list[bytes] = []
    folder: dict[str, Any] = {}  # what the backlog check needs: uidvalidity, uidnext, uids

    async def oauth() -> str:
        from quinn.oauth import check_tokens

        return await asyncio.to_thread(check_tokens, config)

    async def imap() -> str:
        mailbox = parts.mailbox(config)
        await asyncio.to_thread(lambda: mailbox.connect(create_folders=False))  # check changes nothing
        detail = f"{mailbox.where}, folder {config.imap.folder}, {'IDLE' if mailbox.can_idle else 'polling'}"
        if mailbox.missing_folders:
            detail += f"; the first start creates {', '.join(mailbox.missing_folders)}"
        folder.update(uidvalidity=0, uidnext=1, uids=[])  # a folder that does not exist yet holds no backlog
        if config.imap.folder not in mailbox.missing_folders:
            folder.update(uidvalidity=mailbox.uidvalidity, uidnext=await asyncio.to_thread(mailbox.uidnext),
                          uids=await asyncio.to_thread(mailbox.uids))  # fmt: skip
        try:  # a few recent mails, for the trust check below
            folders = [config.imap.folder, config.imap.processed_folder]
            headers.extend(await asyncio.to_thread(mailbox.recent_headers, folders, 5))
        finally:
            await asyncio.to_thread(mailbox.close)
        return detail

    async def trust() -> str:
        from quinn.mailbox import check_trust, parse_email

        samples = []
        for raw in headers:
            try:
                samples.append(parse_email(raw + b"\r\n"))
            except QuinnError:
                continue  # an unparseable mail says nothing about the stamp
        own = config.smtp.from_address.lower()
        samples = [s for s in samples if s.sender != own]  # Quinn's own copies carry no inbound stamp
        ok, detail = check_trust(parts.rules(config), samples)
        if not ok:
            raise ConfigError(detail, "see deploy/SECURITY.md for what the receiving server must do")
        return detail

    async def smtp() -> str:
        await parts.sender(config).check()
        return f"{config.smtp.host}:{config.smtp.port} ({config.smtp.tls})"

    poor: set[str] = set()  # parts that work but badly: reported, not failed
    client: list[Any] = []  # the model client, once it answered: the model check below probes it

    async def model() -> str:
        llm = parts.llm(config)
        where = await llm.check()
        client.append(llm)
        return where

    async def model_fit() -> str:
        # Issue 34: a model that cannot do the job, found out here rather than by its replies. A poor verdict
        # does not fail the check: the model works, and the operator may run it anyway.
        from quinn.agent import check_model

        verdict = await check_model(client[0])
        if not verdict.passed:
            poor.add("model")
            return verdict.line() + ' (README, "Model providers": the sizes that pass)'
        return verdict.line()

    async def database() -> str:
        url = config.database.url
        if not is_remote(url) and not Path(url).exists():
            # Creating it here would leave a file owned by whoever ran the check (often root), which the service
            # user could then not write: only say whether the first start will be able to create it.
            folder = Path(url).parent
            if not folder.is_dir():
                raise ConfigError(f"database folder {folder} does not exist", "create it, or fix database.url")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise ConfigError(f"database folder {folder} is not writable by this user",
                                  "run the check as the service user, or give that user the folder")  # fmt: skip
            return f"{url} does not exist yet: the first start creates it"
        db = await asyncio.to_thread(parts.database, config)
        version = db.query_value("PRAGMA user_version")
        db.close()
        return f"{db.redacted_url}, schema version {version}"

    async def backlog() -> str:
        from quinn.mailbox import ANSWER_HINT, MailLedger, Watches, first_uid

        name = config.imap.folder
        if config.imap.backlog == "answer":
            return f'imap.backlog = "answer": mail already in {name} is answered too'
        if not folder:
            raise ConfigError(f"cannot tell: folder {name} was not read", "see the imap line above")
        url = config.database.url
        mark, seen = None, False
        if is_remote(url) or Path(url).exists():
            db = await asyncio.to_thread(parts.database, config)
            try:
                mark = Watches(db).get(name)
                seen = MailLedger(db).seen_in(name)
            finally:
                db.close()
        if mark is None or mark.uidvalidity != folder["uidvalidity"]:
            first, _why = first_uid(mark, seen, folder["uidnext"], answer=False)
            waiting = [uid for uid in folder["uids"] if uid < first]
            if not waiting:
                return f"{name} holds no mail from before Quinn watches it"
            return f"{len(waiting)} mails in {name} now: the first start leaves them there unanswered; {ANSWER_HINT}"
        waiting = mark.waiting(folder["uids"])
        since = f"from before Quinn first watched {name} ({mark.watched_at})"
        return f"{len(waiting)} mails {since} are left alone; {ANSWER_HINT}" if waiting else f"no mail {since} waits"

    async def embeddings() -> str:
        # quinn run loads the embedder at start: a model that is not installed must fail here, not there.
        started = time.perf_counter()
        embedder = await asyncio.to_thread(parts.embedder, config.embeddings)
        if embedder is None:
            return "backend none: memory search is full-text only"
        await asyncio.to_thread(embedder.embed, ["quinn check"])
        return f"{embedder.model_id}, {embedder.dim} dimensions, ready in {time.perf_counter() - started:.1f} s"

    async def admin_console() -> str:
        # quinn run serves the console once ready: a hash that does not parse, or a missing extra, shows here first.
        import importlib.util

        from quinn.console.auth import Token, admins_from
        from quinn.console.serve import EXTRA_HINT

        missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(f"the console needs {', '.join(missing)}, which is not installed", EXTRA_HINT)
        admins = admins_from(config.console)
        readers = sum(1 for admin in admins.values() if not admin.may_change)
        tokens = sum(1 for admin in admins.values() if isinstance(admin.credential, Token))
        where = f"http://{config.console.host}:{config.console.port}/"
        checked = "every password hash parses" + (f", {tokens} by token, each long enough" if tokens else "")
        count = f"{len(admins)} admin" + ("" if len(admins) == 1 else "s")
        return f"{count} ({readers} read-only), {checked}; served on {where}"

    if "oauth2" in (config.imap.auth, config.smtp.auth):
        await probe("oauth", oauth)
    await probe("imap", imap)
    await probe("trust", trust)
    await probe("smtp", smtp)
    await probe("llm", model)
    if client:
        await probe("model", model_fit)
    await probe("database", database)
    await probe("backlog", backlog)
    await probe("embeddings", embeddings)
    if config.console.enabled:
        await probe("console", admin_console)
    for name, ok, detail in results:
        print(f"{name:9} {'POOR' if name in poor else 'ok' if ok else 'FAILED'}  {detail}")
    return 0 if all(ok for _n, ok, _d in results) else 1


def console() -> int:
    """The ``quinn`` console script."""
    return main(lean_imports=True)


if __name__ == "__main__":
    sys.exit(console())
