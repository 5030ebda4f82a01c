"""``python -m bench.long_memory``: the long-memory benchmark (issue 32). See bench/long_memory/__init__.py.

python -m tests.lab.real_model fetch 1.5b                  # the answering model's weights, once (~1.1 GB)
python -m bench.long_memory --fast                          # the scripted model, one short history (~1 min)
python -m bench.long_memory.real_friends                     # the real people's file, from FriendsQA (fetched)
python -m bench.long_memory --fast --real bench/data/long_memory_real.json --real-people 1   # ... imported too
python -m bench.long_memory --part 1 --name part1            # the 1.5B model, the first person ...
python -m bench.long_memory --part 2 --name part2            # ... the second, another day
python -m bench.long_memory --part 4 --real bench/data/long_memory_real.json --name part4   # the first real one
python -m bench.long_memory --merge bench/results/part1.json bench/results/part2.json --name long_memory-1.5b
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import memory_qa
from bench.long_memory.data import MAILS, PEOPLE, SEED
from bench.long_memory.report import markdown, merge, plot
from bench.long_memory.run import Run, run, scripted_target
from bench.machine import ROOT, machine_info
from bench.memory_qa import MAX_OUTPUT_TOKENS, model_target
from tests.lab.real_model import MODELS

RESULTS = ROOT / "bench" / "results"
FAST_MAILS = 36
PARTS = 2 * len(PEOPLE)  # a full run: the generated people, then as many real ones


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.long_memory", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    p.add_argument("--name", default="long_memory", help="results file name, without extension")
    p.add_argument("--people", type=int, default=len(PEOPLE), help=f"generated people (at most {len(PEOPLE)})")
    p.add_argument("--real", type=Path, help="real people (bench/long_memory/real.py's format), after the generated")
    p.add_argument("--real-people", type=int, default=0, help="at most this many real people (default all)")
    p.add_argument("--mails", type=int, default=MAILS, help=f"history mails per generated person (default {MAILS})")
    p.add_argument("--questions", type=int, default=0, help="questions per person (default all)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--skip", type=int, default=0, help="leave out the first N people (a run in parts)")
    p.add_argument("--part", type=int, choices=range(1, PARTS + 1), metavar=f"1..{PARTS}",
                   help=f"person N alone of the full run's {PARTS} (the generated ones, then --real's): sets --people, "
                   "--real-people and --skip, so the parts of a run cannot overlap or miss one")  # fmt: skip
    p.add_argument("--top-k", type=int, default=5, help="passages the BM25 baseline pastes")
    p.add_argument("--n-ctx", type=int, default=4096, help="the model's context in tokens")
    p.add_argument("--tool-rounds", type=int, default=0, help="Quinn's [llm] max_tool_rounds (default 0: one call a "
                   "question, as for every baseline; recall has run before the model is asked)")  # fmt: skip
    p.add_argument("--learn", choices=("own_words", "model"), default="own_words",
                   help="Quinn's [memory] learn (default own_words: the small model's extraction kept small talk "
                   "and missed facts, bench/results/long_memory-1.5b-part1.md)")  # fmt: skip
    p.add_argument("--threads", type=int, default=2, help="the model server's threads (default 2, CI's two cores; "
                   "give 1 when other work shares them: llama.cpp's threads wait on each other, and decoding fell "
                   "from 12 to 1 token/s with 2 threads beside one busy process)")  # fmt: skip
    p.add_argument("--model", choices=sorted(MODELS), default="1.5b", help="the real model to start (default 1.5b)")
    p.add_argument("--base-url", help="an OpenAI-compatible server to use instead of starting the real model")
    p.add_argument(
        "--fast",
        action="store_true",
        help=f"the scripted model, the first generated person, {FAST_MAILS} mails (and --real's people, whole, "
        "when given): the harness end to end in CI",
    )
    p.add_argument("--no-import-jobs", action="store_true", help="import without the session jobs at its end")
    p.add_argument("--workdir", type=Path, help="keep the lab's files here (database, mbox, calls.jsonl: every "
                   "model call) instead of a temporary folder")  # fmt: skip
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON", help="combine the parts of a run, and exit")
    return p


def apply_part(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--part N``: the N-th person of a full run alone (the generated people first, then the real ones)."""
    if args.part is None:
        return
    given = [f"--{name.replace('_', '-')}" for name in ("people", "real_people", "skip")
             if getattr(args, name) != p.get_default(name)]  # fmt: skip
    if given:
        p.error(f"--part sets {', '.join(given)} itself: give --part alone, or those without --part")
    if args.part > len(PEOPLE) and not args.real:
        p.error(f"--part {args.part} is a real person: give --real bench/data/long_memory_real.json (python -m "
                "bench.long_memory.real_friends builds it)")  # fmt: skip
    args.people = min(args.part, len(PEOPLE))
    args.real_people = max(0, args.part - len(PEOPLE))
    args.skip = args.part - 1
    if not args.real_people:
        args.real = None  # else every real person would follow the generated one


def read_part(p: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """One part's JSON (bench.memory_qa's reader, for this benchmark's results)."""
    return memory_qa.read_part(p, path, "long_memory")


def write(result: dict[str, Any], args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / f"{args.name}.md").write_text(markdown(result), encoding="utf-8")
    if not args.no_plot:
        plot(result, args.out / f"{args.name}.png")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = parser()
    args = p.parse_args(argv)
    apply_part(p, args)
    if args.merge:
        result = merge([read_part(p, path) for path in args.merge])
        write(result, args)
        print(markdown(result))
        return result
    if args.fast:
        args.people, args.mails = min(args.people, 1), min(args.mails, FAST_MAILS)
    # With --real the people are counted once the file is read (run.people_of): --skip 4 --real-people 2 is the
    # second real person of a run with 3 generated ones.
    if args.skip < 0 or (not args.real and args.skip >= args.people) or args.mails < 30:
        p.error("--skip must leave someone to ask, and --mails must be 30 or more (a history has to be long)")
    name = "scripted" if args.fast else f"the server at {args.base_url}" if args.base_url else MODELS[args.model].name
    model = {"name": name, "n_ctx": args.n_ctx,
             "temperature": 0, "max_output_tokens": MAX_OUTPUT_TOKENS, "max_tool_rounds": args.tool_rounds,
             "learn": args.learn,
             "runtime": args.base_url or ("tests/lab/llm_server.py" if args.fast else
                                          "llama-cpp-python[server]==0.3.36")}  # fmt: skip
    state = Run(args, {**machine_info(), "model_threads": None if args.fast or args.base_url else args.threads}, model)
    with contextlib.ExitStack() as stack:
        if args.fast:
            server, target = scripted_target()
            stack.callback(server.stop)
        else:
            target = stack.enter_context(model_target(args.base_url, args.n_ctx, args.model, args.threads))
        if args.workdir:
            args.workdir.mkdir(parents=True, exist_ok=True)
            workdir = args.workdir
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        asyncio.run(run(state, target, workdir))
    result = state.write()
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
