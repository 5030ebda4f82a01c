"""Several mails in flight: at most ``limit`` answered at once, and mails that share a key (their thread, their
sender's bucket) strictly one after another, in the order they were started.

A mail takes its keys' locks before a slot, always in the same order (thread, then sender), so no two mails can
wait on each other. Started in UID order, each task's first step is to queue on its thread's lock, and asyncio's
locks wake waiters first come first served: within a thread, and within a sender, the order is the folder's.
Mails of one sender in one order means a user's next mail sees what was learnt from their last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

log = logging.getLogger(__name__)


class Flight:
    """The mails of one folder pass that are being answered."""

    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[Any]] = []

    def start(self, keys: Sequence[str], work: Callable[[], Awaitable[Any]]) -> None:
        """Answer a mail (``work``) once the locks of ``keys`` and a slot are free; the order of ``keys`` must be
        the same kind-by-kind for every mail (thread first, then sender)."""
        self._tasks.append(asyncio.create_task(self._run(list(keys), work)))

    async def _run(self, keys: list[str], work: Callable[[], Awaitable[Any]]) -> Any:
        async with AsyncExitStack() as held:
            for key in keys:
                await held.enter_async_context(self._locks.setdefault(key, asyncio.Lock()))
            async with self._slots:
                return await work()

    async def wait(self) -> None:
        """Wait for every mail started; then raise the first failure any of them raised (an IMAP failure, for
        the run loop to reconnect). Cancelled (SIGTERM past its grace), it cancels them all: each resumes from
        the ledger at the next start."""
        try:
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            raise
        finally:
            self._tasks.clear()
            self._locks.clear()
        for result in results:
            if isinstance(result, BaseException):
                raise result
