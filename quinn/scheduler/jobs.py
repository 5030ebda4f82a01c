"""The background jobs, declared as data: one list, registered by one function (``JobRunner.start``).

Each job is a coroutine taking a ``JobContext``; it is idempotent and resumable (a run killed at any point
leaves consistent data, and the next run finishes the work), and it reports what it did in ``ctx.counts``.
A declaration carries what the scheduler needs to know of a job: its default interval and time limit (both
overridable per job in ``[scheduler]``: ``intervals_min``, ``timeouts_min``; ``disabled`` turns it off) and the
``[scheduler]`` settings that tune it (``tunables``: `quinn jobs list` shows them with the job, and
tests/scheduler/test_runner.py checks the list against the settings its module reads).
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
    default_timeout_min: float  # a run still going after this is stopped and recorded failed; the next run goes on
    tunables: tuple[str, ...] = ()  # the [scheduler] settings it reads

    def interval(self, settings: SchedulerConfig) -> timedelta:
        """The configured interval (``[scheduler] intervals_min``), or the default."""
        return timedelta(minutes=settings.intervals_min.get(self.name, self.default_interval_min))

    def timeout(self, settings: SchedulerConfig) -> timedelta:
        """The configured time limit of one run (``[scheduler] timeouts_min``), or the default."""
        return timedelta(minutes=settings.timeouts_min.get(self.name, self.default_timeout_min))

    def enabled(self, settings: SchedulerConfig) -> bool:
        """False when listed in ``[scheduler] disabled``."""
        return self.name not in settings.disabled


JOBS: tuple[JobSpec, ...] = (
    JobSpec("summarize", summarize_job, "interval", 10, needs_llm=True, uses_embeddings=True,
            description="fold the older messages of long threads into a rolling summary",
            default_timeout_min=60, tunables=("summarize_threshold_tokens", "summarize_keep_recent")),
    JobSpec("session_close", session_close_job, "interval", 5, needs_llm=True, uses_embeddings=True,
            description="review quiet sessions: memories, conversation summary, the user's short-term state",
            default_timeout_min=60, tunables=("session_close_after_min", "summarize_threshold_tokens")),
    JobSpec("consolidate", consolidate_job, "interval", 360, needs_llm=True, uses_embeddings=True,
            description="merge memories that share a tag or say the same thing",
            default_timeout_min=120, tunables=("consolidate_min_group", "consolidate_similarity")),
    JobSpec("decay", decay_job, "interval", 60, needs_llm=False, uses_embeddings=False,
            description="make memories used across sessions more stable; count faded ones",
            default_timeout_min=15, tunables=("spaced_growth",)),
    JobSpec("cleanup", cleanup_job, "interval", 1440, needs_llm=False, uses_embeddings=False,
            description="archive unused low-importance, old context and expired memories",
            default_timeout_min=15,
            tunables=("cleanup_min_importance", "cleanup_unused_days", "cleanup_context_days")),
    JobSpec("reflect", reflect_job, "interval", 1440, needs_llm=True, uses_embeddings=True,
            description="promote repeated episodes to lasting facts; extend the entity graph",
            default_timeout_min=180,
            tunables=("reflect_min_episodes", "reflect_similarity", "core_update_min_days")),
    JobSpec("improvement", improvement_job, "interval", 1440, needs_llm=True, uses_embeddings=False,
            description="reward per reply template version; draft proposals from review suggestions",
            default_timeout_min=60),
    JobSpec("digest", digest_job, "interval", 1440, needs_llm=False, uses_embeddings=False,
            description='plan "what I learnt about you" mails ([scheduler] digest_every_days; off by default)',
            default_timeout_min=15, tunables=("digest_every_days", "digest_max_items")),
)  # fmt: skip


def job(name: str, jobs: tuple[JobSpec, ...] = JOBS) -> JobSpec:
    """The job called ``name``; a KeyError names the known ones."""
    for spec in jobs:
        if spec.name == name:
            return spec
    raise KeyError(f"no job {name!r}; jobs are {', '.join(j.name for j in jobs)}")
