"""Running untrusted work in a child process that can be stopped: a wall-clock deadline, a memory cap, a CPU cap and a
bound on the answer's size.

A thread cannot be stopped, so work that a hostile input can make slow or huge (a PDF crafted to make text
extraction crawl, a template with nested loops or ``"x" * 10**10``) would go on burning a core, or the memory, after
its caller gave up. ``run_confined`` runs ``function(*args)`` in a fresh child instead (``spawn``: no copy of the
caller's threads, connections or secrets), which sets its own limits before it starts: address space at
``memory_bytes`` and CPU time at the deadline (deploy/quinn.service's ``~@resources`` refuses the old setrlimit
system call, but glibc sets limits through prlimit64, which ``@default`` allows: the caps hold under the unit,
tests/agent/test_trials.py proves it in its sandbox), then tells the parent it is ready. The deadline starts then,
so a slow start-up (importing the function's module) is not counted against the work; start-up has its own, generous
bound. Past the deadline the child is killed. The answer comes back over a pipe, at most ``result_bytes`` of it.
Blocks: call it from a worker thread, never from an event loop or the database thread. Used by the document readers
(``quinn.documents``), the template trials (``quinn.agent``) and each mail's parse (``quinn.engine``, issue 30).

``start="spawn"`` (the default) starts a fresh interpreter: ~300 ms to start and import. ``start="forkserver"`` forks
the child from multiprocessing's fork server, itself a fresh interpreter started once that has imported ``PRELOAD``
(the mail parser) already: ~25 ms a child, what parsing every mail can afford. Neither copies the caller's threads,
connections or secrets.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import resource
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal, TypeVar

from quinn.errors import QuinnError

T = TypeVar("T")
Start = Literal["spawn", "forkserver"]
#: Imported once by the fork server, so that its children start with them (a child is a fork of it). A child still
#: runs the main script's top level again (``__mp_main__``): the ``quinn`` script's entry point is therefore
#: ``quinn.entry``, which imports nothing.
PRELOAD = ["quinn.mailbox.parse"]
STARTUP_S = 60.0  # a child that has not even imported its function by then is given up on (a starved machine)


@dataclass(frozen=True)
class ChildLimits:
    """What a confined child may use: seconds of work (from its start-up on), bytes of address space, bytes of
    pickled answer."""

    timeout_s: float
    memory_bytes: int
    result_bytes: int = 64 * 1024 * 1024


class ChildFailed(QuinnError):
    """The child outlived its deadline, hit its memory cap, crashed, or answered too much; the message says which,
    as the end of a sentence ("took longer than the 5 s limit"), ``kind`` as a word: startup, timeout, memory,
    size or error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def run_confined(function: Callable[..., T], args: tuple[Any, ...], limits: ChildLimits, start: Start = "spawn") -> T:
    """``function(*args)`` run in a child under ``limits``; its return value, or ``ChildFailed``. The function must
    be importable by name (a module's top level) and take and return picklable values; an exception it raises comes
    back as ``ChildFailed`` naming it."""
    context: Any = multiprocessing.get_context(start)  # spawn and forkserver contexts: both have Process
    if start == "forkserver":
        context.set_forkserver_preload(PRELOAD)  # takes effect when the server starts (once per process)
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sending, function, args, limits), daemon=True)
    child.start()
    sending.close()  # the child's end: EOF here once it exits
    try:
        if not receiving.poll(STARTUP_S):
            raise ChildFailed("startup", f"did not start within {STARTUP_S:g} s (the machine is overloaded)")
        receiving.recv_bytes()  # "ready": its limits are set, the work begins
        if not receiving.poll(limits.timeout_s):
            raise ChildFailed("timeout", f"took longer than the {limits.timeout_s:g} s limit")
        answer = receiving.recv_bytes(limits.result_bytes)
    except EOFError:  # it died without an answer: the memory or CPU cap, or a crash in a library's C code
        raise ChildFailed(
            "memory", f"needed more than the {limits.memory_bytes // 2**20} MB memory limit, or crashed"
        ) from None
    except OSError:  # recv_bytes refuses an answer longer than result_bytes
        raise ChildFailed("size", f"gave an answer larger than {limits.result_bytes // 2**20} MB") from None
    finally:
        receiving.close()
        if child.is_alive():
            child.kill()
        child.join()
    kind, value = pickle.loads(answer)
    if kind == "memory":
        raise ChildFailed("memory", f"needed more than the {limits.memory_bytes // 2**20} MB memory limit")
    if kind == "error":
        raise ChildFailed("error", f"failed: {value}")
    return value


def _child(sending: Connection, function: Callable[..., Any], args: tuple[Any, ...], limits: ChildLimits) -> None:
    """The child: cap the memory and the CPU time, say it is ready, run, send the answer."""
    # Should a filter refuse it (a libc using the setrlimit system call under ~@resources), the deadline holds.
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    with contextlib.suppress(OSError, ValueError):
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = int(used.ru_utime + used.ru_stime + limits.timeout_s) + 1  # SIGXCPU ends it past this
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s if hard == resource.RLIM_INFINITY else min(cpu_s, hard), hard))
    try:
        sending.send_bytes(b"ready")
        try:
            answer = pickle.dumps(("ok", function(*args)))
        except MemoryError:
            answer = pickle.dumps(("memory", None))
        except Exception as exc:  # a bug in the work: named, not lost
            answer = pickle.dumps(("error", f"{type(exc).__name__}: {str(exc)[:500]}"))
        sending.send_bytes(answer)
    finally:
        sending.close()


def _ready() -> bool:
    return True


def warm() -> None:
    """Start the fork server and wait until it has imported ``PRELOAD``, so the first mail after a start is parsed
    in ~25 ms like the rest, not after the server's own start-up (up to seconds on a busy box). Run at the
    daemon's start: a mail read in that window would otherwise gather a strike (issue 30's poison counter) each
    time a crash loop killed the daemon early, and be quarantined for no fault of its own. Blocks."""
    run_confined(_ready, (), ChildLimits(timeout_s=STARTUP_S, memory_bytes=1024 * 1024 * 1024), "forkserver")
