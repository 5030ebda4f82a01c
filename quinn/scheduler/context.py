"""What a job receives: typed dependencies for one run (store, model, templates, settings, clock) and its counts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from quinn.agent import LLM, PromptStore, TemplateTrials, Usage, record_usage
from quinn.clock import Clock
from quinn.config import RetentionConfig, SchedulerConfig
from quinn.errors import ConfigError, RetryLater
from quinn.memory import MemoryStore

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILURES = 2  # then the model is likely down: the run stops and the next one retries
MAX_FAILED_ITEMS_SHOWN = 10


@dataclass
class JobCounts:
    """What one run did; stored as JSON in ``job_runs.counts``. ``cursor`` is where the next run resumes."""

    processed: int = 0
    created: int = 0
    updated: int = 0
    merged: int = 0
    archived: int = 0
    promoted: int = 0
    skipped: int = 0
    cursor: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The non-empty counts, for the run log and ``quinn jobs list``."""
        return {key: value for key, value in asdict(self).items() if value not in (0, None, {})}


@dataclass
class JobContext:
    """One run of one job: its dependencies, passed explicitly (no globals), and the counts it fills in."""

    job: str
    store: MemoryStore
    llm: LLM | None
    prompts: PromptStore
    settings: SchedulerConfig
    clock: Clock
    counts: JobCounts = field(default_factory=JobCounts)
    cursor: int = 0  # the cursor the previous successful run left (0: start from the beginning)
    consecutive_failures: int = 0
    retention: RetentionConfig = field(default_factory=RetentionConfig)  # the cleanup job's windows
    #: Where a template the model wrote is trial-rendered: a child process with limits (the runner's, one at a time)
    trials: TemplateTrials = field(default_factory=lambda: TemplateTrials(slots=1))

    def now(self) -> datetime:
        """The job's notion of now (a ``ManualClock`` in tests)."""
        return self.clock.now()

    def model(self) -> LLM:
        """The LLM seam; a job marked ``needs_llm`` gets one."""
        if self.llm is None:
            raise ConfigError(f"job {self.job} needs the language model", "configure [llm] for the scheduler")
        return self.llm

    def item_failed(self, item: str, exc: RetryLater) -> None:
        """One item (a session, a group) failed transiently: skip it, keep it for the next run, go on.

        One bad item (a thread the model keeps answering with invalid JSON) must not starve the others; after
        ``MAX_CONSECUTIVE_FAILURES`` in a row the model is probably down, and the run stops with the error.
        """
        self.counts.skipped += 1
        failed = self.counts.details.setdefault("failed_items", [])
        if len(failed) < MAX_FAILED_ITEMS_SHOWN:
            failed.append(f"{item}: {exc.message}"[:300])
        self.consecutive_failures += 1
        if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            raise exc
        log.warning("job %s: %s skipped until the next run: %s", self.job, item, exc.message)

    def item_done(self) -> None:
        """An item went through: the model is answering."""
        self.consecutive_failures = 0

    async def db(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run blocking database (and embedding) work on the database thread."""
        return await self.store.db.run(fn, *args, **kwargs)

    async def record_usage(self, usage: Usage, user_id: str | None) -> None:
        """Book the tokens of a model call on this job (``llm_usage.purpose`` = ``job:<name>``)."""
        await self.db(record_usage, self.store.db, f"job:{self.job}", usage, user_id=user_id, at=self.now())
