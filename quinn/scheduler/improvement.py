"""Job 7, improvement: how each reply template version fares, from the conversation summaries.

Session close scores every finished conversation (reward_score from -1 to 1, from the user's reactions) and
records the reply template version it was answered with. This job aggregates them per version (count, mean
reward, latest suggestions) so admins can compare template versions; ``prompt_stats`` is the query behind
``quinn prompts stats``. No template is ever changed automatically: the numbers are for a person to read.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from quinn.memory.db import Database
from quinn.scheduler.context import JobContext

log = logging.getLogger(__name__)

SUGGESTIONS_PER_VERSION = 3


@dataclass(frozen=True)
class PromptVersionStats:
    """One template version's record: conversations, how many were scored, mean reward, latest suggestions."""

    prompt_version: str
    conversations: int
    scored: int
    mean_reward: float | None
    last_at: str
    suggestions: tuple[str, ...]


def prompt_stats(db: Database) -> list[PromptVersionStats]:
    """Per reply template version ("" for sessions Quinn never answered), newest version first."""
    rows = db.query(
        "SELECT prompt_version, count(*), count(reward_score), avg(reward_score), max(created_at)"
        " FROM conversation_summaries GROUP BY prompt_version ORDER BY max(created_at) DESC, prompt_version"
    )
    stats = []
    for version, conversations, scored, mean, last_at in rows:
        suggestions = db.query(
            "SELECT improvement_suggestion FROM conversation_summaries WHERE prompt_version = ?"
            " AND improvement_suggestion != '' ORDER BY created_at DESC, id DESC LIMIT ?",
            (version, SUGGESTIONS_PER_VERSION),
        )
        stats.append(PromptVersionStats(
            version, int(conversations), int(scored), None if mean is None else round(float(mean), 3), last_at,
            tuple(s[0] for s in suggestions),
        ))  # fmt: skip
    return stats


async def improvement_job(ctx: JobContext) -> None:
    """Aggregate the conversation summaries per template version into the run's counts and the log."""
    stats = await ctx.db(prompt_stats, ctx.store.db)
    ctx.counts.processed = sum(s.conversations for s in stats)
    ctx.counts.details["versions"] = [asdict(s) for s in stats]
    for s in stats:
        log.info("prompt %s: %d conversations, %d scored, mean reward %s", s.prompt_version or "(no reply)",
                 s.conversations, s.scored, "n/a" if s.mean_reward is None else f"{s.mean_reward:+.2f}")  # fmt: skip
