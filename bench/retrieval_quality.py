"""Retrieval quality: recall@k and hit@k of Quinn's search and its ablations, on every data set, in one run.

    python -m bench.retrieval_quality            # both data sets (~2,000 messages and ~250 questions each)
    python -m bench.retrieval_quality --quick    # one user of each, for the smoke test

Data sets (generated, fixed seeds, no downloads; bench/README.md describes them):

- ``emails``: ``bench.conversations`` (+ ``bench.phrases``): a person's emails over eight months, in threads;
  the set the fusion before issue 14 was tuned on;
- ``chats``: ``bench.chats``: long casual chats between two friends over 28 sessions, one memory per turn,
  questions about the speakers in the third person; written for issue 14 and committed before any result.

Every message is stored through ``MemoryStore.add_many`` with the real model (all-MiniLM-L6-v2), its date in the
text and as ``valid_from``, one store per set. The methods (``bench.rankings``) rank the asking user's
memories from the same two legs: BM25 variants alone, vector alone, reciprocal rank fusion, the convex fusion
search.py ran before, with and without the importance/recency re-ranking; ``hybrid`` is
``quinn.memory.search.hybrid_search`` itself (what ``MemoryStore.search`` runs), with ``touch=False``:
counting accesses would make later questions depend on earlier ones.

Goal (issue 14): Quinn's hybrid beats BM25 alone and plain RRF on recall@10 on every set.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench import chats, conversations
from bench.conversations import Dataset, Message
from bench.machine import ROOT, machine_info, require_matplotlib
from bench.rankings import build_scratch, legs, methods, user_index
from quinn.db import Database
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.embed import Embedder
from quinn.memory.lexical import content_words
from quinn.memory.models import utcnow
from quinn.memory.search import hybrid_search

KS = (1, 5, 10)
DEPTH = max(KS)
HYBRID = "hybrid (search.py today)"
METHODS = (*methods(), HYBRID)
BASELINES = ("bm25 (porter, stop words dropped: today)", "rrf k=60")
RESULTS = ROOT / "bench" / "results"


def _emails(quick: bool, seed: int) -> Dataset:
    # --quick: one user's stories and the small talk around them (~100 messages), no padding.
    return (
        conversations.generate(users=1, messages_per_user=0, seed=seed) if quick else conversations.generate(seed=seed)
    )


def _chats(quick: bool, seed: int) -> Dataset:
    return chats.generate(conversations=1, seed=seed, turns_per_session=(3, 5)) if quick else chats.generate(seed=seed)


# name -> (generator files, default seed, make(quick, seed))
DATASETS: dict[str, tuple[str, int, Callable[[bool, int], Dataset]]] = {
    "emails": ("bench/conversations.py + bench/phrases.py", 2026, _emails),
    "chats": ("bench/chats.py", chats.SEED, _chats),
}


def ingest(store: MemoryStore, messages: Sequence[Message]) -> dict[int, str]:
    """Store every message as an episodic memory; returns memory id -> message id."""
    ids: dict[int, str] = {}
    for start in range(0, len(messages), 256):
        batch = messages[start : start + 256]
        new = store.add_many(
            [NewMemory(user_id=m.user, content=m.indexed_text, scope="episodic", type="context", valid_from=m.at,
                       metadata={"message_id": m.id, "source": {"session_id": m.session}}) for m in batch]
        )  # fmt: skip
        ids.update(zip(new, (m.id for m in batch), strict=True))
    return ids


def score(ranked: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
    """recall@k and hit@k for one question's ranked message ids."""
    out = {}
    for k in KS:
        found = len(set(ranked[:k]) & set(answers))
        out[f"recall@{k}"] = found / len(answers)
        out[f"hit@{k}"] = 1.0 if found else 0.0
    return out


def mean_scores(rows: list[dict[str, float]]) -> dict[str, float]:
    """Average of per-question scores (4 decimals); ``questions`` is the count."""
    if not rows:
        return {"questions": 0}
    return {"questions": len(rows), **{key: round(float(np.mean([r[key] for r in rows])), 4) for key in rows[0]}}


def paraphrase_overlap(data: Dataset) -> dict[str, float]:
    """How many of a question's content words occur in its answers (low = paraphrased, fair to vectors)."""
    by_id = data.by_id()
    fractions = []
    for q in data.questions:
        words = content_words(q.text)
        answer_words = set().union(*(content_words(by_id[a].text) for a in q.answers))
        fractions.append(len(words & answer_words) / max(len(words), 1))
    return {
        "mean_fraction_of_question_words_in_answers": round(float(np.mean(fractions)), 3),
        "questions_sharing_no_word": round(float(np.mean([f == 0 for f in fractions])), 3),
    }


def evaluate(store: MemoryStore, data: Dataset, memory_to_message: dict[int, str]) -> list[dict[str, Any]]:
    """Run every question through every method; per question: the answers' ranks and scores per method."""
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
        ranked[HYBRID] = [h.id for h in hybrid_search(store, q.user, q.text, k=DEPTH, touch=False)]
        row: dict[str, Any] = {"id": q.id, "kind": q.kind, "question": q.text, "answers": list(q.answers)}
        for method, ids in ranked.items():
            messages = [memory_to_message[i] for i in ids]
            row[method] = score(messages, q.answers)
            row[f"{method} ranks"] = [messages.index(a) + 1 if a in messages else None for a in q.answers]
        rows.append(row)
    return rows


def kinds(rows: list[dict[str, Any]]) -> list[str]:
    """The question kinds of a set, in order of first appearance."""
    return list(dict.fromkeys(r["kind"] for r in rows))


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: overall and per-kind means."""
    return {
        method: {"overall": mean_scores([r[method] for r in rows])}
        | {kind: mean_scores([r[method] for r in rows if r["kind"] == kind]) for kind in kinds(rows)}
        for method in METHODS
    }


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """Markdown: overall recall/hit per method and set, then recall@10 and hit@10 per kind."""
    sets = list(summaries)
    metrics = [f"{m}@{k}" for m in ("recall", "hit") for k in KS]
    lines = [
        "| method | " + " | ".join(f"{s} {m}" for s in sets for m in metrics) + " |",
        "|---|" + "---:|" * (len(sets) * len(metrics)),
    ]
    for method in METHODS:
        cells = [f"{summaries[s][method]['overall'][m]:.3f}" for s in sets for m in metrics]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    for s in sets:
        kinds_ = [k for k in summaries[s][METHODS[0]] if k != "overall"]
        counts = ", ".join(f"{k} {summaries[s][METHODS[0]][k]['questions']}" for k in kinds_)
        lines += ["", f"{s}: recall@10 / hit@10 by kind (questions: {counts})", ""]
        lines += ["| method | " + " | ".join(kinds_) + " |", "|---|" + "---:|" * len(kinds_)]
        for method in METHODS:
            cells = [
                f"{summaries[s][method][k]['recall@10']:.3f} / {summaries[s][method][k]['hit@10']:.3f}" for k in kinds_
            ]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    """recall@10 and hit@10 overall, one bar per method, one panel per data set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summaries), figsize=(6.5 * len(summaries), 5.5), sharey=True)
    y = np.arange(len(METHODS))
    for ax, (name, summary) in zip(np.atleast_1d(axes), summaries.items(), strict=True):
        recall = [summary[m]["overall"]["recall@10"] for m in METHODS]
        hit = [summary[m]["overall"]["hit@10"] for m in METHODS]
        ax.barh(y - 0.2, recall, 0.4, label="recall@10", color="tab:blue")
        ax.barh(y + 0.2, hit, 0.4, label="hit@10", color="tab:orange")
        ax.set_yticks(y, METHODS, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_title(f"{name} ({summary[METHODS[0]]['overall']['questions']} questions)")
        ax.grid(axis="x", alpha=0.3)
    np.atleast_1d(axes)[0].legend(loc="lower right")
    fig.suptitle("Quinn retrieval quality per data set (all-MiniLM-L6-v2, FTS5 BM25)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_set(name: str, data: Dataset, embedder: Embedder, seed: int) -> dict[str, Any]:
    """One data set in its own store: ingest, evaluate, summarise."""
    with tempfile.TemporaryDirectory(prefix="quinn-quality-") as tmp:
        store = MemoryStore(Database.open(str(Path(tmp) / "quality.db")), embedder)
        try:
            t0 = time.perf_counter()
            memory_to_message = ingest(store, data.messages)
            ingest_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            rows = evaluate(store, data, memory_to_message)
            evaluate_s = time.perf_counter() - t0
        finally:
            store.close()
    summary = summarise(rows)
    hybrid = summary[HYBRID]["overall"]["recall@10"]
    best_baseline = max(summary[b]["overall"]["recall@10"] for b in BASELINES)
    return {
        "dataset": {
            "generator": DATASETS[name][0],
            "seed": seed,
            "users": len({m.user for m in data.messages}),
            "messages": len(data.messages),
            "questions": len(data.questions),
            "questions_by_kind": {kind: sum(q.kind == kind for q in data.questions) for kind in kinds(rows)},
            "answers_per_question": round(float(np.mean([len(q.answers) for q in data.questions])), 2),
            "paraphrase": paraphrase_overlap(data),
        },
        "ingest_s": round(ingest_s, 1),
        "evaluate_s": round(evaluate_s, 1),
        "hybrid_recall@10": hybrid,
        "best_baseline_recall@10": best_baseline,
        "goal_met": hybrid > best_baseline,
        "summary": summary,
        "questions": rows,  # per question: moved to retrieval_quality-questions.json by main (megabytes)
    }


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any]:
    """Run the benchmark, print the tables, write the JSON, MD (and PNG); returns the report.

    ``embedder``: an already loaded all-MiniLM-L6-v2 to reuse (the smoke test shares one); loaded when None.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval_quality", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one user per data set, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--sets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--seed", type=int, default=None, help="one seed for every set (default: each set's own)")
    parser.add_argument("--dump", type=Path, default=None, help="also write the generated data sets to this JSON")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from quinn.memory.embed import LocalEmbedder

    started = time.perf_counter()
    info = machine_info()
    model = embedder or LocalEmbedder()
    args.out.mkdir(parents=True, exist_ok=True)
    sets: dict[str, Any] = {}
    dumps: dict[str, Any] = {}
    for name in args.sets:
        _files, default_seed, make = DATASETS[name]
        seed = default_seed if args.seed is None else args.seed
        data = make(args.quick, seed)
        dumps[name] = {"messages": [{**asdict(m), "at": m.at.isoformat()} for m in data.messages],
                       "questions": [asdict(q) for q in data.questions]}  # fmt: skip
        sets[name] = run_set(name, data, model, seed)
    if args.dump:
        args.dump.write_text(json.dumps(dumps, indent=1))
    summaries = {name: report["summary"] for name, report in sets.items()}
    report = {
        "benchmark": "retrieval_quality",
        "quick": args.quick,
        "machine": info,
        "goal": "hybrid recall@10 > max(BM25, RRF k=60) recall@10 on every set",
        "goal_met": all(s["goal_met"] for s in sets.values()),
        "sets": sets,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    text = table(summaries)
    print(text)
    for name, s in sets.items():
        verdict = "met" if s["goal_met"] else "MISSED"
        print(
            f"{name}: hybrid recall@10 {s['hybrid_recall@10']:.3f}"
            f" vs best baseline {s['best_baseline_recall@10']:.3f}: {verdict}"
        )
    # The per-question rows (every method's scores for every question: megabytes) go beside the summary, in a
    # file that is not committed; the summary stays small enough to read and to diff.
    rows = {name: s.pop("questions") for name, s in sets.items()}
    (args.out / "retrieval_quality-questions.json").write_text(json.dumps(rows) + "\n")
    (args.out / "retrieval_quality.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "retrieval_quality.md").write_text(text + "\n")
    if args.plot:
        plot(summaries, args.out / "retrieval_quality.png")
    return report


if __name__ == "__main__":
    main()
