"""``quinn demo``: mail Quinn and watch it answer, on a throwaway mailbox, before pointing it at a real one.

The demo starts the lab's mail system (``quinn.lab``: a private Dovecot and an SMTP server that delivers into it,
stamping Authentication-Results as a receiving MX does), writes a quinn.toml for it (Quinn is
``quinn@demo.test``, the person at the terminal ``you@demo.test``, trusted through the stamp as in a real
install) and runs the daemon on it in a thread: the ``quinn run`` path, IDLE, SMTP and all. Every message typed is
mailed over SMTP and Quinn's reply is read back from your inbox over IMAP. Everything listens on 127.0.0.1 and
nothing leaves the machine but the model's requests. The folder (config, database) is deleted at the end unless
``--keep DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email
import email.policy
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from quinn.commands.ask import message
from quinn.commands.init import OLLAMA_EXAMPLE, fill, llm_values, named_provider
from quinn.commands.output import print_json
from quinn.config import Config, load_config
from quinn.engine import parts
from quinn.errors import ConfigError, ConnectError, QuinnError
from quinn.lab.wait import WaitTimeout, wait_for
from quinn.packaged import packaged_file

log = logging.getLogger(__name__)

QUINN = "quinn@demo.test"  # RFC 2606 ".test": no real host is ever named
YOU = "you@demo.test"
DEMO_DOMAIN = "demo.test"
PASSWORD_ENV = "QUINN_DEMO_MAIL_PASSWORD"  # the throwaway Dovecot's password, handed to the config's loader only
DEFAULT_SUBJECT = "Hello Quinn"
READY_TIMEOUT_S = 300.0  # the daemon's start: the embedding model loads on a busy 2-core machine in seconds
STOP_TIMEOUT_S = 60.0
DOVECOT_HINT = "quinn demo needs Dovecot: apt-get install dovecot-imapd"
COMMANDS = "/memory: what Quinn remembers about you, /subject TEXT: the next mails' subject, /quit: stop"


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn demo``."""
    p = sub.add_parser(
        "demo", help="try Quinn on a throwaway local mailbox: mail it from the terminal and read its replies",
        description="Start a throwaway mailbox on 127.0.0.1 (Dovecot, and an SMTP server that delivers into it), "
        f"run Quinn on it as quinn run would, and mail it as {YOU}: type a message, read Quinn's reply. "
        f"{COMMANDS}. Needs Dovecot (apt-get install dovecot-imapd) and aiosmtpd (pip install 'quinn-mail[demo]').",
    )  # fmt: skip
    p.add_argument(
        "--model",
        help='the model as PROVIDER/MODEL, as llm.model in quinn.toml: "ollama/llama3.2", "openai/gpt-4.1-mini", '
        'or "openai/NAME" with --base-url for any OpenAI-compatible server',
    )
    p.add_argument("--base-url", help="the model server's URL (Ollama: http://localhost:11434/v1)")
    p.add_argument("--api-key-env", help="the environment variable holding the model's API key (default: the "
                   'provider\'s, e.g. OPENAI_API_KEY; "" for none)')  # fmt: skip
    p.add_argument("--send", action="append", metavar="TEXT",
                   help="mail this, print the reply and go on to the next --send; then stop (no prompt)")  # fmt: skip
    p.add_argument("--subject", default=DEFAULT_SUBJECT, help=f'the mails\' subject (default "{DEFAULT_SUBJECT}")')
    p.add_argument("--json", action="store_true", help="with --send: print the exchanges and memories as JSON")
    p.add_argument(
        "--keep", metavar="DIR", type=Path,
        help="keep the demo's quinn.toml and database in DIR (reused, memory and all, next time)",
    )  # fmt: skip
    p.add_argument("--reply-timeout-s", type=float, default=600.0,
                   help="how long to wait for each reply (default 600: a local model on a CPU is slow)")  # fmt: skip
    p.add_argument("--verbose", action="store_true", help="show the daemon's log (INFO) on stderr")
    p.set_defaults(handler=demo_command, needs_config=False)


@dataclass(frozen=True)
class Exchange:
    """One mail to Quinn and its reply."""

    subject: str
    text: str
    reply: str
    seconds: float
    attachments: list[str] = field(default_factory=list)  # the reply's files, saved in the demo's folder


def llm_settings(args: argparse.Namespace) -> dict[tuple[str, str], str | int | None]:
    """The ``[llm]`` keys from --model, --base-url and --api-key-env, as ``quinn init`` makes them."""
    if not args.model:
        raise ConfigError(
            "quinn demo needs a model: --model PROVIDER/MODEL, and --base-url URL for a local or OpenAI-compatible "
            "server (--api-key-env VAR names the key's variable)",
            f"e.g. quinn demo {OLLAMA_EXAMPLE}",
        )
    provider, model = named_provider(args.model, args.base_url)
    return llm_values(provider, model, args.base_url, args.api_key_env)


def extra_hint(extra: str) -> str:
    """How to add an extra to the venv Quinn runs from: its own pip (Quinn is not on the public index, but an
    installed quinn-mail satisfies the name and pip fetches only the extra's packages)."""
    pip = Path(sys.prefix) / "bin" / "pip"
    return f"{pip} install 'quinn-mail[{extra}]' (or pip install '.[{extra}]' in Quinn's source folder)"


def check_installed() -> None:
    """Dovecot and aiosmtpd are not among Quinn's dependencies: say how to get them."""
    from quinn.lab.dovecot import dovecot_available, dovecot_binaries

    if importlib.util.find_spec("aiosmtpd") is None:
        raise ConfigError("quinn demo needs aiosmtpd, its local SMTP server", extra_hint("demo"))
    if not dovecot_available():
        raise ConfigError(DOVECOT_HINT, f"looked for {' and '.join(dovecot_binaries())} "
                          "($QUINN_DOVECOT_BIN and $QUINN_DOVEADM_BIN name others)")  # fmt: skip


class Demo:
    """The throwaway mail system and Quinn's daemon on it; ``with Demo(...) as demo:`` starts and stops both."""

    def __init__(self, llm: dict[tuple[str, str], str | int | None], keep: Path | None, verbose: bool) -> None:
        self.llm = llm
        self.keep = keep
        self.verbose = verbose
        self.folder = keep.resolve() if keep is not None else Path(tempfile.mkdtemp(prefix="quinn-demo-"))
        self.config: Config | None = None
        self._servers: list[Any] = []
        self._app: Any = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.verdict: Any = None  # the model check's (quinn.agent.model_check)
        self.warnings: Callable[[], str | None] = lambda: None  # how many warnings were kept off the terminal

    def __enter__(self) -> Demo:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start Dovecot and the SMTP server, write quinn.toml, check the model, start the daemon."""
        from quinn.app import Quinn
        from quinn.lab.dovecot import Dovecot
        from quinn.lab.smtp import SmtpLab
        from quinn.logs import quiet_terminal, secret_values, setup_logging

        self.folder.mkdir(parents=True, exist_ok=True)
        dovecot = Dovecot(password=f"demo-{os.urandom(8).hex()}")
        self._servers.append(dovecot)
        dovecot.start()
        self.dovecot = dovecot
        self.smtp = SmtpLab(dovecot)  # the MX: stamps dmarc=pass for you@demo.test mailing from demo.test
        self._servers.append(self.smtp)
        self.smtp.start()
        path = self.folder / "quinn.toml"
        path.write_text(self.config_text(), encoding="utf-8")
        self.config = load_config(path, env={**os.environ, PASSWORD_ENV: dovecot.password})
        setup_logging(self.config.log_level, secrets=secret_values(self.config))
        if not self.verbose:  # the chat shows Quinn, not its warnings; they stay in the demo's quinn.log
            self.warnings = quiet_terminal(self.folder / "quinn.log")
        try:  # fail now, not after the first mail's retries; and say whether the model can do the job
            self.verdict = asyncio.run(self._check_model())
        except ConnectError as exc:
            raise ConnectError(exc.message, "is the model's server running and --base-url right? (Ollama: "
                               "`ollama serve`, then `ollama pull MODEL`)") from None  # fmt: skip
        self._app = Quinn(self.config)
        self._thread = threading.Thread(target=self._serve, name="quinn-demo", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready.wait(0.1):
            self._raise_failure()
            if time.monotonic() > deadline:
                raise ConnectError(f"Quinn did not start within {READY_TIMEOUT_S:.0f} s", "run again with --verbose")

    async def _check_model(self) -> Any:
        from quinn.agent import check_model

        assert self.config is not None
        llm = parts.llm(self.config)
        await llm.check()
        return await check_model(llm)

    def config_text(self) -> str:
        """quinn.toml for the demo: the packaged example with the demo mailbox, the model and trust filled in."""
        from quinn.lab.smtp import LAB_AUTHSERV

        values: dict[tuple[str, str], str | int | None] = {
            ("", "log_level"): "INFO",  # on the terminal with --verbose, else in the demo's quinn.log
            ("database", "url"): str(self.folder / "quinn.db"),
            ("smtp", "from_address"): QUINN, ("smtp", "reply_mode"): "send",
            ("smtp", "username"): None, ("smtp", "password_env"): None,
            ("policy", "authserv_id"): LAB_AUTHSERV,  # what the demo's MX stamps (quinn/lab/smtp.py)
            ("policy", "max_replies_per_sender_per_hour"): 200,  # a newcomer trying things out is no mail storm
            ("imap", "username"): QUINN, ("imap", "password_env"): PASSWORD_ENV,
            # With IDLE a mail that lands between a pass and the next IDLE waits at most this long.
            ("imap", "poll_interval_s"): 2,
            **self.llm,
        }  # fmt: skip
        for proto, server in (("imap", self.dovecot), ("smtp", self.smtp)):
            values |= {(proto, "host"): server.host, (proto, "port"): server.port, (proto, "tls"): "none"}
        return fill(packaged_file("quinn.example.toml").read_text(encoding="utf-8"), values)

    def _serve(self) -> None:
        try:
            asyncio.run(self._app.run(on_ready=self._ready.set))
        except BaseException as exc:  # handed to the terminal's thread, which reports it
            self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._thread is not None and not self._thread.is_alive():
            raise ConnectError("Quinn's daemon stopped", "run again with --verbose to see its log")

    def send(self, text: str, subject: str, timeout_s: float) -> Exchange:
        """Mail ``text`` from you to Quinn over SMTP and wait for the reply in your inbox."""
        assert self.config is not None
        raw = message(self.config, YOU, subject, text, domain=DEMO_DOMAIN)
        message_id = email.message_from_bytes(raw)["Message-ID"]
        started = time.monotonic()
        self.smtp.send(YOU, QUINN, raw)

        def answered() -> Exchange | None:
            for reply in self._inbox():
                if reply["In-Reply-To"] == message_id:
                    part = reply.get_body(("plain",))
                    body = part.get_content() if part is not None else ""
                    return Exchange(subject, text, body.rstrip(), round(time.monotonic() - started, 2),
                                    self._save_attachments(reply))  # fmt: skip
            self._raise_failure()
            return None

        try:
            return wait_for(answered, "Quinn's reply", timeout_s)
        except WaitTimeout:
            hint = "a slow model needs a longer --reply-timeout-s; --verbose shows the log"
            raise ConnectError(f"no reply from Quinn within {timeout_s:.0f} s", hint) from None

    def _save_attachments(self, reply: EmailMessage) -> list[str]:
        """The reply's files (a memory export's JSON) saved in the demo's folder, under a name made safe."""
        saved = []
        folder = self.folder / "attachments"
        for part in reply.iter_attachments():
            name = Path(str(part.get_filename() or "attachment")).name.lstrip(".") or "attachment"
            folder.mkdir(exist_ok=True)
            path = folder / name
            for n in range(2, 100):
                if not path.exists():
                    break
                path = folder / f"{Path(name).stem}-{n}{Path(name).suffix}"
            content = part.get_content()
            path.write_bytes(content if isinstance(content, bytes) else str(content).encode("utf-8"))
            saved.append(str(path))
        return saved

    @property
    def learning(self) -> bool:
        """Whether Quinn still has a mail in hand: the reply goes out before it learns from the mail."""
        return self._app is not None and self._app.handling is not None

    def settle(self, timeout_s: float) -> None:
        """Wait until Quinn has no mail in hand, so /memory and the next mail see what the last one taught it."""

        def settled() -> bool:
            if not self.learning:
                return True
            self._raise_failure()
            return False

        with contextlib.suppress(WaitTimeout):  # still learning: /memory shows what is there so far
            wait_for(settled, "Quinn done with the mail", timeout_s, interval_s=0.05)

    def _inbox(self) -> list[EmailMessage]:
        raws = self.dovecot.messages(YOU)
        return [email.message_from_bytes(r, policy=email.policy.default) for r in raws]

    def memories(self) -> list[dict[str, Any]]:
        """What Quinn remembers about you (``quinn memory list``'s store call, on the daemon's store)."""
        store = self._app.store
        return [{"id": m.id, "type": m.type, "content": m.content} for m in store.get_all(YOU)]

    def close(self) -> None:
        """Stop the daemon (the mail in flight finishes), then the servers; delete the folder unless kept."""
        if self._app is not None:
            self._app.stop()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
        for server in reversed(self._servers):
            with contextlib.suppress(Exception):
                server.close()
        if self.keep is None:
            shutil.rmtree(self.folder, ignore_errors=True)


def demo_command(args: argparse.Namespace, config: None) -> int:
    """Check what the demo needs, start it, then the scripted (--send) or the interactive conversation."""
    llm = llm_settings(args)
    check_installed()
    if args.json and not args.send:
        raise ConfigError("--json goes with --send", 'e.g. quinn demo --model ... --json --send "Hello"')
    say = print if not args.json else (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True))
    say(f"starting a throwaway mailbox on 127.0.0.1 and Quinn on it (model {llm[('llm', 'model')]})...")
    with Demo(llm, args.keep, args.verbose) as demo:
        verdict = demo.verdict
        say(("model check: " if verdict.passed else "model check FAILED: ") + verdict.line())
        say(f"you are {YOU}, Quinn is {QUINN}; the demo's quinn.toml is {demo.folder / 'quinn.toml'}"
            + ("" if args.verbose else f", its log {demo.folder / 'quinn.log'} (--verbose: here)"))  # fmt: skip
        say(f"a mail client may join in: IMAP 127.0.0.1:{demo.dovecot.port}, SMTP 127.0.0.1:{demo.smtp.port}, "
            f"no TLS, any @{DEMO_DOMAIN} user, password {demo.dovecot.password}")  # fmt: skip
        if args.send:
            exchanges = []
            for text in args.send:
                # Progress on stderr (with --json too): a slow local model is silent for minutes otherwise.
                print(f"mailed {text[:60]!r}; waiting for Quinn's reply...", file=sys.stderr, flush=True)
                exchange = demo.send(text, args.subject, args.reply_timeout_s)
                exchanges.append(exchange)
                if not args.json:
                    show(exchange)
                if demo.learning:
                    print(f"reply in {exchange.seconds:.1f} s; Quinn is learning from the mail...", file=sys.stderr,
                          flush=True)  # fmt: skip
                demo.settle(args.reply_timeout_s)
            if args.json:
                print_json({"you": YOU, "quinn": QUINN, "model_check": {"passed": verdict.passed,
                            "problems": verdict.problems}, "exchanges": [vars(e) for e in exchanges],
                            "memories": demo.memories()})  # fmt: skip
            finish(demo)
            return 0
        return converse(demo, args)


def finish(demo: Demo) -> None:
    """The demo's last word on stderr: how many warnings were kept in its log."""
    note = demo.warnings()
    if note:
        print(f"({note})", file=sys.stderr)


def show(exchange: Exchange, *, echo: bool = True) -> None:
    """Quinn's reply for people, after the mail (``echo``; at the prompt it is on the screen already)."""
    print(("\nyou: " + exchange.text if echo else "") + f"\nquinn ({exchange.seconds:.1f} s):\n{exchange.reply}\n")
    for path in exchange.attachments:
        print(f"attached: {path}")


def converse(demo: Demo, args: argparse.Namespace) -> int:
    """The interactive loop: each line is a mail to Quinn; /memory, /subject and /quit (or end of input). The
    prompt comes back as soon as the reply is shown: Quinn learns from the mail meanwhile."""
    print(f"Type a message and press Enter. {COMMANDS}.")
    subject = args.subject
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            line = "/quit"
        if line in ("/quit", "/exit"):
            print("stopping the demo" + ("" if demo.keep is None else f"; kept {demo.folder}"))
            finish(demo)
            return 0
        if line == "/memory":
            if demo.learning:
                print("(Quinn is still learning from your last mail; waiting for it)")
                demo.settle(args.reply_timeout_s)
            rows = demo.memories()
            print(f"Quinn remembers about {YOU}:" + ("" if rows else " nothing yet"))
            for row in rows:
                print(f"  [memory:{row['id']}] ({row['type']}) {row['content']}")
        elif line.startswith("/subject"):
            subject = line.removeprefix("/subject").strip() or DEFAULT_SUBJECT
            print(f"subject: {subject}")
        elif line.startswith("/"):
            print(COMMANDS)
        elif line:
            print("(mailed; waiting for Quinn's reply)")
            try:
                show(demo.send(line, subject, args.reply_timeout_s), echo=False)
                if demo.learning:
                    print("(Quinn is learning from your mail meanwhile: type on; a new mail waits until it is done)")
            except QuinnError as exc:
                print(f"quinn: {exc}", file=sys.stderr)
