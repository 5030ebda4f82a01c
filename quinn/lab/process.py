"""Process-group helpers shared by the lab servers, plus an atexit safety net.

Every lab server runs in its own session (``start_new_session=True``), so its process group id equals the
leader's pid and one ``killpg`` ends the server and everything it forked.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from quinn.lab.wait import WaitTimeout, wait_for


class Stoppable(Protocol):
    """Anything with a `stop()` that is safe to call twice."""

    def stop(self) -> None:
        """Stop the server; no-op when it is not running."""


class LabServer:
    """The lifecycle the lab's server processes share: ``restart``, ``close`` (stop, then delete ``self.dir``)
    and ``with``. Subclasses give ``start(timeout_s)``, ``dir`` and ``restart_timeout_s``; those that run one
    process group in ``self._proc`` can start it with `_spawn` and take ``running`` and ``stop`` from here."""

    dir: Path
    restart_timeout_s = 10.0
    stop_grace_s = 5.0
    _proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """End the process group (SIGTERM, SIGKILL after ``stop_grace_s``) and wait (no-op when stopped)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group(proc, grace_s=self.stop_grace_s)
        untrack(self)

    def _spawn(
        self, cmd: list[str], log_path: Path, ready: Callable[[], bool], timeout_s: float, error: type[Exception]
    ) -> None:
        """Start `cmd` in its own session, logging to `log_path`, and return once `ready()` is true (an OSError
        counts as not yet); raise `error` with the log's tail when the process exits or `timeout_s` passes."""
        with log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir, start_new_session=True
            )
        track(self)
        name = Path(cmd[0]).name if len(cmd) < 3 or cmd[1] != "-m" else cmd[2]
        proc = self._proc

        def answers() -> bool:
            if proc.poll() is not None:
                self.stop()
                raise error(f"{name} exited with {proc.returncode} while starting\n{tail(log_path)}")
            return ready()

        try:
            wait_for(answers, f"{name} answering", timeout_s, interval_s=0.02, retry_on=(OSError,))
        except WaitTimeout as exc:
            self.stop()
            raise error(f"{name} did not answer: {exc}\n{tail(log_path)}") from None

    def restart(self, timeout_s: float | None = None) -> None:
        """Stop and start again on the same port with the same data."""
        self.stop()
        self.start(self.restart_timeout_s if timeout_s is None else timeout_s)

    def close(self) -> None:
        """Stop and delete the temp dir with all the server's data."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        """Start; ``close()`` on exit."""
        self.start(self.restart_timeout_s)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close (stop and delete everything)."""
        self.close()


_live: list[Stoppable] = []
_temp_dirs: list[Path] = []


def remove_at_exit(path: Path) -> None:
    """Delete the temp dir `path` when the interpreter exits (after `stop_all`), if nobody did before."""
    _temp_dirs.append(path)


def track(server: Stoppable) -> None:
    """Remember a running server so that the atexit hook stops it if a test run dies half way."""
    if not any(s is server for s in _live):
        _live.append(server)
    _exit_on_sigterm()


def _exit_on_sigterm() -> None:
    """Make SIGTERM end this process through ``SystemExit``, so ``with`` blocks and the atexit hook stop the
    servers it started: by default SIGTERM ends Python at once, and a killed benchmark left its model server
    running, holding a core. Only where nobody chose a handler (the daemon's own stays), from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_exit)


def _sigterm_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def untrack(server: Stoppable) -> None:
    """Forget a server that was stopped."""
    _live[:] = [s for s in _live if s is not server]


def stop_all() -> None:
    """Stop every tracked server (run at exit; also handy in a session finaliser)."""
    for server in list(reversed(_live)):
        with contextlib.suppress(Exception):
            server.stop()
    _live.clear()


@atexit.register
def _at_exit() -> None:
    stop_all()
    for path in _temp_dirs:
        shutil.rmtree(path, ignore_errors=True)
    _temp_dirs.clear()


def _group_alive(pgid: int) -> bool:
    """Tell whether any non-zombie process of group `pgid` is left."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # /proc/PID/stat: "pid (comm) state ppid pgrp ..." and comm may contain spaces or parens.
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_group(proc: subprocess.Popen[bytes], *, grace_s: float = 0.0, timeout_s: float = 10.0) -> None:
    """End the process group led by `proc`: SIGTERM first when `grace_s` > 0, then SIGKILL; reap the leader.

    Returns once the leader is reaped and no live process of the group is left (or `timeout_s` passed: the
    orphans of a killed leader are reaped by init, which can take a moment).
    """
    pgid = proc.pid
    if grace_s > 0 and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout_s)
    with contextlib.suppress(WaitTimeout):  # what init has not reaped by then is init's business
        wait_for(lambda: not _group_alive(pgid), f"process group {pgid} gone", timeout_s, interval_s=0.01)


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no log at {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])
