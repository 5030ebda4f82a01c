"""Trial renders of template text nobody vouches for yet: an admin's edit in the console (its check, its preview,
its save), a proposal being accepted, the improvement job's rewrite by the model.

Such text can loop for hours (``{% for i in range(100000) %}{% for j in range(100000) %}``) or ask for gigabytes
(``"x" * 4000000000``); the Jinja sandbox stops escapes, not that. So it is rendered only in a child process
(``quinn.confined``) with ``TRIAL_LIMITS``: killed past its deadline, its address space capped. The check renders
the sample variables and the heavy ones (``samples.heavy_sample_variables``: big data), so a template that passes
renders in time with real mail and memory too: that is what lets the daemon render the templates in use in its
own process, unconfined, for every reply. At most ``slots`` trials run at a time; one more is refused at once
(``TrialsBusy``: the console answers 503), never queued on a thread: a crowd of trials cannot take the threads a
login or a page needs. The waiting for a child happens on this object's own threads, never on an event loop or
the database thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from quinn.agent.prompts import RenderedPrompt, checked, rendered_or_problem
from quinn.agent.samples import heavy_sample_variables, sample_variables
from quinn.confined import ChildFailed, ChildLimits, run_confined
from quinn.errors import QuinnError, TemplateError

T = TypeVar("T")
TRIAL_SLOTS = 2  # trials at once per TemplateTrials: the machine may have two cores
# 5 s: start-up is not counted (confined.py), and the packaged templates take under half a second with the heavy
# samples; a template that passes may run in the daemon's process for every reply, so the bound is kept short.
# 512 MB: a template's render needs a few MB, Python and Jinja some 100.
TRIAL_LIMITS = ChildLimits(timeout_s=5.0, memory_bytes=512 * 2**20, result_bytes=16 * 2**20)
FIX_HINT = "look for a loop over range() or over a list inside another, or a string repeated many times"


class TrialsBusy(QuinnError):
    """Every trial slot is taken: try again in a few seconds."""


@dataclass(frozen=True)
class CheckedTemplate:
    """Template text that passed ``TemplateTrials.check``: what ``proposals.save`` and ``accept`` write."""

    name: str
    source: str


class TemplateTrials:
    """Checks and renders untrusted template text in confined children, at most ``slots`` at a time."""

    def __init__(self, slots: int = TRIAL_SLOTS, limits: ChildLimits = TRIAL_LIMITS) -> None:
        self.slots = slots
        self.limits = limits
        self._free = threading.BoundedSemaphore(slots)
        self._threads: ThreadPoolExecutor | None = None
        self._threads_lock = threading.Lock()

    # -- the work, blocking: the CLI's, and what the async doors run on this object's threads -------------------

    def problem(self, name: str, source: str) -> str | None:
        """Why ``source`` cannot be ``name``'s template (``prompts.checked``, in a child), or None. Blocks."""
        return self._take(self._problem, name, source)

    def check(self, name: str, source: str) -> CheckedTemplate:
        """``source`` as a template that passed the checks, or a ``TemplateError`` with the reason. Blocks."""
        problem = self.problem(name, source)
        if problem is not None:
            raise TemplateError(problem, "nothing was saved: fix the template and try again")
        return CheckedTemplate(name, source)

    def preview(self, name: str, source: str, variables: dict[str, Any]) -> RenderedPrompt:
        """``source`` checked, then rendered with ``variables`` (a person's real memory), in a child; a
        ``TemplateError`` says why not. Blocks."""
        answer = self._take(self._preview, name, source, variables)
        if isinstance(answer, str):
            raise TemplateError(answer)
        return answer

    # -- the async doors: for an event loop (the console's, the daemon's) ----------------------------------

    async def problem_async(self, name: str, source: str) -> str | None:
        """``problem`` without blocking the loop."""
        return await self._off_loop(self._problem, name, source)

    async def check_async(self, name: str, source: str) -> CheckedTemplate:
        """``check`` without blocking the loop."""
        problem = await self.problem_async(name, source)
        if problem is not None:
            raise TemplateError(problem, "nothing was saved: fix the template and try again")
        return CheckedTemplate(name, source)

    async def preview_async(self, name: str, source: str, variables: dict[str, Any]) -> RenderedPrompt:
        """``preview`` without blocking the loop."""
        answer = await self._off_loop(self._preview, name, source, variables)
        if isinstance(answer, str):
            raise TemplateError(answer)
        return answer

    # -- inside ----------------------------------------------------------------------------------------

    def _problem(self, name: str, source: str) -> str | None:
        samples, heavy = sample_variables(), heavy_sample_variables()
        return self._confined(checked, (name, source, samples, heavy))

    def _preview(self, name: str, source: str, variables: dict[str, Any]) -> RenderedPrompt | str:
        samples, heavy = sample_variables(), heavy_sample_variables()
        return self._confined(rendered_or_problem, (name, source, variables, samples, heavy))

    def _confined(self, function: Callable[..., T], args: tuple[Any, ...]) -> T | str:
        try:
            return run_confined(function, args, self.limits)
        except ChildFailed as exc:
            return f"rendering the template {exc.message}: {FIX_HINT}"

    def _slot(self) -> None:
        if not self._free.acquire(blocking=False):
            raise TrialsBusy(f"{self.slots} template checks or previews are running already",
                             "try again in a few seconds")  # fmt: skip

    def _take(self, work: Callable[..., T], *args: Any) -> T:
        self._slot()
        try:
            return work(*args)
        finally:
            self._free.release()

    async def _off_loop(self, work: Callable[..., T], *args: Any) -> T:
        self._slot()  # on the loop: refused at once, no thread taken

        def run() -> T:
            try:
                return work(*args)
            finally:
                self._free.release()  # here, not after the await: a cancelled caller does not free a busy slot

        with self._threads_lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="quinn-trial")
            threads = self._threads
        try:
            future = threads.submit(run)
        except BaseException:
            self._free.release()
            raise
        return await asyncio.wrap_future(future)
