"""The DB thread: the one thread all of a ``Database``'s work runs on when the caller is async.

The libSQL driver holds the GIL for a whole query, so a query run on the event loop would stop everything else;
handed to this thread, it stops only the work queued behind it. One thread, not a pool: the connection serves
one statement at a time anyway (``Database`` holds one lock), and one queue keeps the callers' order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class DbThread:
    """One worker thread, named ``quinn-db``, and an awaitable door to it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quinn-db")

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run blocking work on the thread and wait for it without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    def shutdown(self) -> None:
        """Let queued work finish, then end the thread; safe to call twice."""
        self._pool.shutdown(wait=True)
