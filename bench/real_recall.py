"""Recall on real conversations (issue 31): every method side by side, in one run, on the real development set and
on the generated sets.

    python -m bench.real_recall_data                      # once: builds bench/data/real_recall.json (see there)
    python -m bench.real_recall                           # real sets + generated sets (~10 min on 2 busy cores)
    python -m bench.real_recall --sets friendsqa topicalchat   # the real sets only
    python -m bench.real_recall --quick                   # one user of each set, for the smoke test

Real sets (bench/real_recall_data.py; sources, licences and checksums in bench/data/README.md): ``friendsqa``
(TV-show scenes, questions written by people, gold = the utterances they marked) and ``topicalchat`` (chats between
two people, questions built from the sections each turn's author marked). Generated sets (``emails``, ``chats``:
bench/retrieval_quality.py) are extra columns, never what a choice is made on. Where the real data is absent the
real sets are skipped with a message (CI does not build them: the data stays out of git).

Every turn is stored as an episodic memory through ``MemoryStore.add_many`` with the real model, as
``<weekday day month year>: <speaker>: <text>`` with its date as ``valid_from``. Each question is answered by every
method from the same two legs (``bench.rankings``) and by ``quinn.memory.search.hybrid_search`` itself (what
``MemoryStore.search`` runs, ``touch=False``). Scores: turn-level recall@k (share of the gold turns in the top k)
and hit@k (at least one), overall and by question kind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench import retrieval_quality
from bench.conversations import Dataset, Message, Question
from bench.machine import ROOT, machine_info, require_matplotlib
from bench.rankings import build_scratch, legs, methods, user_index
from bench.retrieval_quality import ingest, kinds, mean_scores, paraphrase_overlap, score
from quinn.db import Database
from quinn.memory import MemoryStore
from quinn.memory.embed import Embedder
from quinn.memory.models import utcnow
from quinn.memory.search import hybrid_search

DATA = ROOT / "bench" / "data" / "real_recall.json"
RESULTS = ROOT / "bench" / "results"
REAL = ("friendsqa", "topicalchat")
GENERATED = ("emails", "chats")
DEPTH = 10
BM25 = "bm25 (porter, stop words dropped: today)"
DENSE = "vector"
RRF = "rrf k=60"
HYBRID = "hybrid (search.py today)"
HEADLINE = (BM25, DENSE, RRF, HYBRID)

Search = Callable[[MemoryStore, str, str], list[int]]  # (store, user, question) -> memory ids, best first
SEARCHES: dict[str, Search] = {
    HYBRID: lambda store, user, q: [h.memory.id for h in hybrid_search(store, user, q, k=DEPTH, touch=False)],
}


def method_names() -> list[str]:
    """Every row of the report, in order."""
    return [*methods(), *SEARCHES]


def load_real(path: Path, quick: bool) -> dict[str, Dataset] | None:
    """The real sets from the built file, or None (with a message) where it is absent."""
    if not path.exists():
        print(
            f"real development set absent ({path}): skipping the real sets. Build it with "
            "`python -m bench.real_recall_data` after fetching the sources listed in bench/data/README.md.",
            file=sys.stderr,
        )
        return None
    built = json.loads(path.read_text())
    out = {}
    for name, raw in built["sets"].items():
        users = sorted({m["user"] for m in raw["messages"]})
        keep = set(users[:1]) if quick else set(users)
        data = Dataset()
        data.messages = [
            Message(m["id"], m["user"], m["session"], datetime.fromisoformat(m["at"]), f"{m['speaker']}: {m['text']}")
            for m in raw["messages"]
            if m["user"] in keep
        ]
        data.questions = [
            Question(q["id"], q["user"], q["kind"], q["text"], tuple(q["answers"]))
            for q in raw["questions"]
            if q["user"] in keep
        ]
        out[name] = data
    return out


def evaluate(store: MemoryStore, data: Dataset, memory_to_message: dict[int, str]) -> list[dict[str, Any]]:
    """Every question through every method; per question: its scores and the gold turns' ranks per method."""
    assert store.embedder is not None
    build_scratch(store.db)
    vectors = store.embedder.embed([" ".join(q.text.split()) for q in data.questions])
    now = utcnow()
    indexes: dict[str, Any] = {}
    every = methods()
    rows = []
    for q, vector in zip(data.questions, vectors, strict=True):
        if q.user not in indexes:
            indexes[q.user] = user_index(store.db, q.user, now)
        index = indexes[q.user]
        leg = legs(store.db, q.user, index, q.text, np.asarray(vector, dtype=np.float32))
        ranked = {name: method(leg, index) for name, method in every.items()}
        ranked |= {name: search(store, q.user, q.text) for name, search in SEARCHES.items()}
        row: dict[str, Any] = {"id": q.id, "kind": q.kind, "question": q.text, "answers": list(q.answers)}
        for method, ids in ranked.items():
            found = [memory_to_message[i] for i in ids[:DEPTH]]
            row[method] = score(found, q.answers)
            row[f"{method} ranks"] = [found.index(a) + 1 if a in found else None for a in q.answers]
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: overall and per-kind means."""
    return {
        method: {"overall": mean_scores([r[method] for r in rows])}
        | {kind: mean_scores([r[method] for r in rows if r["kind"] == kind]) for kind in kinds(rows)}
        for method in method_names()
    }


def run_set(data: Dataset, embedder: Embedder) -> dict[str, Any]:
    """One data set in its own store: ingest, evaluate, summarise."""
    with tempfile.TemporaryDirectory(prefix="quinn-real-recall-") as tmp:
        store = MemoryStore(Database.open(str(Path(tmp) / "recall.db")), embedder)
        try:
            t0 = time.perf_counter()
            memory_to_message = ingest(store, data.messages)
            ingest_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            rows = evaluate(store, data, memory_to_message)
            evaluate_s = time.perf_counter() - t0
        finally:
            store.close()
    return {
        "dataset": {
            "users": len({m.user for m in data.messages}),
            "turns": len(data.messages),
            "questions": len(data.questions),
            "questions_by_kind": {kind: sum(q.kind == kind for q in data.questions) for kind in kinds(rows)},
            "answers_per_question": round(float(np.mean([len(q.answers) for q in data.questions])), 2),
            "paraphrase": paraphrase_overlap(data),
        },
        "ingest_s": round(ingest_s, 1),
        "evaluate_s": round(evaluate_s, 1),
        "summary": summarise(rows),
        "questions": rows,
    }


def table(sets: dict[str, dict[str, Any]]) -> str:
    """Markdown: recall@10 / hit@10 per method and set; then per kind for every set."""
    names = method_names()
    lines = [
        "recall@10 / hit@10, overall (questions: "
        + ", ".join(f"{s} {r['dataset']['questions']}" for s, r in sets.items())
        + ")",
        "",
        "| method | " + " | ".join(sets) + " |",
        "|---|" + "---:|" * len(sets),
    ]
    for method in names:
        cells = [
            f"{r['summary'][method]['overall']['recall@10']:.3f} / {r['summary'][method]['overall']['hit@10']:.3f}"
            for r in sets.values()
        ]
        bold = "**" if method in HEADLINE else ""
        lines.append(f"| {bold}{method}{bold} | " + " | ".join(cells) + " |")
    for name, r in sets.items():
        summary = r["summary"]
        kinds_ = [k for k in summary[names[0]] if k != "overall"]
        counts = ", ".join(f"{k} {summary[names[0]][k]['questions']}" for k in kinds_)
        lines += ["", f"{name}: recall@10 / hit@10 by kind (questions: {counts})", ""]
        lines += ["| method | " + " | ".join(kinds_) + " |", "|---|" + "---:|" * len(kinds_)]
        for method in names:
            cells = [f"{summary[method][k]['recall@10']:.3f} / {summary[method][k]['hit@10']:.3f}" for k in kinds_]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(sets: dict[str, dict[str, Any]], path: Path, shown: Sequence[str]) -> None:
    """recall@10 by question kind, one panel per set, one bar per shown method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 4.8), sharey=True)
    for ax, (name, r) in zip(np.atleast_1d(axes), sets.items(), strict=True):
        summary = r["summary"]
        groups = list(summary[shown[0]])
        x = np.arange(len(groups))
        width = 0.8 / len(shown)
        for i, method in enumerate(shown):
            ax.bar(x + (i - (len(shown) - 1) / 2) * width, [summary[method][g]["recall@10"] for g in groups],
                   width, label=method)  # fmt: skip
        ax.set_xticks(x, groups, fontsize=8, rotation=20)
        ax.set_ylim(0, 1)
        ax.set_title(f"{name} ({r['dataset']['questions']} q)")
        ax.grid(axis="y", alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("recall@10")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Recall@10 on real conversations and on the generated sets (all-MiniLM-L6-v2, FTS5 BM25)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any] | None:
    """Run the benchmark, print the table, write JSON, MD and PNG; returns the report (None: nothing to run)."""
    parser = argparse.ArgumentParser(prog="python -m bench.real_recall", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one user per set, for the smoke test")
    parser.add_argument("--data", type=Path, default=DATA, help="the built development set")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="real_recall", help="file name of the results (default real_recall)")
    parser.add_argument("--sets", nargs="+", choices=[*REAL, *GENERATED], default=[*REAL, *GENERATED])
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from quinn.memory.embed import LocalEmbedder

    started = time.perf_counter()
    data: dict[str, Dataset] = {}
    if any(s in REAL for s in args.sets):
        real = load_real(args.data, args.quick) or {}
        data |= {name: real[name] for name in args.sets if name in real}
    for name in args.sets:
        if name in GENERATED:
            _files, seed, make = retrieval_quality.DATASETS[name]
            data[name] = make(args.quick, seed)
    if not data:
        print("nothing to run", file=sys.stderr)
        return None
    info = machine_info()
    model = embedder or LocalEmbedder()
    sets = {name: run_set(d, model) for name, d in data.items()}
    text = table(sets)
    print(text)
    report = {
        "benchmark": "real_recall",
        "command": "python -m bench.real_recall " + " ".join(argv if argv is not None else sys.argv[1:]),
        "quick": args.quick,
        "machine": info,
        "data": {"file": str(args.data), "built": args.data.exists()},
        "sets": sets,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {name: s.pop("questions") for name, s in sets.items()}
    (args.out / f"{args.name}-questions.json").write_text(json.dumps(rows) + "\n")
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(text + "\n")
    if args.plot:
        plot(sets, args.out / f"{args.name}.png", [m for m in HEADLINE if m in method_names()])
    return report


if __name__ == "__main__":
    main()
