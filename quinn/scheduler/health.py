"""The memory-health figures (issue 20, the console's Jobs and health page), from what is already recorded.

* gate rejection rate: of the answered mails learning decided on, the share the sensory gate turned away
  (``reply_traces.gate``, written by ``Agent.learn``);
* extraction yield: memories created or changed per mail that went to extraction (``reply_traces.learnt``);
* promotion rate: of the episodes the reflect job weighed, the share promoted to lasting facts (its runs'
  ``promoted`` / ``processed`` in ``job_runs``);
* core stability: one less the profile's changes (updated, replaced, forgotten) per current profile memory
  within the window (``memory.scopes``);
* retrieval hit rate: the share of replies whose prompt got a memory found by search or a passage
  (``reply_traces.retrieved``).

Each figure is over the last ``days`` days, with one value per day for a chart; ``None`` where there is nothing
to divide by. Runs on the database thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from quinn.agent import DayFigures, daily_figures
from quinn.db import Database
from quinn.memory import current_by_scope, profile_changes_by_day
from quinn.scheduler.runlog import RunLog

WINDOW_DAYS = 14
REFLECT_RUNS = 500  # far more reflect runs than a window holds (it runs daily)


@dataclass(frozen=True)
class Figure:
    """One health figure over the window, and its value per day (oldest first)."""

    name: str
    value: float | None
    numerator: float
    denominator: float
    unit: str  # "%" or "per mail"
    meaning: str
    days: tuple[tuple[str, float | None], ...]


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def memory_health(db: Database, now: datetime, days: int = WINDOW_DAYS) -> list[Figure]:
    """The five figures over the last ``days`` days."""
    since = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    calendar = [(since + timedelta(days=i)).date().isoformat() for i in range(days)]
    traced = {d.day: d for d in daily_figures(db, since)}
    empty = DayFigures("", 0, 0, 0, 0, 0, 0)

    def from_traces(name: str, top: Callable[[DayFigures], int], bottom: Callable[[DayFigures], int], unit: str,
                    meaning: str) -> Figure:  # fmt: skip
        per_day = tuple((day, _ratio(top(traced.get(day, empty)), bottom(traced.get(day, empty)))) for day in calendar)
        n = sum(top(d) for d in traced.values())
        m = sum(bottom(d) for d in traced.values())
        return Figure(name, _ratio(n, m), n, m, unit, meaning, per_day)

    reflect = [r for r in RunLog(db).runs("reflect", limit=REFLECT_RUNS) if r.started_at >= since.isoformat()]
    promoted: dict[str, list[int]] = {day: [0, 0] for day in calendar}
    for run in reflect:
        day = promoted.setdefault(run.started_at[:10], [0, 0])
        day[0] += int(run.counts.get("promoted") or 0)
        day[1] += int(run.counts.get("processed") or 0)
    profile = current_by_scope(db).get("profile", 0)
    changes = profile_changes_by_day(db, since)
    changed = sum(changes.values())
    return [
        from_traces("gate rejection rate", lambda d: d.rejected, lambda d: d.learnt_from, "%",
                    "answered mails the sensory gate found nothing to learn in"),
        from_traces("extraction yield", lambda d: d.memories, lambda d: d.extracted, "per mail",
                    "memories created or changed per mail sent to extraction"),
        Figure("promotion rate", _ratio(sum(p for p, _ in promoted.values()), sum(n for _, n in promoted.values())),
               sum(p for p, _ in promoted.values()), sum(n for _, n in promoted.values()), "%",
               "episodes the reflect job promoted to lasting facts, of those it weighed",
               tuple((day, _ratio(*promoted[day])) for day in calendar)),
        Figure("core stability", max(0.0, 1 - changed / profile) if profile else None, profile - min(changed, profile),
               profile, "%", "profile memories not changed, replaced or forgotten in the window (one less changes"
               " per current profile memory)",
               tuple((day, max(0.0, 1 - changes.get(day, 0) / profile) if profile else None) for day in calendar)),
        from_traces("retrieval hit rate", lambda d: d.retrieved, lambda d: d.replies, "%",
                    "replies whose prompt got a memory found by search or a passage of past mail"),
    ]  # fmt: skip
