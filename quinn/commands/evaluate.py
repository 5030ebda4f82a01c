"""``quinn eval extraction --model STRING``: extraction quality on a labelled set, for choosing a model."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quinn.config import Config
from quinn.engine import parts
from quinn.errors import ConfigError


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn eval extraction``."""
    group = sub.add_parser("eval", help="measure the agent on labelled data")
    commands = group.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)
    extraction = with_config(commands.add_parser(
        "extraction", help="precision, recall, hallucination and duplicate rate of memory extraction"))  # fmt: skip
    extraction.add_argument("--model", help='"provider/model" to evaluate (default: [llm] background_model or model);'
                            " key and base_url come from [llm]")  # fmt: skip
    extraction.add_argument("--data", type=Path, default=None,
                            help="labelled cases, one JSON per line (default: the set Quinn ships)")  # fmt: skip
    extraction.set_defaults(handler=extraction_command)


def extraction_command(args: argparse.Namespace, config: Config) -> int:
    """Run the labelled set through the extraction prompt and print the scores."""
    import asyncio

    from quinn.agent import evaluate_extraction, load_cases

    if args.data is None:
        from quinn.packaged import packaged_file

        args.data = packaged_file("extraction_eval.jsonl")
    if not args.data.is_file():
        raise ConfigError(f"eval data {args.data} not found", "pass --data with the labelled JSONL file")
    if args.model:
        config.llm.model = args.model
        config.llm.background_model = None
    cases = load_cases(args.data)
    report = asyncio.run(evaluate_extraction(parts.llm(config), parts.prompts(config, checked=False), cases))
    print(report.table())
    return 0
