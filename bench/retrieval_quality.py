"""Retrieval quality: recall@k and hit@k of vector-only, FTS-only and Quinn's hybrid search, in one run.

    python -m bench.retrieval_quality            # the full data set (6 users, ~2,000 messages, 270 questions)
    python -m bench.retrieval_quality --quick    # one user, for the smoke test

The data set comes from ``bench.conversations`` (generated, fixed seed). Every message is stored through
``MemoryStore.add_many`` with the real model (all-MiniLM-L6-v2), its date in the text and as ``valid_from``.
The three methods rank the asking user's memories:

- vector-only: exact cosine over the stored vectors (what the SQL scan computes), the question embedded once;
- FTS-only: FTS5 BM25 with Quinn's own query building (``search.fts_query``), under the same user filter;
- hybrid: ``quinn.memory.search.hybrid_search`` (what ``MemoryStore.search`` runs) with ``touch=False``:
  counting accesses would make later questions depend on earlier ones.

Goal (issue 7): the hybrid beats the better of the two single methods on recall@10 overall.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.conversations import Dataset, Message, generate
from bench.machine import ROOT, machine_info, require_matplotlib
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.db import Database
from quinn.memory.embed import Embedder
from quinn.memory.filters import memory_filter
from quinn.memory.lexical import content_words, fts_query
from quinn.memory.search import hybrid_search

KS = (1, 5, 10)
DEPTH = max(KS)
METHODS = ("vector", "fts", "hybrid")
KINDS = ("single", "temporal", "changed", "multi_hop")
RESULTS = ROOT / "bench" / "results"


def ingest(store: MemoryStore, messages: Sequence[Message]) -> dict[int, str]:
    """Store every message as an episodic memory; returns memory id -> message id."""
    ids: dict[int, str] = {}
    for start in range(0, len(messages), 256):
        batch = messages[start : start + 256]
        new = store.add_many(
            [NewMemory(user_id=m.user, content=m.indexed_text, scope="episodic", type="context", valid_from=m.at,
                       metadata={"message_id": m.id, "session": m.session}) for m in batch]
        )  # fmt: skip
        ids.update(zip(new, (m.id for m in batch), strict=True))
    return ids


def vector_ranking(store: MemoryStore, user: str, query_vector: np.ndarray, cache: dict[str, Any]) -> list[int]:
    """Exact cosine ranking over the user's stored vectors (read once per user)."""
    if user not in cache:
        where, params = memory_filter(user)
        rows = store.db.query(f"SELECT m.id, m.embedding FROM memories m WHERE {where}", params)
        ids = np.array([r[0] for r in rows])
        matrix = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
        cache[user] = (ids, matrix)
    ids, matrix = cache[user]
    scores = matrix @ query_vector
    return ids[np.argsort(-scores, kind="stable")[:DEPTH]].tolist()


def fts_ranking(store: MemoryStore, user: str, question: str) -> list[int]:
    """BM25 ranking with Quinn's FTS query for the text, under the same user filter as search."""
    match = fts_query(" ".join(question.split()))
    if match is None:
        return []
    where, params = memory_filter(user)
    rows = store.db.query(
        "SELECT m.id FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid"
        f" WHERE memories_fts MATCH ? AND {where} ORDER BY bm25(memories_fts) LIMIT ?",
        [match, *params, DEPTH],
    )
    return [r[0] for r in rows]


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
    """Run every question through the three methods; per question: answers' ranks and scores per method."""
    assert store.embedder is not None
    vectors = store.embedder.embed([" ".join(q.text.split()) for q in data.questions])
    cache: dict[str, Any] = {}
    rows = []
    for q, vector in zip(data.questions, vectors, strict=True):
        ranked = {
            "vector": vector_ranking(store, q.user, vector, cache),
            "fts": fts_ranking(store, q.user, q.text),
            "hybrid": [h.id for h in hybrid_search(store, q.user, q.text, k=DEPTH, touch=False)],
        }
        row: dict[str, Any] = {"id": q.id, "kind": q.kind, "question": q.text, "answers": list(q.answers)}
        for method, ids in ranked.items():
            messages = [memory_to_message[i] for i in ids]
            row[method] = score(messages, q.answers)
            row[f"{method}_ranks"] = [messages.index(a) + 1 if a in messages else None for a in q.answers]
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: overall and per-kind means."""
    summary: dict[str, Any] = {}
    for method in METHODS:
        summary[method] = {"overall": mean_scores([r[method] for r in rows])}
        for kind in KINDS:
            summary[method][kind] = mean_scores([r[method] for r in rows if r["kind"] == kind])
    return summary


def table(summary: dict[str, Any]) -> str:
    """Markdown: overall metrics per method, then recall@10 per kind."""
    lines = [
        "| method | recall@1 | recall@5 | recall@10 | hit@1 | hit@5 | hit@10 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method in METHODS:
        o = summary[method]["overall"]
        cells = " | ".join(f"{o[f'{m}@{k}']:.3f}" for m in ("recall", "hit") for k in KS)
        lines.append(f"| {method} | {cells} |")
    lines += ["", "| recall@10 by kind | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
    for method in METHODS:
        cells = " | ".join(
            f"{summary[method][kind]['recall@10']:.3f} ({summary[method][kind]['questions']})"
            if summary[method][kind]["questions"] else "-"
            for kind in KINDS
        )  # fmt: skip
        lines.append(f"| {method} | {cells} |")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    """recall@10 per question kind and overall, one bar per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ["overall", *KINDS]
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.26
    for offset, method, color in zip((-width, 0, width), METHODS, ("tab:orange", "tab:gray", "tab:blue"), strict=True):
        values = [summary[method][g].get("recall@10", 0.0) for g in groups]
        ax.bar(x + offset, values, width, label=method, color=color)
    ax.set_xticks(x, groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel("recall@10")
    ax.set_title("Quinn retrieval quality on the generated conversations (all-MiniLM-L6-v2, FTS5 BM25)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any]:
    """Run the benchmark, print the tables, write the JSON (and PNG); returns the report.

    ``embedder``: an already loaded all-MiniLM-L6-v2 to reuse (the smoke test shares one); loaded when None.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval_quality", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one user, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--dump", type=Path, default=None, help="also write the generated data set to this JSON")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from quinn.memory.embed import LocalEmbedder

    started = time.perf_counter()
    info = machine_info()
    # --quick: one user's stories and the small talk around them (~100 messages), no padding.
    data = generate(users=1, messages_per_user=0, seed=args.seed) if args.quick else generate(seed=args.seed)
    if args.dump:
        args.dump.write_text(json.dumps({"messages": [{**asdict(m), "at": m.at.isoformat()} for m in data.messages],
                                         "questions": [asdict(q) for q in data.questions]}, indent=1))  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quinn-quality-") as tmp:
        store = MemoryStore(Database.open(str(Path(tmp) / "quality.db")), embedder or LocalEmbedder())
        try:
            t0 = time.perf_counter()
            memory_to_message = ingest(store, data.messages)
            ingest_s = time.perf_counter() - t0
            rows = evaluate(store, data, memory_to_message)
        finally:
            store.close()
    summary = summarise(rows)
    best_single = max(summary["vector"]["overall"]["recall@10"], summary["fts"]["overall"]["recall@10"])
    hybrid = summary["hybrid"]["overall"]["recall@10"]
    report = {
        "benchmark": "retrieval_quality",
        "quick": args.quick,
        "machine": info,
        "dataset": {
            "generator": "bench/conversations.py + bench/phrases.py",
            "seed": args.seed,
            "users": len({m.user for m in data.messages}),
            "messages": len(data.messages),
            "questions": len(data.questions),
            "questions_by_kind": {kind: sum(q.kind == kind for q in data.questions) for kind in KINDS},
            "answers_per_question": round(float(np.mean([len(q.answers) for q in data.questions])), 2),
            "paraphrase": paraphrase_overlap(data),
        },
        "ingest_s": round(ingest_s, 1),
        "goal": "hybrid recall@10 > max(vector, fts) recall@10 overall",
        "hybrid_recall@10": hybrid,
        "best_single_recall@10": best_single,
        "goal_met": hybrid > best_single,
        "summary": summary,
        "questions": rows,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    text = table(summary)
    print(text)
    print(
        f"hybrid recall@10 {hybrid:.3f} vs best single {best_single:.3f}: {'met' if report['goal_met'] else 'MISSED'}"
    )
    (args.out / "retrieval_quality.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "retrieval_quality.md").write_text(text + "\n")
    if args.plot:
        plot(summary, args.out / "retrieval_quality.png")
    return report


if __name__ == "__main__":
    main()
