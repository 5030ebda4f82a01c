"""``quinn prompts check|render|stats``: for admins editing templates and comparing their versions.

``stats`` reads ``conversation_summaries`` (reward scores and suggestions per session and prompt version) and the
outbox (replies written per template version).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from quinn.agent import TEMPLATE_NAMES, PromptStore
from quinn.commands.database import DATABASE_ONLY, opened_database
from quinn.commands.output import add_json_flag, answer, shorten, table
from quinn.config import Config
from quinn.db import Database
from quinn.engine import parts
from quinn.errors import ConfigError, TemplateError
from quinn.memory import normalise_user

COLUMNS = ["prompt_version", "replies", "summaries", "avg_reward", "last_used", "latest_suggestion"]

# The agent modules import Mirascope and the SDKs (a second or more): loaded only when a subcommand runs.


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn prompts check|render``."""
    group = sub.add_parser("prompts", help="check and preview the prompt templates")
    commands = group.add_subparsers(dest="prompts_command", metavar="SUBCOMMAND", required=True)
    check = with_config(commands.add_parser("check", help="render every template with sample context"))
    check.set_defaults(handler=check_command, secrets_of=())  # templates only: no password, no API key
    render = with_config(commands.add_parser("render", help="preview a template with a user's real memory"))
    render.add_argument("name", choices=TEMPLATE_NAMES, help="the template to render")
    render.add_argument("--user", required=True, help="the user's address (their memory is read, not changed)")
    render.add_argument("--text", default="What do you remember about me?", help="the text of the sample email")
    render.add_argument("--subject", default="Preview", help="the subject of the sample email")
    # The user's memory and the embedder (a query embedding): no IMAP password, no model key.
    render.set_defaults(handler=render_command, secrets_of=(*DATABASE_ONLY, "embeddings"))
    stats = with_config(add_json_flag(commands.add_parser("stats", help="replies and reward per prompt version")))
    stats.set_defaults(handler=prompts_stats, secrets_of=DATABASE_ONLY)
    listed = with_config(
        add_json_flag(
            commands.add_parser(
                "proposals", help="template rewrites the improvement job drafted from reviews (never applied by Quinn)"
            )
        )
    )
    listed.add_argument("--all", action="store_true", help="also the accepted and rejected ones")
    listed.set_defaults(handler=proposals_command, secrets_of=DATABASE_ONLY)
    for verb, help_text, handler in (
        ("proposal", "show one proposal: its evidence, rationale and diff", proposal_command),
        ("accept", "write a proposal to [prompts] dir (the daemon picks it up without a restart)", decide_command),
        ("reject", "mark a proposal rejected", decide_command),
    ):  # fmt: skip
        one = with_config(commands.add_parser(verb, help=help_text))
        one.add_argument("id", type=int, help="the proposal's id (`quinn prompts proposals`)")
        one.set_defaults(handler=handler, secrets_of=DATABASE_ONLY, verb=verb)


def check_templates(store: PromptStore) -> list[tuple[str, bool, str]]:
    """(name, ok, detail) for every template: detail is the version and file, or the error with file:line."""
    from quinn.agent import sample_variables

    samples = sample_variables()
    results = []
    for name in TEMPLATE_NAMES:
        try:
            rendered = store.render(name, samples[name])
            results.append((name, True, f"{rendered.version}  {store.source_of(name)}"))
        except TemplateError as exc:
            results.append((name, False, str(exc)))
    return results


def check_command(args: argparse.Namespace, config: Config) -> int:
    """Exit 0 when every template compiles and renders; each failure names the file and line."""
    try:
        store = parts.prompts(config, checked=False)
    except TemplateError as exc:
        print(f"FAILED  {exc}")
        return 1
    results = check_templates(store)
    for name, ok, detail in results:
        print(f"{'ok' if ok else 'FAILED':7} {name:12} {detail}")
    return 0 if all(ok for _n, ok, _d in results) else 1


def render_command(args: argparse.Namespace, config: Config) -> int:
    """Print the system and user messages ``name`` would get, with the user's real memory and a sample email."""
    from quinn.agent import preview_variables

    user = normalise_user(args.user) or ""
    if "@" not in user:
        raise ConfigError(f"--user {args.user!r} is not an email address", "pass the address the user writes from")
    store_prompts = parts.prompts(config, checked=False)
    c = config
    db = parts.database(c)
    try:
        store = parts.store(db, parts.embedder(c.embeddings))
        agent = parts.agent(c, parts.llm(c), store_prompts, store)
        variables = preview_variables(c, agent, args.name, user, args.text, args.subject)
        rendered = store_prompts.render(args.name, variables)
    finally:
        db.close()
    sys.stdout.write(f"# {rendered.version} ({store_prompts.source_of(args.name)}), user {user}\n")
    sys.stdout.write(f"=== system ===\n{rendered.system}\n=== user ===\n{rendered.user}\n")
    return 0


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
    with opened_database(config) as db:
        stats = prompt_stats(db)
    rows = [{**s, "latest_suggestion": shorten(s["latest_suggestion"], 80)} for s in stats]
    return answer(args, stats, lambda out: out.print(table("Prompt versions", COLUMNS, rows,
                                                           empty="no replies or summaries yet")))  # fmt: skip


PROPOSAL_COLUMNS = ["id", "template", "rewrites", "status", "created", "mean_reward", "reviews", "rationale"]


def proposals_command(args: argparse.Namespace, config: Config) -> int:
    """List pending proposals (all with ``--all``)."""
    from quinn.agent import proposals

    with opened_database(config) as db:
        found = proposals.listing(db, None if args.all else "pending")
    rows = [{"id": p.id, "template": p.name, "rewrites": p.base_version, "status": p.status,
             "created": p.created_at[:16], "mean_reward": p.evidence.get("mean_reward"),
             "reviews": p.evidence.get("scored"), "rationale": shorten(p.rationale, 70)} for p in found]  # fmt: skip
    data = [
        {**row, "rationale": p.rationale, "source": p.source, "evidence": p.evidence}
        for row, p in zip(rows, found, strict=True)
    ]
    return answer(args, data, lambda out: out.print(table("Template proposals", PROPOSAL_COLUMNS, rows,
                                                          empty="no proposals waiting")))  # fmt: skip


def proposal_command(args: argparse.Namespace, config: Config) -> int:
    """One proposal: what it answers, why, and the diff against the version it rewrites."""
    from quinn.agent import proposals

    with opened_database(config) as db:
        proposal = proposals.get(db, args.id)
        text = proposals.diff(db, proposal)
    evidence = proposal.evidence
    print(f"proposal {proposal.id} for {proposal.name} ({proposal.status}), rewrites {proposal.base_version}")
    print(f"evidence: {evidence.get('scored')} reviewed conversations, mean reward {evidence.get('mean_reward')}")
    for suggestion in evidence.get("suggestions", []):
        print(f"  - {suggestion}")
    print(f"rationale: {proposal.rationale}\n")
    print(text or "(no difference)")
    return 0


def decide_command(args: argparse.Namespace, config: Config) -> int:
    """Accept (write the template) or reject a proposal."""
    from quinn.agent import TemplateTrials, audit_log, proposals
    from quinn.clock import utcnow

    with opened_database(config) as db:
        if args.verb == "accept":
            proposal = proposals.get(db, args.id)
            # The model wrote it: rendered only in a child process with limits (agent/trials.py).
            problem = TemplateTrials().problem(proposal.name, proposal.source) if proposal.status == "pending" else None
            passed = proposals.passed_checks(proposal, problem)
            path = proposals.accept(db, parts.prompts(config, checked=False), args.id, passed, utcnow())
            print(f"proposal {args.id} accepted: written to {path}; a running daemon uses it from its next reply")
        else:
            proposals.decide(db, args.id, "rejected", utcnow())
            print(f"proposal {args.id} rejected")
        decided = proposals.get(db, args.id)
        audit_log.record(
            db,
            audit_log.cli_actor(),
            f"{args.verb} proposal",
            f"proposal {args.id}",
            detail=f"template {decided.name}, rewrites {decided.base_version}; from the command line",
        )
    return 0
