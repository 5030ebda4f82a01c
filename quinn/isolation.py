"""Untrusted bytes handled in a child process that can be stopped: a hard deadline and a memory cap.

A hostile input can keep a library busy inside one call (a PDF content stream crafted to make text extraction
crawl, a mail header the MIME parser chews on) or make it allocate without bound. A thread cannot be stopped, so
it would go on burning a core, and on the daemon's own loop it stalls every other user's mail. The work runs in a
child process instead, capped at ``MEMORY_CAP_BYTES`` of address space (where setrlimit is allowed: deploy/
quinn.service's system call filter refuses it, so there only the deadline and the work's own limits hold), and
killed when it outlives its deadline by ``STUCK_GRACE_S``. Its result comes back over a pipe.

A child never copies the daemon's threads, connections or secrets. With ``start="spawn"`` it is a fresh
interpreter (~300 ms to start and import); with ``"forkserver"`` it is forked from multiprocessing's fork server,
a fresh interpreter started once that has imported the mail parser already (``PRELOAD``), so a child costs
~25 ms: what parsing every mail needs (quinn/engine/mail.py, issue 30). The document readers (quinn/documents/
reading.py, issue 18) spawn: their child's CPU time shows in the daemon's ``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Start = Literal["spawn", "forkserver"]

MEMORY_CAP_BYTES = 1024 * 1024 * 1024  # address space of a child: far above any input within its limits
STUCK_GRACE_S = 2.0  # past the deadline, the child is given up on and killed
#: Imported once by the fork server, so that its children start with them (a child is a fork of it).
PRELOAD = ["quinn.mailbox.parse"]


class ChildStopped(Exception):
    """The child gave no answer: killed at its deadline (``timed_out``), or it died (the memory cap, a crash in a
    library's C code)."""

    def __init__(self, timed_out: bool) -> None:
        super().__init__("deadline passed" if timed_out else "the child process died")
        self.timed_out = timed_out


def _context(start: Start) -> Any:
    context = multiprocessing.get_context(start)
    if start == "forkserver":
        context.set_forkserver_preload(PRELOAD)  # takes effect when the server starts (once per process)
    return context


def run_in_child(target: Callable[..., T], *args: Any, timeout_s: float, start: Start = "forkserver",
                 grace_s: float = STUCK_GRACE_S, memory_cap_bytes: int = MEMORY_CAP_BYTES) -> T:  # fmt: skip
    """``target(*args)`` computed in a child process; ``ChildStopped`` when it gave no answer within ``timeout_s``
    + ``grace_s`` (the grace is for work that checks its own deadline, as the document readers do) or died.
    ``target`` must be a module-level function and never raise (return the reason instead). Blocks: call it from
    a worker thread (``asyncio.to_thread``)."""
    context = _context(start)
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(sending, memory_cap_bytes, target, args), daemon=True)
    child.start()
    sending.close()  # the child's end: EOF here once it exits
    try:
        if not receiving.poll(timeout_s + grace_s):
            raise ChildStopped(timed_out=True)
        try:
            result: T = receiving.recv()
        except EOFError as exc:  # it died without an answer
            raise ChildStopped(timed_out=False) from exc
        return result
    finally:
        receiving.close()
        if child.is_alive():
            child.kill()
        child.join()


def _run(sending: Connection, memory_cap_bytes: int, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """The child: cap the memory, compute, send the result."""
    # Refused under the unit's SystemCallFilter=~@resources: there the deadline and the work's own limits hold.
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_AS, (memory_cap_bytes, memory_cap_bytes))
    try:
        sending.send(target(*args))
    finally:
        sending.close()
