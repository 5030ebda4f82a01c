"""The daemon as a service: signals, systemd notifications, the watchdog, the metrics endpoint, the console.

``serve`` wraps ``Quinn.run``:

* READY=1 once IMAP, the database and (when enabled) the scheduler are up, with a STATUS= line; STATUS= again
  whenever the counts change.
* WATCHDOG=1 every half ``WATCHDOG_USEC`` from READY=1 on, only while the event loop turns and the database thread
  answers: a wedged daemon stops pinging and systemd restarts it (``WatchdogSec=``).
* SIGTERM / SIGINT: STOPPING=1, no new mail is fetched, the mail in flight gets ``[service] shutdown_grace_s``
  to finish; past that it is cancelled (every step is idempotent, so the next start resumes it). Exit 0.
* ``[console] enabled``: the admin console is served on a thread over the daemon's own store (one connection
  per process: two libSQL connections in one process can deadlock, docs/architecture.md), from READY on.
* A remote database gets a ``SELECT 1`` every few seconds, or the server expires the idle connection.
* SIGHUP: RELOADING=1, the config file is read again and its reloadable part applied (``quinn.reload``), the
  templates are reloaded, READY=1. A broken file is logged and the running config kept.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from quinn.config import load_config
from quinn.errors import QuinnError
from quinn.logs import RedactingFilter, secret_values
from quinn.notify import Notifier

if TYPE_CHECKING:
    from quinn.app import Quinn
    from quinn.console.serve import ConsoleServer

log = logging.getLogger(__name__)

STATUS_EVERY_S = 2.0
# A libSQL server drops a connection's stream after ~10 s without a statement (sqld: "The stream has expired due
# to inactivity", measured); a remote database is pinged more often than that, the model load included.
REMOTE_KEEPALIVE_S = 4.0


class Service:
    """One ``quinn run``: the app, its notifier and what the signals do to it."""

    def __init__(self, app: Quinn, config_path: Path, notifier: Notifier, redactor: RedactingFilter | None) -> None:
        self.app = app
        self.config_path = config_path
        self.notifier = notifier
        self.redactor = redactor
        self.ready = False
        self._main: asyncio.Task[None] | None = None
        self._cut_off = False
        self._last_status = ""
        self.console: ConsoleServer | None = None

    async def serve(self) -> int:
        """Run the daemon until a signal stops it; returns the exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_stop, sig)
        loop.add_signal_handler(signal.SIGHUP, self.on_reload)
        helpers = [asyncio.create_task(self._status_loop(), name="quinn-status"),
                   asyncio.create_task(self._keepalive_loop(), name="quinn-db-keepalive")]  # fmt: skip
        interval = self.notifier.watchdog_interval_s
        if interval is not None:
            helpers.append(asyncio.create_task(self._watchdog_loop(interval), name="quinn-watchdog"))
        self._main = asyncio.create_task(self.app.run(on_ready=self.on_ready), name="quinn-main")
        try:
            await self._main
        except asyncio.CancelledError:
            if not self._cut_off:
                raise
            log.warning("shutdown grace period over: the mail in flight was cut off and resumes at the next start")
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self.app.metrics.close()
            if self.console is not None:
                self.console.stop()
            self.notifier.close()
        return 0

    # -- events ----------------------------------------------------------------------------------------

    def on_ready(self) -> None:
        """Called by ``Quinn.run`` once everything is up: endpoint, READY=1."""
        c = self.app.config
        if c.metrics.enabled:
            assert self.app.db is not None
            self.app.metrics.watch_database(self.app.db)
            self.app.metrics.serve(c.metrics.host, c.metrics.port)
        if c.console.enabled:
            from quinn.console.serve import ConsoleServer

            assert self.app.store is not None
            self.console = ConsoleServer(c.console, self.app.store, c)
            self.console.start()
        self.ready = True
        self._last_status = self.status_line()
        self.notifier.ready(self._last_status)

    def on_stop(self, sig: signal.Signals) -> None:
        """SIGTERM/SIGINT: stop fetching; cut the mail in flight off after the grace period."""
        if self.app.stopping:
            log.info("received %s again: still finishing the mail in flight", sig.name)
            return
        grace_s = self.app.config.service.shutdown_grace_s
        log.info("received %s: finishing the mail in flight (up to %.0fs), then stopping", sig.name, grace_s)
        self.notifier.stopping(f"stopping: finishing the mail in flight (up to {grace_s:.0f}s)")
        self.app.stop()
        asyncio.get_running_loop().call_later(grace_s, self._cut)

    def _cut(self) -> None:
        if self._main is not None and not self._main.done():
            self._cut_off = True
            self._main.cancel()

    def on_reload(self) -> None:
        """SIGHUP: read the config file again and apply what may change without a restart."""
        self.notifier.reloading()
        try:
            new = load_config(self.config_path)
            plan = self.app.reload(new)
        except QuinnError as exc:
            self.app.metrics.reloads.labels("failed").inc()
            log.error("reload failed, keeping the running configuration: %s", exc)
        else:
            self.app.metrics.reloads.labels("ok").inc()
            if self.redactor is not None:
                self.redactor.set_secrets(secret_values(plan.config))
            log.info("reloaded %s: %s", self.config_path, ", ".join(plan.applied) or "templates only")
            if plan.needs_restart:
                log.warning("changed but only applied after a restart: %s", ", ".join(plan.needs_restart))
        self.notifier.ready(self.status_line())

    # -- periodic --------------------------------------------------------------------------------------

    def status_line(self) -> str:
        """What ``systemctl status`` shows: state and counts since start."""
        app = self.app
        counts = app.metrics.finished_counts()
        detail = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))
        state = "stopping" if app.stopping else ("running" if self.ready else "starting")
        text = f"{state}: {sum(counts.values())} mails done since start"
        return f"{text} ({detail})" if detail else text

    async def _status_loop(self) -> None:
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            line = self.status_line()
            if self.ready and line != self._last_status:
                self._last_status = line
                self.notifier.status(line)

    async def _keepalive_loop(self) -> None:
        """Keep a remote database's stream alive through idle hours and the model load."""
        while True:
            await asyncio.sleep(REMOTE_KEEPALIVE_S)
            db = self.app.db
            if db is None or not db.remote or self.app.stopping:
                continue
            try:
                await db.run(db.query_value, "SELECT 1")
            except Exception as exc:  # the next real statement reports it; the ping must not kill the daemon
                log.warning("database keep-alive failed: %s", exc)

    async def _watchdog_loop(self, interval_s: float) -> None:
        """WATCHDOG=1 while the loop turns and the DB thread answers within one interval."""
        while True:
            await asyncio.sleep(interval_s)
            if not self.ready:  # systemd starts the watchdog at READY=1 (systemd.service(5), WatchdogSec=)
                continue
            if await _answers(self.app, interval_s):
                self.notifier.watchdog()
            else:
                log.error("database thread did not answer within %.1fs: not pinging the watchdog", interval_s)


async def _answers(app: Quinn, timeout_s: float) -> bool:
    db = app.db
    if db is None:  # not started: nothing to check
        return True
    try:
        await asyncio.wait_for(db.run(_nothing), timeout=timeout_s)
    except TimeoutError:
        return False
    except RuntimeError:  # the DB thread was shut down: we are stopping
        return True
    return True


def _nothing() -> None:
    return None


def serve(
    app: Quinn,
    config_path: Path,
    redactor: RedactingFilter | None = None,
    notifier_factory: Callable[[], Notifier] = Notifier.from_env,
) -> int:
    """``quinn run``'s body: run the app as a service until a signal; returns the exit code."""
    service = Service(app, config_path, notifier_factory(), redactor)
    return asyncio.run(service.serve())
