"""Speed of the memory store: search latency against an exact numpy baseline, ingest rate, size on disk.

    python -m bench.memory_search            # the full run (< 10 minutes on 2 cores)
    python -m bench.memory_search --quick    # seconds: proves the benchmark still runs (tests/bench/test_smoke.py)

Cases (issue 7): (a) 10k and 100k memories over 100 and 1,000 users, (b) one user with 100k memories.
Goals: ``store.search`` p95 <= 3x the numpy baseline for (a) and <= 40 ms for (b); ingest >= 50 memories/s
including embedding on 2 cores. (c) Conversation recall (issue 14): 1,000 memories + 5,000 passages per user,
the retrieval of a reply (memory search, then passage search) p95 <= 15 ms, query embedding excluded.

The large cases use synthetic clustered vectors fed through ``add_many`` by ``PresetEmbedder`` (the store and
its SQL are under test, not the model); the real model's cost is measured on its own: ingest of a sample of
realistic memories through ``add_many`` with ``LocalEmbedder``, and the query embedding time. The numpy
baseline is an exact brute force (matrix product + top-k) over the very same vectors of the same user, held in
RAM. Searches are timed in steady state (every asked user searched once before, so the store's vector cache
holds them); that first, cold search of each user is reported on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import ROOT, machine_info, percentile_ms, require_matplotlib
from bench.synthetic import DIM, Generator
from quinn.db import Database
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.embed import Embedder
from quinn.memory.passages import search_passages
from quinn.memory.search import LINES, hybrid_search

K = 10
BATCH = 500
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Case:
    """One database shape: ``memories`` spread evenly over ``users``; ``goal`` is the group's target."""

    name: str
    group: str  # "a" (ratio to numpy <= 3) or "b" (p95 <= 40 ms)
    memories: int
    users: int


FULL_CASES = (
    Case("a 10k/100 users", "a", 10_000, 100),
    Case("a 10k/1000 users", "a", 10_000, 1_000),
    Case("a 100k/100 users", "a", 100_000, 100),
    Case("a 100k/1000 users", "a", 100_000, 1_000),
    Case("b 100k/1 user", "b", 100_000, 1),
)
QUICK_CASES = (Case("a 400/10 users", "a", 400, 10), Case("b 400/1 user", "b", 400, 1))
GOAL_RATIO_A = 3.0
GOAL_P95_B_MS = 40.0
GOAL_INGEST_PER_S = 50.0
RECALL_CASE = {"users": 10, "memories_per_user": 1_000, "passages_per_user": 5_000, "queries": 200}
RECALL_QUICK = {"users": 2, "memories_per_user": 100, "passages_per_user": 500, "queries": 20}
GOAL_RECALL_P95_MS = 15.0


class PresetEmbedder:
    """An embedder that returns vectors handed to it beforehand: the store's code path, without the model."""

    model_id = "bench/synthetic-384"
    dim = DIM

    def __init__(self) -> None:
        self._next: np.ndarray | None = None

    def preset(self, vectors: np.ndarray) -> None:
        """The vectors the next ``embed`` call returns."""
        self._next = np.ascontiguousarray(vectors, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return the preset vectors; their count must match (a query longer than one chunk would not)."""
        vectors, self._next = self._next, None
        if vectors is None or len(vectors) != len(texts):
            raise RuntimeError(
                f"PresetEmbedder: {len(texts)} texts, preset {None if vectors is None else len(vectors)}"
            )
        return vectors


def db_size_bytes(path: Path) -> int:
    """The database file plus its WAL and shared-memory files."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def run_case(case: Case, queries: int, seed: int, workdir: Path) -> dict[str, Any]:
    """Build the case's database through ``add_many`` and time ``search`` against the numpy baseline."""
    gen = Generator(seed)
    rng = np.random.default_rng(seed + 1)
    users = [f"user{i:04d}@bench.example" for i in range(case.users)]
    owner = rng.permutation(np.arange(case.memories) % case.users)  # every user gets memories/users rows
    items = gen.memories(case.memories)
    vectors = gen.vectors(items)
    path = workdir / f"case-{case.memories}-{case.users}.db"
    embedder = PresetEmbedder()
    store = MemoryStore(Database.open(str(path)), embedder)
    try:
        started = time.perf_counter()
        ids = np.zeros(case.memories, dtype=np.int64)
        for start in range(0, case.memories, BATCH):
            stop = min(start + BATCH, case.memories)
            embedder.preset(vectors[start:stop])
            batch = [
                NewMemory(user_id=users[owner[i]], content=items[i].text, scope="episodic", type="fact")
                for i in range(start, stop)
            ]
            ids[start:stop] = store.add_many(batch)
        ingest_s = time.perf_counter() - started
        store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db_size_bytes(path)
        check = rng.choice(case.memories, size=min(20, case.memories), replace=False)
        for i in check:  # the stored blobs are the baseline's vectors, bit for bit
            blob = store.db.query_value("SELECT embedding FROM memories WHERE id = ?", (int(ids[i]),))
            if not np.array_equal(np.frombuffer(blob, dtype=np.float32), vectors[i]):
                raise RuntimeError(f"stored vector of memory {ids[i]} differs from the generated one")

        by_user = [np.flatnonzero(owner == u) for u in range(case.users)]
        matrices = [np.ascontiguousarray(vectors[rows]) for rows in by_user]
        texts, qvecs = gen.queries(queries)
        asked = rng.integers(case.users, size=queries)
        # Steady state: every asked user has searched once (their vectors sit in the store's cache, when it
        # has one). That first search, cold, is timed on its own: a daemon pays it once per user.
        first_s = []
        for u in sorted(set(asked.tolist())):
            embedder.preset(qvecs[0:1])
            t0 = time.perf_counter()
            hybrid_search(store, users[u], texts[0], k=K, touch=False)
            first_s.append(time.perf_counter() - t0)

        search_s, quiet_s, lines_s, numpy_s, numpy_all_s, agree, access_wait_s = [], [], [], [], [], [], []
        for j in range(queries):
            user = users[asked[j]]
            calls = [
                (search_s, partial(store.search, user, texts[j], k=K)),
                (quiet_s, partial(hybrid_search, store, user, texts[j], k=K, touch=False)),
                # Issue 31's baseline in the same run: each line ranked alone, without the conversation rankings.
                (lines_s, partial(hybrid_search, store, user, texts[j], k=K, touch=False, recipe=LINES)),
            ]
            for into, call in calls if j % 2 else calls[::-1]:  # alternate: neither always finds a warm cache
                embedder.preset(qvecs[j : j + 1])
                t0 = time.perf_counter()
                call()
                into.append(time.perf_counter() - t0)
                # A search that fills the batch of access counts leaves its commit to the store's thread (the
                # caller does not wait for it); let it end before the next timing, which it would otherwise slow.
                t0 = time.perf_counter()
                store.wait_for_access_write()
                access_wait_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            top = numpy_top_k(matrices[asked[j]], qvecs[j], K)
            numpy_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            numpy_top_k_all(vectors, by_user[asked[j]], qvecs[j], K)
            numpy_all_s.append(time.perf_counter() - t0)
            if j < 10:  # the SQL scan is exact: its top k must be numpy's (ties aside)
                sql_top = store.db.query(
                    "SELECT id FROM memories WHERE user_id = ? ORDER BY vector_distance_cos(embedding, ?) LIMIT ?",
                    (user, qvecs[j].tobytes(), K),
                )
                want = set(ids[by_user[asked[j]][top]].tolist())
                agree.append(len(want & {r[0] for r in sql_top}) / len(want))
    finally:
        store.close()
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()

    result = {
        "case": case.name,
        "group": case.group,
        "memories": case.memories,
        "users": case.users,
        "memories_per_user": case.memories // case.users,
        "queries": queries,
        "ingest_per_s": round(case.memories / ingest_s, 1),
        "ingest_note": "synthetic vectors (no model): the store's SQL path only",
        "db_bytes": size,
        "search_ms": {"p50": percentile_ms(search_s, 50), "p95": percentile_ms(search_s, 95)},
        "search_without_access_write_ms": {"p50": percentile_ms(quiet_s, 50), "p95": percentile_ms(quiet_s, 95)},
        "search_lines_only_ms": {"p50": percentile_ms(lines_s, 50), "p95": percentile_ms(lines_s, 95)},
        "background_access_write_ms": {
            "max": round(max(access_wait_s) * 1e3, 3),
            "note": "the longest wait for a batch of access counts written off the caller's path, not in search_ms",
        },
        "first_search_of_a_user_ms": {"p50": percentile_ms(first_s, 50), "p95": percentile_ms(first_s, 95)},
        "numpy_ms": {"p50": percentile_ms(numpy_s, 50), "p95": percentile_ms(numpy_s, 95)},
        "numpy_all_rows_ms": {"p50": percentile_ms(numpy_all_s, 50), "p95": percentile_ms(numpy_all_s, 95)},
        "sql_vector_top_k_agreement": round(float(np.mean(agree)), 4) if agree else None,
    }
    result["ratio_p95"] = round(result["search_ms"]["p95"] / max(result["numpy_ms"]["p95"], 1e-3), 1)
    result["ratio_all_rows_p95"] = round(result["search_ms"]["p95"] / max(result["numpy_all_rows_ms"]["p95"], 1e-3), 2)
    if case.group == "a":
        # Judged on the like-for-like baseline (the user's rows in RAM); the all-rows reading is kept beside it.
        result["goal"] = f"search p95 <= {GOAL_RATIO_A:g}x numpy p95"
        result["goal_met"] = result["ratio_p95"] <= GOAL_RATIO_A
        result["goal_met_all_rows"] = result["ratio_all_rows_p95"] <= GOAL_RATIO_A
    else:
        result["goal"] = f"search p95 <= {GOAL_P95_B_MS:g} ms"
        result["goal_met"] = result["search_ms"]["p95"] <= GOAL_P95_B_MS
    return result


def run_recall_case(users: int, memories_per_user: int, passages_per_user: int, queries: int, seed: int,
                    workdir: Path) -> dict[str, Any]:  # fmt: skip
    """A reply's retrieval with conversation recall: ``hybrid_search`` over the user's memories, then
    ``search_passages`` over their passages (one stored message each, synthetic vectors), timed apart and
    together (the query embedding is preset, so excluded)."""
    gen = Generator(seed + 3)
    names = [f"user{i:04d}@bench.example" for i in range(users)]
    path = workdir / "recall.db"
    embedder = PresetEmbedder()
    store = MemoryStore(Database.open(str(path)), embedder)
    try:
        started = time.perf_counter()
        for user in names:
            items = gen.memories(memories_per_user)
            vectors = gen.vectors(items)
            for start in range(0, memories_per_user, BATCH):
                embedder.preset(vectors[start : start + BATCH])
                store.add_many([NewMemory(user_id=user, content=m.text, scope="episodic", type="fact")
                                for m in items[start : start + BATCH]])  # fmt: skip
        memories_s = time.perf_counter() - started
        started = time.perf_counter()
        for u, user in enumerate(names):
            items = gen.memories(passages_per_user)
            vectors = gen.vectors(items)
            with store.db.transaction() as tx:
                for i, (item, vector) in enumerate(zip(items, vectors, strict=True)):
                    mid = f"<m{u}-{i}@bench.example>"
                    tx.execute(
                        "INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr,"
                        " sent_at, body, full_text, created_at) VALUES (?, ?, 'in', ?, 'bench', ?, ?, ?, ?, ?)",
                        (f"s{u}-{i // 40}", user, mid, user, "2026-11-01T00:00:00+00:00", item.text, item.text,
                         "2026-11-01T00:00:00+00:00"),
                    )  # fmt: skip
                    tx.execute(
                        "INSERT INTO passages (user_id, message_row, message_id, direction, sent_at, subject,"
                        " position, content, audience, embedding, embedding_model, created_at)"
                        " SELECT ?, id, ?, 'in', sent_at, 'bench', 0, body, ?, ?, ?, created_at FROM messages"
                        " WHERE message_id = ?",
                        (user, mid, json.dumps([user]), vector.tobytes(), embedder.model_id, mid),
                    )
        passages_s = time.perf_counter() - started
        store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db_size_bytes(path)
        texts, qvecs = gen.queries(queries)
        rng = np.random.default_rng(seed + 4)
        asked = rng.integers(users, size=queries)
        buffered = [f"<m{u}-{i}@bench.example>" for u in range(1) for i in range(12)]  # a thread buffer left out
        for user in names:  # steady state: every user's matrices cached, as for the memory cases
            embedder.preset(qvecs[0:1])
            hybrid_search(store, user, texts[0], k=K, touch=False)
            embedder.preset(qvecs[0:1])
            search_passages(store, user, texts[0], k=K)
        memory_s, passage_s, both_s = [], [], []
        for j in range(queries):
            user = names[asked[j]]
            embedder.preset(qvecs[j : j + 1])
            t0 = time.perf_counter()
            hybrid_search(store, user, texts[j], k=2 * K, include_global=True, touch=False)
            t1 = time.perf_counter()
            embedder.preset(qvecs[j : j + 1])
            found = search_passages(store, user, texts[j], k=K, exclude_message_ids=buffered)
            t2 = time.perf_counter()
            if not found:
                raise RuntimeError(f"no passage found for {texts[j]!r}")
            memory_s.append(t1 - t0)
            passage_s.append(t2 - t1)
            both_s.append(t2 - t0)
    finally:
        store.close()
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
    p95 = percentile_ms(both_s, 95)
    return {
        "case": f"c recall {users} users",
        "users": users,
        "memories_per_user": memories_per_user,
        "passages_per_user": passages_per_user,
        "queries": queries,
        "ingest_s": {"memories": round(memories_s, 1), "passages": round(passages_s, 1)},
        "db_bytes": size,
        "memory_search_ms": {"p50": percentile_ms(memory_s, 50), "p95": percentile_ms(memory_s, 95)},
        "passage_search_ms": {"p50": percentile_ms(passage_s, 50), "p95": percentile_ms(passage_s, 95)},
        "retrieval_ms": {"p50": percentile_ms(both_s, 50), "p95": p95},
        "goal": f"retrieval (memories + passages) p95 <= {GOAL_RECALL_P95_MS:g} ms",
        "goal_met": p95 <= GOAL_RECALL_P95_MS,
    }


def recall_table(case: dict[str, Any]) -> str:
    """The recall case as a Markdown table."""
    return (
        "\n| recall case | per user | DB MB | memory search p50 / p95 | passage search p50 / p95 "
        "| both p50 / p95 | goal |\n|---|---|---:|---:|---:|---:|---|\n"
        f"| {case['users']} users | {case['memories_per_user']:,} memories + {case['passages_per_user']:,} passages "
        f"| {case['db_bytes'] / 1e6:,.1f} "
        f"| {case['memory_search_ms']['p50']:.2f} / {case['memory_search_ms']['p95']:.2f} ms "
        f"| {case['passage_search_ms']['p50']:.2f} / {case['passage_search_ms']['p95']:.2f} ms "
        f"| {case['retrieval_ms']['p50']:.2f} / {case['retrieval_ms']['p95']:.2f} ms "
        f"| {case['goal']}: {'met' if case['goal_met'] else 'MISSED'} |"
    )


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Exact cosine top-k over unit vectors: row indexes, best first."""
    scores = matrix @ query
    if len(scores) <= k:
        return np.argsort(-scores)
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])]


def numpy_top_k_all(vectors: np.ndarray, user_rows: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """The weaker baseline: score every vector of the database (no per-user matrix), then keep the user's rows."""
    scores = (vectors @ query)[user_rows]
    if len(scores) <= k:
        return user_rows[np.argsort(-scores)]
    top = np.argpartition(-scores, k)[:k]
    return user_rows[top[np.argsort(-scores[top])]]


def real_model_costs(
    sample: int, query_count: int, seed: int, workdir: Path, embedder: Embedder | None = None
) -> dict[str, Any]:
    """Ingest of ``sample`` realistic memories through ``add_many`` with the real model, and query embedding."""
    from quinn.memory.embed import LocalEmbedder

    load_s = None
    if embedder is None:
        t0 = time.perf_counter()
        embedder = LocalEmbedder()
        load_s = round(time.perf_counter() - t0, 1)
    gen = Generator(seed + 7)
    items = gen.memories(sample)
    users = [f"user{i}@bench.example" for i in range(10)]
    path = workdir / "real-model.db"
    store = MemoryStore(Database.open(str(path)), embedder)
    try:
        embedder.embed(["warm up the model"])
        started = time.perf_counter()
        for start in range(0, sample, 250):
            store.add_many(
                [NewMemory(user_id=users[i % len(users)], content=items[i].text, scope="episodic")
                 for i in range(start, min(start + 250, sample))]
            )  # fmt: skip
        ingest_s = time.perf_counter() - started
        texts, _ = gen.queries(query_count)
        embed_s = []
        for text in texts:
            t0 = time.perf_counter()
            embedder.embed([text])
            embed_s.append(time.perf_counter() - t0)
    finally:
        store.close()
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
    rate = sample / ingest_s
    return {
        "model": embedder.model_id,
        "model_load_s": load_s,
        "ingest_with_embedding": {
            "memories": sample,
            "batch": 250,
            "seconds": round(ingest_s, 2),
            "per_s": round(rate, 1),
            "goal": f">= {GOAL_INGEST_PER_S:g} memories/s",
            "goal_met": rate >= GOAL_INGEST_PER_S,
        },
        "query_embedding_ms": {
            "queries": query_count,
            "p50": percentile_ms(embed_s, 50),
            "p95": percentile_ms(embed_s, 95),
        },
    }


def table(cases: list[dict[str, Any]], model: dict[str, Any]) -> str:
    """The results as a Markdown table (printed, and pasted into bench/README.md)."""
    head = (
        "| case | per user | ingest/s | DB MB | search p50 | search p95 | no-write p95 | lines-only p95 "
        "| first search p95 | numpy p95 user rows | numpy p95 all rows | ratio | ratio all rows | goal |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    rows = []
    for c in cases:
        rows.append(
            f"| {c['case']} | {c['memories_per_user']:,} | {c['ingest_per_s']:,.0f} | {c['db_bytes'] / 1e6:,.1f} "
            f"| {c['search_ms']['p50']:.2f} ms | {c['search_ms']['p95']:.2f} ms "
            f"| {c['search_without_access_write_ms']['p95']:.2f} ms | {c['search_lines_only_ms']['p95']:.2f} ms "
            f"| {c['first_search_of_a_user_ms']['p95']:.2f} ms "
            f"| {c['numpy_ms']['p95']:.3f} ms "
            f"| {c['numpy_all_rows_ms']['p95']:.2f} ms | {c['ratio_p95']:,.1f}x | {c['ratio_all_rows_p95']:,.2f}x "
            f"| {c['goal']}: {_verdict(c)} |"
        )
    ing = model["ingest_with_embedding"]
    qe = model["query_embedding_ms"]
    foot = (
        f"\nIngest with the real model ({model['model']}): {ing['per_s']:.1f} memories/s over {ing['memories']:,} "
        f"memories ({ing['goal']}: {'met' if ing['goal_met'] else 'MISSED'}). "
        f"Query embedding (not in the search figures): p50 {qe['p50']:.1f} ms, p95 {qe['p95']:.1f} ms."
    )
    return head + "\n".join(rows) + foot


def _verdict(case: dict[str, Any]) -> str:
    verdict = "met" if case["goal_met"] else "MISSED"
    if "goal_met_all_rows" in case:
        return f"{verdict} (all rows: {'met' if case['goal_met_all_rows'] else 'MISSED'})"
    return verdict


def plot(cases: list[dict[str, Any]], path: Path) -> None:
    """Search p95 (with and without the access write) beside the numpy baseline, log scale, per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c["case"] for c in cases]
    x = np.arange(len(cases))
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.2
    series = (
        ("store.search p95", [c["search_ms"]["p95"] for c in cases], "tab:blue"),
        ("search without access write p95", [c["search_without_access_write_ms"]["p95"] for c in cases], "tab:cyan"),
        ("numpy exact p95, the user's rows in RAM", [c["numpy_ms"]["p95"] for c in cases], "tab:gray"),
        ("numpy exact p95, all rows", [c["numpy_all_rows_ms"]["p95"] for c in cases], "tab:olive"),
    )
    for offset, (label, values, color) in zip((-1.5 * width, -0.5 * width, 0.5 * width, 1.5 * width), series,
                                               strict=True):  # fmt: skip
        ax.bar(x + offset, values, width, label=label, color=color)
    for i, c in enumerate(cases):
        goal = GOAL_RATIO_A * c["numpy_ms"]["p95"] if c["group"] == "a" else GOAL_P95_B_MS
        ax.hlines(goal, i - 2 * width, i + 2 * width, colors="tab:red", linestyles="dashed")
        if c["group"] == "a":
            ax.hlines(GOAL_RATIO_A * c["numpy_all_rows_ms"]["p95"], i - 2 * width, i + 2 * width,
                      colors="tab:orange", linestyles="dotted")  # fmt: skip
    ax.plot([], [], color="tab:red", linestyle="dashed", label="goal (3x user rows for a; 40 ms for b)")
    ax.plot([], [], color="tab:orange", linestyle="dotted", label="3x all rows")
    ax.set_yscale("log")
    ax.set_ylabel("milliseconds (log)")
    ax.set_xticks(x, names, rotation=12)
    ax.set_title("Quinn memory search latency vs exact numpy (k=10, query embedding excluded)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write the JSON (and PNG); returns the results.

    ``embedder``: an already loaded real model to reuse (the smoke test shares one); loaded here when None.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.memory_search", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument(
        "--queries", type=int, default=None, help="searches timed per case (default 200 at 10k, 100 at 100k, 30 for b)"
    )
    parser.add_argument("--sample", type=int, default=None, help="memories embedded with the real model (1200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-recall", dest="recall", action="store_false", help="skip case c (passages)")
    parser.add_argument("--only-recall", action="store_true", help="case c alone (no memory cases)")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cases = () if args.only_recall else QUICK_CASES if args.quick else FULL_CASES
    if args.queries:
        queries = {case.name: args.queries for case in cases}
    else:  # fewer at 100k: the whole run must stay under 10 minutes on 2 cores
        queries = {c.name: 20 if args.quick else 200 if c.memories <= 10_000 else 100 if c.group == "a" else 30
                   for c in cases}  # fmt: skip
    sample = args.sample or (40 if args.quick else 1200)
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    info = machine_info()
    results: list[dict[str, Any]] = []
    recall: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="quinn-bench-") as tmp:
        if cases:
            model = real_model_costs(sample, 5 if args.quick else 50, args.seed, Path(tmp), embedder)
        for case in cases:
            t0 = time.perf_counter()
            results.append(run_case(case, queries[case.name], args.seed, Path(tmp)))
            print(f"  {case.name}: {time.perf_counter() - t0:.0f} s", flush=True)
        if args.recall:
            t0 = time.perf_counter()
            shape = RECALL_QUICK if args.quick else RECALL_CASE
            recall = run_recall_case(**shape, seed=args.seed, workdir=Path(tmp))
            print(f"  recall: {time.perf_counter() - t0:.0f} s", flush=True)
    common = {
        "quick": args.quick,
        "k": K,
        "machine": info,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    report: dict[str, Any] = {"benchmark": "memory_search", **common, "cases": results, "recall": recall}
    if cases:  # the memory cases' files are only rewritten by a run that measured them
        report["real_model"] = model
        report["duration_s"] = round(time.perf_counter() - started, 1)
        text = table(results, model)
        print(text)
        (args.out / "memory_search.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "memory_search.md").write_text(text + "\n")
        if args.plot:
            plot(results, args.out / "memory_search.png")
    if recall is not None:  # case c has its own files, so either part can be re-run alone
        text = recall_table(recall).lstrip("\n")
        print(text)
        (args.out / "memory_search_recall.json").write_text(
            json.dumps({"benchmark": "memory_search recall", **common, "case": recall}, indent=2) + "\n"
        )
        (args.out / "memory_search_recall.md").write_text(text + "\n")
        if args.plot:
            plot_recall(recall, args.out / "memory_search_recall.png")
    print(f"total {time.perf_counter() - started:.0f} s")
    return report


def plot_recall(case: dict[str, Any], path: Path) -> None:
    """p50 and p95 of the memory search, the passage search and both, beside the 15 ms goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = (("memory search", "memory_search_ms"), ("passage search", "passage_search_ms"), ("both", "retrieval_ms"))
    x = np.arange(len(parts))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.bar(x - 0.2, [case[key]["p50"] for _, key in parts], 0.4, label="p50", color="tab:cyan")
    ax.bar(x + 0.2, [case[key]["p95"] for _, key in parts], 0.4, label="p95", color="tab:blue")
    ax.axhline(
        GOAL_RECALL_P95_MS, color="tab:red", linestyle="dashed", label=f"goal: both p95 <= {GOAL_RECALL_P95_MS:g} ms"
    )
    ax.set_xticks(x, [name for name, _ in parts])
    ax.set_ylabel("milliseconds")
    ax.set_title(
        f"Retrieval with conversation recall: {case['memories_per_user']:,} memories + "
        f"{case['passages_per_user']:,} passages per user, {case['users']} users (query embedding excluded)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
