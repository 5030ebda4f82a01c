"""Quinn's scheduler: the periodic jobs (declared as data in ``jobs``), their runner, leases and run log.

This is the scheduler's face: what other packages may use (tests/test_layers.py). It loads each module on first
use (``quinn.faces``): the jobs import the agent, and with it the model SDKs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quinn.faces import lazy_face

# name -> the module it lives in.
HOMES = {
    "JobContext": "context",
    "Figure": "health",
    "memory_health": "health",
    "JOBS": "jobs",
    "RunLog": "runlog",
    "job": "jobs",
    "LeaseHolder": "runlog",
    "Leases": "runlog",
    "JobOutcome": "runner",
    "JobRunner": "runner",
    "JobStatus": "runner",
    "default_holder": "runner",
    "holder_is_dead": "runner",
    "job_statuses": "runner",
    "reply_with_summary": "summarize",
    "wants_summary": "summarize",
}
__all__ = [*HOMES]
__getattr__ = lazy_face(__name__, HOMES)

if TYPE_CHECKING:
    from quinn.scheduler.context import JobContext as JobContext
    from quinn.scheduler.health import Figure as Figure
    from quinn.scheduler.health import memory_health as memory_health
    from quinn.scheduler.jobs import JOBS as JOBS
    from quinn.scheduler.jobs import job as job
    from quinn.scheduler.runlog import LeaseHolder as LeaseHolder
    from quinn.scheduler.runlog import Leases as Leases
    from quinn.scheduler.runlog import RunLog as RunLog
    from quinn.scheduler.runner import JobOutcome as JobOutcome
    from quinn.scheduler.runner import JobRunner as JobRunner
    from quinn.scheduler.runner import JobStatus as JobStatus
    from quinn.scheduler.runner import default_holder as default_holder
    from quinn.scheduler.runner import holder_is_dead as holder_is_dead
    from quinn.scheduler.runner import job_statuses as job_statuses
    from quinn.scheduler.summarize import reply_with_summary as reply_with_summary
    from quinn.scheduler.summarize import wants_summary as wants_summary
