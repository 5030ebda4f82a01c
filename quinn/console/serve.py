"""Running the console under uvicorn: ``quinn console`` in the foreground, or ``quinn run`` on a thread.

uvicorn and starlette come with the ``console`` extra; without them the console says which extra to install.
The listening socket is bound here, so a port in use is one clear error and port 0 picks a free one. Behind a
reverse proxy on the same host, uvicorn takes the client's address from X-Forwarded-For (it trusts 127.0.0.1
only), so the login rate limit counts per real client, not per proxy.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from quinn.config import Config, ConsoleConfig
from quinn.errors import ConfigError
from quinn.memory import MemoryStore

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The venv's own pip: Quinn is not on the public index, but the installed quinn-mail satisfies the name and pip
# fetches only the extra's packages (issue 34).
EXTRA_HINT = (
    f"install the console extra: {Path(sys.prefix) / 'bin' / 'pip'} install 'quinn-mail[console]' "
    "(or pip install '.[console]' in Quinn's source folder)"
)


class ConsoleServer:
    """The console app under uvicorn on a socket bound to ``[console] host:port``; not serving until asked."""

    def __init__(self, config: ConsoleConfig, store: MemoryStore, full: Config | None = None) -> None:
        """``full``: the whole config, for the Prompts pages' template directory and previews."""
        try:
            import uvicorn

            from quinn.console.app import Console
            from quinn.console.routes import build_app
        except ImportError as exc:
            raise ConfigError(f"the console needs {exc.name}, which is not installed", EXTRA_HINT) from None
        extra = {**prompt_parts(full, store), **job_parts(full, store), **mail_parts(full, store),
                 **usage_parts(full)} if full else {}  # fmt: skip
        console = Console(config, store, **extra)  # checks the admins' hashes before anything listens
        self.socket = bind(config.host, config.port)
        host, port = self.socket.getsockname()[:2]
        self.url = f"http://{host}:{port}/" if ":" not in host else f"http://[{host}]:{port}/"
        self.admins = len(console.admins)
        # No access log (paths name users), no Server header; lifespan off: the app has no startup work.
        self.server = uvicorn.Server(uvicorn.Config(build_app(console), log_level="warning", access_log=False,
                                                    lifespan="off", server_header=False))  # fmt: skip
        self._thread: threading.Thread | None = None

    async def serve(self) -> None:
        """Serve until ``stop()`` or, on the main thread, SIGINT/SIGTERM."""
        log.info("console on %s for %d admins", self.url, self.admins)
        await self.server.serve(sockets=[self.socket])

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve on a background thread (the daemon, the tests); returns once it accepts connections."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="quinn-console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the console did not start on {self.url}", "see the log lines above")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving (the requests in flight finish) and wait for the thread; safe to call twice."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.socket.close()


def prompt_parts(config: Config, store: MemoryStore) -> dict[str, Any]:
    """The console's own ``PromptStore`` over ``[prompts] dir`` and its preview: the variables a template gets
    for a sample email with a person's real memory (``samples.preview_variables``; the agent is built on the
    first preview, which needs no model key)."""
    from quinn.agent import preview_variables
    from quinn.engine import parts

    prompts = parts.prompts(config, checked=False)
    agents: list[Any] = []

    def preview(name: str, user: str, text: str, subject: str) -> dict[str, Any]:
        if not agents:
            agents.append(parts.agent(config, parts.llm(config), prompts, store))
        return preview_variables(config, agents[0], name, user, text, subject)

    return {"prompts": prompts, "preview": preview}


def job_parts(config: Config, store: MemoryStore) -> dict[str, Any]:
    """The jobs' settings and "run now": the runner ``quinn jobs run`` builds (its own lease holder, so a job
    the daemon is running is not run twice), made on the first run; the model client only for a job that
    needs one (without its key, that run fails with the reason and the others still run)."""
    from quinn.engine import parts
    from quinn.scheduler import job

    runners: dict[bool, Any] = {}

    async def run_job(name: str) -> Any:
        needs_llm = job(name).needs_llm
        if needs_llm not in runners:
            llm = parts.llm(config) if needs_llm else None
            runners[needs_llm] = parts.scheduler(config, store, llm, parts.prompts(config, checked=False))
        return await runners[needs_llm].run_job(name, force=True)

    return {"job_settings": config.scheduler, "run_job": run_job}


def mail_parts(config: Config, store: MemoryStore) -> dict[str, Any]:
    """The Mail page's retry: ``engine.retry.retry`` with the IMAP settings, the function of ``quinn mail status
    --retry`` (a moved mail needs the IMAP password in the console's environment); ``[smtp] reply_mode``, for
    its drafts awaiting review; and a purge's mailbox part (``purge_mailbox``)."""
    from quinn.engine.retry import retry

    return {"retry_mail": lambda key: retry(config, store.db, key), "reply_mode": config.smtp.reply_mode,
            "purge_mailbox": lambda user: purge_mailbox(config, user)}  # fmt: skip


def purge_mailbox(config: Config, user: str) -> int:
    """A purge's mailbox part, as ``quinn memory purge --mailbox`` does it: the person's mail and Quinn's to them
    out of Quinn's folders; returns how many went. Needs the IMAP password in the console's environment."""
    from quinn.engine import parts

    mailbox = parts.mailbox(config)
    try:
        mailbox.connect()
        return mailbox.purge_address(user, config.smtp.from_address)
    finally:
        mailbox.close()


def usage_parts(config: Config) -> dict[str, Any]:
    """The prices of ``[llm]``, for the cost beside the tokens (People, a person, why a reply)."""
    from quinn.agent import usage

    return {"prices": usage.prices_from(config.llm)}


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; an address in use or not ours is a ``ConfigError``."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=64)
    except OSError as exc:
        raise ConfigError(f"console {host}:{port}: {exc.strerror or exc}",
                          "choose another [console] host or port, or stop what listens there") from None  # fmt: skip


def serve(config: Config) -> int:
    """``quinn console``: serve the configured database until SIGINT/SIGTERM (exit 0), then close the store."""
    if not config.console.enabled:
        raise ConfigError("the console is off (console.enabled = false)",
                          "set enabled = true in [console] and add a [[console.admins]] table")  # fmt: skip
    from quinn.commands.database import open_database
    from quinn.memory import embedder_for

    store = MemoryStore(open_database(config), embedder_for(config.embeddings))  # an edit embeds the new text
    try:
        server = ConsoleServer(config.console, store, config)
        # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again for the handler it found:
        # a quiet one here, so a stop is exit 0 (as for `quinn run`), not death by SIGTERM.
        stopped: list[int] = []
        previous = {sig: signal.signal(sig, lambda number, _frame: stopped.append(number)) for sig in STOP_SIGNALS}
        try:
            asyncio.run(server.serve())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.socket.close()
        log.info("console stopped%s", f" by signal {stopped[0]}" if stopped else "")
    finally:
        store.close()
    return 0
