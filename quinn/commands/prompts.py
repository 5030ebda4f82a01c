"""``quinn prompts stats``: how each prompt version fared, from the reflection data in the database.

Reads ``conversation_summaries`` (summaries, reward scores and suggestions written per session and prompt
version) and the outbox (replies written per template version). ``prompts check|render`` join this group.
"""

from __future__ import annotations

import argparse
from typing import Any

from quinn.commands.database import DATABASE_ONLY, open_database
from quinn.commands.output import add_json_flag, console, print_json, shorten, table
from quinn.config import Config
from quinn.memory.db import Database

COLUMNS = ["prompt_version", "replies", "summaries", "avg_reward", "last_used", "latest_suggestion"]


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn prompts stats``."""
    group = sub.add_parser("prompts", help="prompt templates")
    commands = group.add_subparsers(dest="prompts_command", metavar="COMMAND", required=True)
    stats = with_config(add_json_flag(commands.add_parser("stats", help="replies and reward per prompt version")))
    stats.set_defaults(handler=prompts_stats, secrets_of=DATABASE_ONLY)


def prompt_stats(db: Database) -> list[dict[str, Any]]:
    """One row per prompt version seen in the outbox or in conversation summaries."""
    rows = db.query(
        """
        WITH versions AS (
            SELECT prompt_version FROM outbox WHERE prompt_version != ''
            UNION SELECT prompt_version FROM conversation_summaries WHERE prompt_version != ''
        )
        SELECT v.prompt_version,
            (SELECT count(*) FROM outbox o WHERE o.prompt_version = v.prompt_version),
            (SELECT count(*) FROM conversation_summaries c WHERE c.prompt_version = v.prompt_version),
            (SELECT avg(reward_score) FROM conversation_summaries c WHERE c.prompt_version = v.prompt_version),
            max(coalesce((SELECT max(created_at) FROM outbox o WHERE o.prompt_version = v.prompt_version), ''),
                coalesce((SELECT max(created_at) FROM conversation_summaries c
                          WHERE c.prompt_version = v.prompt_version), '')),
            (SELECT improvement_suggestion FROM conversation_summaries c
             WHERE c.prompt_version = v.prompt_version AND improvement_suggestion != ''
             ORDER BY created_at DESC LIMIT 1)
        FROM versions v ORDER BY 5 DESC
        """
    )
    return [
        {"prompt_version": version, "replies": replies, "summaries": summaries,
         "avg_reward": None if reward is None else round(float(reward), 3), "last_used": last or None,
         "latest_suggestion": suggestion}
        for version, replies, summaries, reward, last, suggestion in rows
    ]  # fmt: skip


def prompts_stats(args: argparse.Namespace, config: Config) -> int:
    """Print the stats."""
    db = open_database(config)
    try:
        stats = prompt_stats(db)
    finally:
        db.close()
    if args.json:
        print_json(stats)
    else:
        rows = [{**s, "latest_suggestion": shorten(s["latest_suggestion"], 80)} for s in stats]
        console().print(table("Prompt versions", COLUMNS, rows, empty="no replies or summaries yet"))
    return 0
