"""Scoring and reporting for bench/long_memory: one ``Scored`` row per question and condition; per condition and
kind: accuracy, recall in prompt, stale rate, forget leaks, tokens and seconds per question; Markdown, PNG, and
the merge of a run made in parts."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.long_memory.data import KINDS, Probe
from bench.memory_qa import Asked
from bench.memory_qa_data import answered

CONDITIONS = ("quinn", "no_memory", "recent_history", "bm25")
NAMES = {"quinn": "Quinn", "no_memory": "no memory", "recent_history": "recent history that fits",
         "bm25": "BM25 top-k passages"}  # fmt: skip


@dataclass
class Scored:
    """One question under one condition."""

    user: str
    source: str  # generated | real
    category: str
    kind: str
    condition: str
    correct: bool
    in_prompt: bool | None  # None: nothing to find (absence, forgotten)
    stale: bool  # an old value given (updated, knock-on, temporal)
    leak: bool  # a forgotten value in the reply
    leak_in_prompt: bool  # ... or in what the model was sent
    replied: bool
    tokens_in: int
    tokens_out: int
    seconds: float
    question: str = ""
    answer: str = ""
    reply: str = ""


def score(user: str, source: str, probe: Probe, condition: str, asked: Asked) -> Scored:
    """A reply and its prompt scored against the probe (the question's own words taken out of the prompt)."""
    prompt = asked.prompt.replace(probe.text, " ")
    reply = asked.reply
    leak = probe.leak_kind and answered(reply, probe.stale)
    correct = answered(reply, probe.gold) and not leak
    stale = bool(probe.stale) and not probe.leak_kind and not correct and answered(reply, probe.stale)
    in_prompt = answered(prompt, probe.evidence) if probe.evidence else None
    leak_in_prompt = probe.leak_kind and answered(prompt, probe.stale)
    return Scored(user, source, probe.category, probe.kind, condition, correct, in_prompt, stale, leak,
                  leak_in_prompt, bool(reply.strip()), asked.tokens_in, asked.tokens_out, round(asked.seconds, 2),
                  probe.text, probe.answer, reply[:400])  # fmt: skip


def rates(rows: Sequence[Scored]) -> dict[str, Any]:
    """The figures of a group of rows."""
    n = len(rows)
    if not n:
        return {"n": 0}
    found = [r.in_prompt for r in rows if r.in_prompt is not None]
    staling = [r for r in rows if r.category in ("updated", "knock_on", "temporal")]
    forgetting = [r for r in rows if r.category == "forgotten"]
    return {
        "n": n,
        "accuracy": round(sum(r.correct for r in rows) / n, 3),
        "recall_in_prompt": round(sum(found) / len(found), 3) if found else None,
        "stale_rate": round(sum(r.stale for r in staling) / len(staling), 3) if staling else None,
        "forget_leaks": sum(r.leak for r in forgetting),
        "forget_leaks_in_prompt": sum(r.leak_in_prompt for r in forgetting),
        "replied": round(sum(r.replied for r in rows) / n, 3),
        "tokens_in": round(statistics.mean(r.tokens_in for r in rows)),
        "tokens_out": round(statistics.mean(r.tokens_out for r in rows)),
        "seconds": round(statistics.mean(r.seconds for r in rows), 2),
    }


def summarise(rows: Sequence[Scored]) -> dict[str, Any]:
    """Per condition: overall, by kind, and by source (generated / real people)."""
    summary: dict[str, Any] = {}
    for condition in CONDITIONS:
        mine = [r for r in rows if r.condition == condition]
        if mine:
            summary[condition] = {
                "overall": rates(mine),
                "by_kind": {k: rates([r for r in mine if r.category == k]) for k in KINDS},
                "by_source": {s: rates([r for r in mine if r.source == s]) for s in ("generated", "real")},
            }
    return summary


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    d = result["data"]
    lines = [f"# Long memory: {result['model']['name']}, {d['people']} people ({d['generated']} generated, "
             f"{d['real']} real), {d['questions']} questions", ""]  # fmt: skip
    lines += ["| condition | accuracy | recall in prompt | stale | forget leaks (reply / prompt) | tokens in | s / q |",
              "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for condition, data in s.items():
        o = data["overall"]
        lines.append(f"| {NAMES[condition]} | {o['accuracy']:.2f} | {_f(o['recall_in_prompt'])} | "
                     f"{_f(o['stale_rate'])} | {o['forget_leaks']} / {o['forget_leaks_in_prompt']} | "
                     f"{o['tokens_in']} | {o['seconds']} |")  # fmt: skip
    lines += ["", "## Accuracy by kind", "", "| condition | " + " | ".join(KINDS) + " |",
              "|---|" + "---:|" * len(KINDS)]  # fmt: skip
    for condition, data in s.items():
        cells = [f"{_f(data['by_kind'][k].get('accuracy'))} ({data['by_kind'][k]['n']})" for k in KINDS]
        lines.append(f"| {NAMES[condition]} | " + " | ".join(cells) + " |")
    h = result["history"]
    lines += ["", f"History: {h['mails']} mails imported in {h['import_seconds']} s ({h['extraction_calls']} "
              f"extraction calls; Quinn learns with [memory] learn = {result['model'].get('learn', 'model')}, "
              f"[llm] max_tool_rounds = {result['model']['max_tool_rounds']}); "
              f"memories per person {h['memories_per_person']}; recent-history prompts kept "
              f"{h['recent_kept']} messages (n_ctx {result['model']['n_ctx']}); BM25 top-{d['top_k']}. "
              f"Whole run {result['duration_s']} s.", ""]  # fmt: skip
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["summary"]
    fig, ax = plt.subplots(figsize=(13, 4.2))
    width = 0.8 / max(1, len(s))
    for i, (condition, data) in enumerate(s.items()):
        values = [data["by_kind"][k].get("accuracy") or 0 for k in KINDS] + [data["overall"]["accuracy"]]
        ax.bar([x + i * width for x in range(len(values))], values, width, label=NAMES[condition])
    ax.set_xticks([x + width * (len(s) - 1) / 2 for x in range(len(KINDS) + 1)], [*KINDS, "overall"], rotation=20)
    ax.set_ylim(0, 1)
    ax.set_title(f"Long memory, {result['model']['name']}: accuracy by kind ({result['data']['questions']} questions)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result from the parts of a run (``--skip``/``--people``): same model and data set, no person twice."""
    first = parts[0]
    machines = [m for p in parts for m in (p["machine"] if isinstance(p["machine"], list) else [p["machine"]])]
    commits = {((m.get("git") or {}).get("commit"), (m.get("git") or {}).get("dirty")) for m in machines}
    if len(commits) > 1:  # the acceptance's "at one commit": parts of different code are not one run
        raise SystemExit(f"the parts were run at different commits (commit, dirty): {sorted(commits, key=str)}")
    for part in parts[1:]:
        if part["model"] != first["model"]:
            raise SystemExit(f"the parts differ in model: {first['model']} vs {part['model']}")
        if part["data"]["seed"] != first["data"]["seed"] or part["data"]["mails"] != first["data"]["mails"]:
            raise SystemExit("the parts come from different data sets (seed or history length)")
    per_part = [{r["user"] for r in part["per_question"]} for part in parts]
    if sum(len(p) for p in per_part) != len(set().union(*per_part)):
        raise SystemExit(f"a person is in more than one part: {per_part}")
    rows = [Scored(**r) for part in parts for r in part["per_question"]]
    histories = [part["history"] for part in parts]
    return {
        "benchmark": "long_memory",
        "model": first["model"],
        "machine": [part["machine"] for part in parts],
        "data": {
            **first["data"],
            **{k: sum(p["data"][k] for p in parts) for k in ("people", "generated", "real")},
            "questions": len({(r.user, r.question) for r in rows}),
            "parts": len(parts),
        },
        "summary": summarise(rows),
        "history": {
            "mails": sum(h["mails"] for h in histories),
            "import_seconds": round(sum(h["import_seconds"] for h in histories), 1),
            "extraction_calls": sum(h["extraction_calls"] for h in histories),
            "memories_per_person": [n for h in histories for n in h["memories_per_person"]],
            "recent_kept": "; ".join(str(h["recent_kept"]) for h in histories),
            "imports": [i for h in histories for i in h["imports"]],
            "jobs": [j for h in histories for j in h["jobs"]],
        },
        "duration_s": round(sum(part["duration_s"] for part in parts), 1),
        "per_question": [dataclasses.asdict(r) for r in rows],
    }
