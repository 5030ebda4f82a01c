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
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench import retrieval_quality
from bench.conversations import Dataset, Message, Question
from bench.machine import ROOT, machine_info, require_matplotlib
from bench.rankings import SCRATCH, build_scratch, legs, methods, user_index
from bench.retrieval_quality import ingest, kinds, mean_scores, paraphrase_overlap, score
from quinn.config import MemoryConfig
from quinn.db import Database
from quinn.memory import MemoryStore
from quinn.memory.embed import Embedder
from quinn.memory.models import utcnow
from quinn.memory.query import named_days, query_parts
from quinn.memory.search import CONVEX, LINES, SHIPPED, Recipe, hybrid_search, relevant

DATA = ROOT / "bench" / "data" / "real_recall.json"
RESULTS = ROOT / "bench" / "results"
REAL = ("friendsqa", "topicalchat")
GENERATED = ("emails", "chats")
DEPTH = 10
BM25 = "bm25 (porter, stop words dropped: today)"
DENSE = "vector"
RRF = "rrf k=60"
HYBRID = "hybrid before issue 31 (search.py at c7b109b)"
SHIPPED_NAME = "shipped: rrf (centred cosine) + named days + conversations (search.py now)"
LINES_NAME = "rrf + named days, each line alone (shipped before)"
HEADLINE = (BM25, DENSE, RRF, HYBRID, SHIPPED_NAME)

# (store, user, question) -> (memory id, raw cosine or None, a query word in it or its neighbour) per hit
Search = Callable[[MemoryStore, str, str], list[tuple[int, float | None, bool]]]


def _search(recipe: Recipe) -> Search:
    return lambda store, user, q: [
        (h.memory.id, h.vector_similarity, h.worded)
        for h in hybrid_search(store, user, q, k=DEPTH, touch=False, recipe=recipe)
    ]


# What search.py ran before issue 31 (centred cosine, per-user IDF, convex 0.8/0.2, importance/recency), what it
# runs now, and the shipped recipe less one part at a time: the ablations.
SEARCHES: dict[str, Search] = {
    HYBRID: _search(CONVEX),
    LINES_NAME: _search(LINES),
    SHIPPED_NAME: _search(SHIPPED),
    "shipped less neighbours": _search(replace(SHIPPED, neighbours=False)),
    "shipped less conversation bm25": _search(replace(SHIPPED, conversations=False)),
    "shipped less conversation centroids": _search(replace(SHIPPED, centroids=False)),
    "shipped, conversations by day only (no session known)": _search(replace(SHIPPED, sessions=False)),
    "shipped less named days": _search(replace(SHIPPED, days=False)),
    "shipped with parts": _search(replace(SHIPPED, parts=True)),
    "shipped with raw cosine (not centred)": _search(replace(SHIPPED, centred=False)),
}
# An ablation that cannot change a question's answer is not run for it: the shipped hits stand in.
SAME_AS_SHIPPED: dict[str, Callable[[str], bool]] = {
    "shipped less named days": lambda q: not named_days(q),
    "shipped with parts": lambda q: not query_parts(q),
}
# The rankings of bench.rankings shown here (the rest of its ablations are in bench/retrieval_quality.py).
RANKINGS = (
    BM25, "bm25 porter, all words", DENSE, "vector centred on the user's mean", RRF, "rrf k=60, centred + per-user IDF",
    "convex 0.8/0.2 + importance/recency (before)",
)  # fmt: skip


def method_names() -> list[str]:
    """Every row of the report, in order."""
    return [*RANKINGS, *SEARCHES]


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


class Remembered:
    """The store's embedder, each text embedded once: every method searches with the same question, and the
    model's forward pass (not the search) was most of a run's time."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id, self.dim = inner.model_id, inner.dim
        self.seen: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if missing:
            self.seen.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self.seen[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)


def evaluate(store: MemoryStore, data: Dataset, memory_to_message: dict[int, str]) -> list[dict[str, Any]]:
    """Every question through every method; per question: its scores and the gold turns' ranks per method."""
    assert store.embedder is not None
    build_scratch(store.db)
    store.embedder = Remembered(store.embedder)
    vectors = store.embedder.embed([" ".join(q.text.split()) for q in data.questions])
    now = utcnow()
    indexes: dict[str, Any] = {}
    every = {name: method for name, method in methods().items() if name in RANKINGS}
    rows = []
    for q, vector in zip(data.questions, vectors, strict=True):
        if q.user not in indexes:
            indexes[q.user] = user_index(store.db, q.user, now)
        index = indexes[q.user]
        leg = legs(store.db, q.user, index, q.text, np.asarray(vector, dtype=np.float32))
        ranked = {name: method(leg, index) for name, method in every.items()}
        searched: dict[str, list[tuple[int, float | None, bool]]] = {}
        for name, search in SEARCHES.items():
            same = SAME_AS_SHIPPED.get(name)
            searched[name] = searched[SHIPPED_NAME] if same and same(q.text) else search(store, q.user, q.text)
        ranked |= {name: [mid for mid, _sim, _worded in hits] for name, hits in searched.items()}
        row: dict[str, Any] = {"id": q.id, "kind": q.kind, "question": q.text, "answers": list(q.answers)}
        # For the cutoff: the shipped search's hits, their cosine, whether a query word found them, which are gold.
        row["shipped hits"] = [[sim, worded, memory_to_message[mid] in q.answers]
                               for mid, sim, worded in searched[SHIPPED_NAME]]  # fmt: skip
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


def _stored(store: MemoryStore) -> dict[int, str]:
    """memory id -> message id of a store filled by ``ingest`` before."""
    rows = store.db.query("SELECT id, metadata FROM memories")
    return {int(mid): json.loads(meta)["message_id"] for mid, meta in rows}


CUTOFFS = tuple(round(0.05 * i, 2) for i in range(0, 15))
DEFAULT_CUTOFF = MemoryConfig.model_fields["recall_min_similarity"].default  # quinn/config.py


def cutoff_curve(rows: list[dict[str, Any]], words: bool = True) -> list[dict[str, float]]:
    """The shipped search's top 10 cut as ``search.relevant`` cuts it at ``recall_min_similarity`` t (``words``
    False: by cosine alone; a hit without a cosine counts 0): recall@10 kept, precision of what is kept, hits kept
    per question (what reaches a prompt)."""
    out = []
    for t in CUTOFFS:
        kept = [[gold for sim, worded, gold in r["shipped hits"] if relevant(words and worded, sim, t)] for r in rows]
        shown = sum(len(k) for k in kept)
        recall = float(np.mean([sum(k) / len(r["answers"]) for k, r in zip(kept, rows, strict=True)]))
        out.append({
            "cosine_at_least": t,
            "recall@10": round(recall, 4),
            "precision": round(sum(sum(k) for k in kept) / shown, 4) if shown else 0.0,
            "hits_per_question": round(shown / len(rows), 2),
        })  # fmt: skip
    return out


def run_set(data: Dataset, embedder: Embedder, db: Path | None = None) -> dict[str, Any]:
    """One data set in its own store: ingest (or reuse the store at ``db``), evaluate, summarise."""
    with tempfile.TemporaryDirectory(prefix="quinn-real-recall-") as tmp:
        path = db or Path(tmp) / "recall.db"
        reuse = path.exists()
        store = MemoryStore(Database.open(str(path)), embedder)
        try:
            t0 = time.perf_counter()
            memory_to_message = _stored(store) if reuse else ingest(store, data.messages)
            if reuse and sorted(memory_to_message.values()) != sorted(m.id for m in data.messages):
                raise SystemExit(f"{path} holds other turns than this set: delete it or choose another --db-dir")
            ingest_s = time.perf_counter() - t0
            store.db.executescript(f"DROP TABLE IF EXISTS {SCRATCH};")
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
        "reused_store": reuse,
        "evaluate_s": round(evaluate_s, 1),
        "summary": summarise(rows),
        "cutoff": cutoff_curve(rows),
        "cutoff_cosine_only": cutoff_curve(rows, words=False),
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


def plot_cutoff(sets: dict[str, dict[str, Any]], path: Path) -> None:
    """Precision against recall@10 of the shipped search as the cutoff rises, one colour per set: the shipped
    rule (a query word, or the cosine) solid, the cosine alone dashed; the default marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for n, (name, r) in enumerate(sets.items()):
        colour = f"C{n}"
        for key, style, label in (("cutoff", "-", name), ("cutoff_cosine_only", "--", f"{name}, cosine only")):
            curve = r[key]
            axes[0].plot([c["recall@10"] for c in curve], [c["precision"] for c in curve], style, color=colour,
                         marker="o", markersize=3, label=label)  # fmt: skip
            axes[1].plot([c["cosine_at_least"] for c in curve], [c["hits_per_question"] for c in curve], style,
                         color=colour, label=label)  # fmt: skip
        default = next(c for c in r["cutoff"] if c["cosine_at_least"] == DEFAULT_CUTOFF)
        axes[0].plot([default["recall@10"]], [default["precision"]], "k*", markersize=10)
    axes[1].axvline(DEFAULT_CUTOFF, color="k", lw=0.8, ls=":")
    axes[0].set_xlabel("recall@10 kept")
    axes[0].set_ylabel("precision of the hits kept")
    axes[0].set_title(f"cutoff 0 to 0.7 (right to left); * = default {DEFAULT_CUTOFF}")
    axes[1].set_xlabel("[memory] recall_min_similarity (cosine)")
    axes[1].set_ylabel("hits kept per question (of 10)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Relevance cutoff on the shipped search (all-MiniLM-L6-v2)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cutoff_table(sets: dict[str, dict[str, Any]]) -> str:
    """Markdown: recall@10 kept / precision / hits per question at a few cutoffs, shipped rule and cosine only."""
    shown = (0.0, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
    lines = ["", "Relevance cutoff on the shipped top 10 (recall@10 kept / precision / hits kept per question); "
             "rule: a query word in the memory or its neighbour, or cosine >= t", ""]  # fmt: skip
    lines += ["| set, rule | " + " | ".join(f"t={t}" for t in shown) + " |", "|---|" + "---:|" * len(shown)]
    for name, r in sets.items():
        for key, label in (("cutoff", "word or cosine"), ("cutoff_cosine_only", "cosine only")):
            at = {c["cosine_at_least"]: c for c in r[key]}
            cells = [f"{at[t]['recall@10']:.3f} / {at[t]['precision']:.3f} / {at[t]['hits_per_question']:.1f}"
                     for t in shown]  # fmt: skip
            lines.append(f"| {name}, {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any] | None:
    """Run the benchmark, print the table, write JSON, MD and PNG; returns the report (None: nothing to run)."""
    parser = argparse.ArgumentParser(prog="python -m bench.real_recall", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one user per set, for the smoke test")
    parser.add_argument("--data", type=Path, default=DATA, help="the built development set")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="real_recall", help="file name of the results (default real_recall)")
    parser.add_argument("--sets", nargs="+", choices=[*REAL, *GENERATED], default=[*REAL, *GENERATED])
    parser.add_argument("--db-dir", type=Path, default=None, help="keep each set's store here and reuse it next run")
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
    if args.db_dir:
        args.db_dir.mkdir(parents=True, exist_ok=True)
    sets = {
        name: run_set(d, model, args.db_dir / f"{name}{'-quick' if args.quick else ''}.db" if args.db_dir else None)
        for name, d in data.items()
    }
    text = table(sets) + "\n" + cutoff_table(sets)
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
        plot_cutoff(sets, args.out / f"{args.name}-cutoff.png")
    return report


if __name__ == "__main__":
    main()
