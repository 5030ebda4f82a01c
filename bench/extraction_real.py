"""Extraction quality with a real model: ``quinn eval extraction``'s harness on the labelled set, against the lab's
real model server (tests/lab/real_llm.py) reached through Quinn's ordinary provider path.

Writes ``bench/results/extraction-<model>.json`` and ``.md``: precision, recall, hallucination and duplicate rate,
per case what was missed, invented or repeated, the tokens and the time. Greedy decoding (temperature 0), so a
rerun on the same build gives the same answers.

    python -m tests.lab.real_model fetch      # the weights, once (see tests/lab/real_model.py for provenance)
    python -m bench.extraction_real           # ~2-4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.machine import ROOT, machine_info
from quinn.agent.evaluation import evaluate_extraction, load_cases
from quinn.agent.llm import LLM
from quinn.agent.prompts import PromptStore
from quinn.config import LlmConfig
from tests.lab.real_llm import MODEL_NAME, RealLLM
from tests.lab.real_model import FETCH_HINT, QWEN_05B, verified_path

RESULTS = ROOT / "bench" / "results"
DATA = ROOT / "tests" / "data" / "extraction_eval.jsonl"


async def run(base_url: str, cases: list[dict[str, Any]]) -> Any:
    config = LlmConfig(model=f"openai/{MODEL_NAME}", base_url=base_url, timeout_s=300, max_retries=0,
                       temperature=0, max_output_tokens=600)  # fmt: skip
    return await evaluate_extraction(LLM(config), PromptStore(), cases)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Start the model server, run the labelled set, write the JSON and Markdown; returns the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.extraction_real", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--data", type=Path, default=DATA, help="labelled cases, one JSON per line")
    args = parser.parse_args(argv)
    model_path = verified_path()
    if model_path is None:
        raise SystemExit(f"no verified model: {FETCH_HINT}")
    cases = load_cases(args.data)
    info = machine_info()
    started = time.perf_counter()
    with RealLLM(model_path) as server:
        report = asyncio.run(run(server.openai_base_url, cases))
    duration = time.perf_counter() - started
    usage = report.usage
    result = {
        "benchmark": "extraction_real",
        "machine": info,
        "model": {
            "name": MODEL_NAME,
            "file": QWEN_05B.filename,
            "sha256": QWEN_05B.sha256,
            "runtime": "llama-cpp-python[server]==0.3.36",
            "temperature": 0,
            "max_output_tokens": 600,
        },
        "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data),
        "cases": len(report.cases),
        "extracted": report.predicted,
        "precision": round(report.precision, 3),
        "recall": round(report.recall, 3),
        "hallucination_rate": round(report.hallucination_rate, 3),
        "duplicate_rate": round(report.duplicate_rate, 3),
        "tokens": {"input": usage.input_tokens, "output": usage.output_tokens, "calls": usage.calls},
        "duration_s": round(duration, 1),
        "per_case": [asdict(case) for case in report.cases],
    }
    text = report.table()
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"extraction-{MODEL_NAME}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(
        f"# Extraction with {MODEL_NAME} (Q4_K_M, llama-cpp-python 0.3.36, temperature 0)\n\n"
        f"{len(cases)} labelled cases from `{result['data']}`, {duration:.0f} s on {info.get('cores', '?')} "
        f"cores (load average at the start {info.get('load_average_1_5_15')}).\n\n```\n{text}\n```\n"
    )
    return result


if __name__ == "__main__":
    main()
