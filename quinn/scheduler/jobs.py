"""The background jobs, declared as data: one list, registered by one function (``JobRunner.start``).

Each job is a coroutine taking a ``JobContext``; it is idempotent and resumable (a run killed at any point
leaves consistent data, and the next run finishes the work), and it reports what it did in ``ctx.counts``.
Intervals and enable/disable come from ``[scheduler]`` (``intervals_min``, ``disabled``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from quinn.config import SchedulerConfig
from quinn.scheduler.cleanup import cleanup_job
from quinn.scheduler.consolidate import consolidate_job
from quinn.scheduler.context import JobContext
from quinn.scheduler.decay import decay_job
from quinn.scheduler.digest import digest_job
from quinn.scheduler.improvement import improvement_job
from quinn.scheduler.reflect import reflect_job
from quinn.scheduler.session_close import session_close_job
from quinn.scheduler.summarize import summarize_job


@dataclass(frozen=True)
class JobSpec:
    """One job: what runs, how often by default, and what it needs."""

    name: str
    run: Callable[[JobContext], Awaitable[None]]
    trigger: Literal["interval"]  # every job runs on an interval ("daily" is 1440 minutes)
    default_interval_min: float
    needs_llm: bool
    uses_embeddings: bool  # writes or compares memory vectors: needs the embedding model loaded
    description: str

    def interval(self, settings: SchedulerConfig) -> timedelta:
        """The configured interval (``[scheduler] intervals_min``), or the default."""
        return timedelta(minutes=settings.intervals_min.get(self.name, self.default_interval_min))

    def enabled(self, settings: SchedulerConfig) -> bool:
        """False when listed in ``[scheduler] disabled``."""
        return self.name not in settings.disabled


JOBS: tuple[JobSpec, ...] = (
    JobSpec("summarize", summarize_job, "interval", 10, needs_llm=True, uses_embeddings=True,
            description="fold the older messages of long threads into a rolling summary"),
    JobSpec("session_close", session_close_job, "interval", 5, needs_llm=True, uses_embeddings=True,
            description="review quiet sessions: memories, conversation summary, the user's short-term state"),
    JobSpec("consolidate", consolidate_job, "interval", 360, needs_llm=True, uses_embeddings=True,
            description="merge memories that share a tag or say the same thing"),
    JobSpec("decay", decay_job, "interval", 60, needs_llm=False, uses_embeddings=False,
            description="make memories used across sessions more stable; count faded ones"),
    JobSpec("cleanup", cleanup_job, "interval", 1440, needs_llm=False, uses_embeddings=False,
            description="archive unused low-importance, old context and expired memories"),
    JobSpec("reflect", reflect_job, "interval", 1440, needs_llm=True, uses_embeddings=True,
            description="promote repeated episodes to lasting facts; extend the entity graph"),
    JobSpec("improvement", improvement_job, "interval", 1440, needs_llm=True, uses_embeddings=False,
            description="reward per reply template version; draft proposals from review suggestions"),
    JobSpec("digest", digest_job, "interval", 1440, needs_llm=False, uses_embeddings=False,
            description='plan "what I learnt about you" mails ([scheduler] digest_every_days; off by default)'),
)  # fmt: skip


def job(name: str, jobs: tuple[JobSpec, ...] = JOBS) -> JobSpec:
    """The job called ``name``; a KeyError names the known ones."""
    for spec in jobs:
        if spec.name == name:
            return spec
    raise KeyError(f"no job {name!r}; jobs are {', '.join(j.name for j in jobs)}")
