"""Documents and the knowledge base (issue 18): extraction and indexing speed per format, search latency with a
10k-passage knowledge base, and retrieval quality on questions about planted facts.

    python -m bench.documents            # the full run (~5 minutes on a quiet 2-core box, far more on a busy one)
    python -m bench.documents --quick    # seconds: proves the benchmark still runs (tests/bench/test_smoke.py)

(a) Speed per format, on files made by ``bench.documents_data.sample_files`` (the libraries Quinn reads with, and
the tests' hand-written PDF and PPTX): extraction is ``documents.extract.extract`` in-process (pages/s, MB/s);
indexing is ``documents.knowledge.add_file``, the whole ``quinn kb add`` path per file (read in a child process,
cut into passages, embedded with the real model, stored), in passages/s.
(b) Search latency: 10,000 knowledge-base passages and a few hundred users with files of their own (synthetic
clustered vectors through ``PresetEmbedder``, as bench/memory_search.py: the store and its SQL are under test,
the query embedding excluded), timed through ``passages.search_passages`` as a reply calls it, and as the
``search_documents`` tool calls it (``documents_only``); the same search without the knowledge base beside it.
(c) Retrieval quality: twenty generated site handbooks (``documents_data.corpus``) added with ``add_file`` and
the real model, 240 questions about their planted facts, half of them (the 120 of the ``test`` sites) reported. A
question is answered when a passage holding the fact's sentence is among the first k, and when it reaches the
prompt: ``context.share_budget`` within ``[memory] token_budget``, as the reply prompt is assembled. Methods:
``search_passages`` (Quinn), plain FTS5 BM25 over the same passages (the baseline), cosine alone (ablation).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import documents_data as data
from bench.machine import ROOT, machine_info, percentile_ms, require_matplotlib
from bench.memory_search import PresetEmbedder, db_size_bytes
from bench.synthetic import Generator
from quinn.agent.context import share_budget
from quinn.config import DocumentsConfig, MemoryConfig
from quinn.db import Database, Transaction
from quinn.documents.extract import extract
from quinn.documents.knowledge import add_file
from quinn.memory import MemoryStore
from quinn.memory.embed import Embedder
from quinn.memory.lexical import query_terms
from quinn.memory.passages import (
    BM25,
    KNOWLEDGE_OWNER,
    PASSAGE_COLUMNS,
    Passage,
    PassageHit,
    StoredMessage,
    insert_passages,
    search_passages,
)  # fmt: skip

RESULTS = ROOT / "bench" / "results"
# The [documents] defaults but the read deadline: on a box shared with other work, a child process can wait longer
# than the daemon's 20 s for a core; a file timed out would be a benchmark failure, not a measurement.
CONFIG = DocumentsConfig(timeout_s=600)
KS = (1, 3, 5, 10)
K = MemoryConfig().search_k  # what a reply's search returns before the budget
TOKEN_BUDGET = MemoryConfig().token_budget  # what of it reaches the prompt
ASKER = "asker@bench.example"
FULL = {"files": 1, "pages": 5, "min_s": 0.5, "kb_passages": 10_000, "users": 300, "user_files": 2,
        "passages_per_file": 10, "queries": 300, "sites": 20}  # fmt: skip
QUICK = {"files": 1, "pages": 2, "min_s": 0.02, "kb_passages": 300, "users": 5, "user_files": 1,
         "passages_per_file": 5, "queries": 20, "sites": 4}  # fmt: skip
METHODS = ("quinn (search_passages)", "bm25 (FTS5 only)", "vector only")


# -- (a) extraction and indexing speed ----------------------------------------------------------------------


def _cpu_s() -> float:
    """CPU seconds of this process (all threads) and of its children that ended: what the work cost, apart from
    waiting for a core on a busy box."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def format_speed(store: MemoryStore, workdir: Path, files: int, pages: int, min_s: float) -> list[dict[str, Any]]:
    """Per format: extraction in-process (repeated for ``min_s`` of CPU), then ``add_file`` of each file once.
    Rates per wall second and per CPU second."""
    rows = []
    for kind in data.FORMATS:
        samples = data.sample_files(kind, files, pages)
        read = [extract(name, data.CONTENT_TYPES[kind], blob) for name, blob, _pages in samples]
        if any(d.error for d in read):
            raise RuntimeError(f"{kind}: {[d.error for d in read if d.error]}")
        rounds, started, cpu = 0, time.perf_counter(), _cpu_s()
        while (cpu_s := _cpu_s() - cpu) < min_s or not rounds:
            for name, blob, _pages in samples:
                extract(name, data.CONTENT_TYPES[kind], blob)
            rounds += 1
        wall_s = time.perf_counter() - started
        size = sum(len(blob) for _name, blob, _pages in samples)
        page_count = sum(p for _name, _blob, p in samples)
        indexed, index_s, cpu = 0, 0.0, _cpu_s()
        for name, blob, _pages in samples:
            path = workdir / name
            path.write_bytes(blob)
            t0 = time.perf_counter()
            added = add_file(store, path, CONFIG)
            index_s += time.perf_counter() - t0
            if added.status != "added":
                raise RuntimeError(f"{name}: {added.status} {added.reason}")
            indexed += added.passages
        index_cpu_s = _cpu_s() - cpu
        print(f"  {kind}: extract {wall_s:.2f} s ({cpu_s:.2f} CPU s) x{rounds}, index {index_s:.1f} s"
              f" ({index_cpu_s:.1f} CPU s), {indexed} passages", flush=True)  # fmt: skip
        rows.append({
            "format": kind, "files": files, "bytes": size, "pages": page_count,
            "sections": sum(len(d.sections) for d in read), "characters": sum(len(d.text) for d in read),
            "passages": indexed, "extract_rounds": rounds,
            "extract_pages_per_s": round(page_count * rounds / wall_s, 1),
            "extract_pages_per_cpu_s": round(page_count * rounds / cpu_s, 1),
            "extract_mb_per_cpu_s": round(size * rounds / cpu_s / 1e6, 2),
            "extract_cpu_ms_per_file": round(cpu_s * 1000 / (rounds * files), 2),
            "index_passages_per_s": round(indexed / index_s, 2),
            "index_passages_per_cpu_s": round(indexed / index_cpu_s, 2),
            "index_s_per_file": round(index_s / files, 2), "index_cpu_s_per_file": round(index_cpu_s / files, 2),
        })  # fmt: skip
    return rows


# -- (b) search latency --------------------------------------------------------------------------------------


def _kb_file(tx: Transaction, number: int, texts: Sequence[str], vectors: np.ndarray, model: str) -> None:
    """A knowledge-base file as ``knowledge.add_file`` stores one: documents, message_documents, passages."""
    name = f"kb-{number:04d}.pdf"
    doc = tx.execute("INSERT INTO documents (user_id, sha256, kind, size, error, created_at) VALUES"
                     " (?, ?, 'pdf', 1, NULL, '2026-11-01T00:00:00+00:00')",
                     (KNOWLEDGE_OWNER, f"{number:064x}"))  # fmt: skip
    tx.execute("INSERT INTO message_documents (message_row, position, document_id, user_id, session_id, name,"
               " content_type) VALUES (?, 1, ?, ?, NULL, ?, 'application/pdf')",
               (-doc, doc, KNOWLEDGE_OWNER, name))  # fmt: skip
    entry = StoredMessage(-doc, f"kb:{number}", None, "in", "2026-11-01T00:00:00+00:00", name, "", ())
    pieces = [(f"p.{i + 1}", t) for i, t in enumerate(texts)]
    insert_passages(tx, KNOWLEDGE_OWNER, entry, pieces, vectors, model, document_id=doc, document=name)


def _user_mail(tx: Transaction, user: str, u: int, f: int, texts: Sequence[str], vectors: np.ndarray,
               model: str) -> None:  # fmt: skip
    """A user's mail carrying one file, kept as ``library.keep_documents`` keeps one: the message, the file, its
    link, the mail's passage and the file's passages."""
    mid, at = f"<u{u}-{f}@bench.example>", "2026-11-01T00:00:00+00:00"
    row = tx.execute("INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, sent_at,"
                     " body, full_text, created_at) VALUES (?, ?, 'in', ?, 'files', ?, ?, 'see attached',"
                     " 'see attached', ?)", (f"s{u}", user, mid, user, at, at))  # fmt: skip
    doc = tx.execute("INSERT INTO documents (user_id, sha256, kind, size, error, created_at) VALUES"
                     " (?, ?, 'pdf', 1, NULL, ?)", (user, f"{u:032x}{f:032x}", at))  # fmt: skip
    name = f"file-{f}.pdf"
    tx.execute("INSERT INTO message_documents (message_row, position, document_id, user_id, session_id, name,"
               " content_type) VALUES (?, 1, ?, ?, ?, ?, 'application/pdf')",
               (row, doc, user, f"s{u}", name))  # fmt: skip
    entry = StoredMessage(row, mid, None, "in", at, "files", "see attached", (user,))
    insert_passages(tx, user, entry, [("", texts[0])], vectors[:1], model)
    pieces = [(f"p.{i + 1}", t) for i, t in enumerate(texts[1:])]
    insert_passages(tx, user, entry, pieces, vectors[1:], model, document_id=doc, document=name)


def search_speed(workdir: Path, kb_passages: int, users: int, user_files: int, passages_per_file: int,
                 queries: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """p50/p95 of a reply's passage search and of ``search_documents``' with the knowledge base, and of a
    reply's without it, in steady state (each user searched once before: the vector caches hold them)."""
    gen = Generator(seed)
    embedder = PresetEmbedder()
    path = workdir / "search.db"
    store = MemoryStore(Database.open(str(path)), embedder)
    names = [f"user{i:04d}@bench.example" for i in range(users)]
    try:
        t0 = time.perf_counter()
        per_file = 25
        for start in range(0, kb_passages, per_file * 20):
            with store.db.transaction() as tx:
                for number in range(start // per_file, min(start + per_file * 20, kb_passages) // per_file):
                    items = gen.memories(per_file)
                    _kb_file(tx, number, [m.text for m in items], gen.vectors(items), embedder.model_id)
        for u, user in enumerate(names):
            with store.db.transaction() as tx:
                for f in range(user_files):
                    items = gen.memories(passages_per_file + 1)
                    _user_mail(tx, user, u, f, [m.text for m in items], gen.vectors(items), embedder.model_id)
        ingest_s = time.perf_counter() - t0
        store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db_size_bytes(path)
        texts, vectors = gen.queries(queries)
        asked = np.random.default_rng(seed + 1).integers(users, size=queries)
        buffered = ["<u0-0@bench.example>"]  # the thread buffer's mail, left out as a reply leaves it out
        embedder.preset(vectors[:1])
        t0 = time.perf_counter()
        search_passages(store, names[0], texts[0], k=K)  # loads the knowledge base's matrix (and the user's)
        first_s = time.perf_counter() - t0
        for user in names[1:]:
            embedder.preset(vectors[:1])
            search_passages(store, user, texts[0], k=K)
        timings: dict[str, list[float]] = {"reply": [], "search_documents": [], "reply without kb": []}
        options: dict[str, dict[str, Any]] = {"reply": {"exclude_message_ids": buffered},
                                              "search_documents": {"documents_only": True},
                                              "reply without kb": {"exclude_message_ids": buffered,
                                                                   "knowledge": False}}  # fmt: skip
        for j in range(queries):
            for name, kwargs in options.items():
                embedder.preset(vectors[j : j + 1])
                t0 = time.perf_counter()
                found = search_passages(store, names[asked[j]], texts[j], k=K, **kwargs)
                timings[name].append(time.perf_counter() - t0)
                if not found and kwargs.get("knowledge", True):
                    raise RuntimeError(f"{name}: nothing found for {texts[j]!r}")
    finally:
        store.close()
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
    user_passages = users * user_files * (passages_per_file + 1)
    return {
        "kb_passages": kb_passages, "users": users, "user_passages": user_passages,
        "passages_per_user": user_files * (passages_per_file + 1), "queries": queries, "k": K,
        "ingest_s": round(ingest_s, 1), "db_bytes": size, "first_search_ms": round(first_s * 1000, 1),
        "search_ms": {name: {"p50": percentile_ms(t, 50), "p95": percentile_ms(t, 95)} for name, t in timings.items()},
    }  # fmt: skip


# -- (c) retrieval quality -----------------------------------------------------------------------------------


def _bm25(store: MemoryStore, question: str, k: int) -> list[int]:
    """Plain FTS5 BM25 over the asker's and the knowledge base's passages: the question's words OR-ed
    (``lexical.query_terms``: stop words out), ranked by ``bm25()`` alone."""
    terms = query_terms(question)
    match = "content : (" + " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) + ")"
    rows = store.db.query(
        f"SELECT p.id FROM passages_fts JOIN passages p ON p.id = passages_fts.rowid WHERE passages_fts MATCH ?"
        f" AND p.user_id IN (?, ?) ORDER BY {BM25} LIMIT ?",
        (match, ASKER, KNOWLEDGE_OWNER, k),
    )
    return [int(r[0]) for r in rows]


def quality(embedder: Embedder, workdir: Path, corpus: data.Corpus) -> dict[str, Any]:
    """Add the handbooks to a knowledge base, ask every question by every method, score per split."""
    store = MemoryStore(Database.open(str(workdir / "quality.db")), embedder)
    try:
        t0 = time.perf_counter()
        for name, blob in corpus.files.items():
            (workdir / name).write_bytes(blob)
            added = add_file(store, workdir / name, CONFIG)
            if added.status != "added":
                raise RuntimeError(f"{name}: {added.status} {added.reason}")
        index_s = time.perf_counter() - t0
        rows = store.db.query(f"SELECT {PASSAGE_COLUMNS}, p.embedding FROM passages p ORDER BY p.id")
        passages = {int(r[0]): Passage.from_row(r[:-1]) for r in rows}
        ids = np.asarray(list(passages), dtype=np.int64)
        matrix = np.stack([np.frombuffer(r[-1], dtype=np.float32) for r in rows])
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        holding = {f.sentence: {pid for pid, p in passages.items() if p.document == f.file and f.sentence in p.content}
                   for f in corpus.facts}  # fmt: skip
        if not all(holding.values()):
            raise RuntimeError("a planted fact is in no passage")
        questions = [q.text for q in corpus.questions]
        qvecs = np.asarray(embedder.embed([" ".join(q.split()) for q in questions]), dtype=np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        per_question = []
        t0 = time.perf_counter()
        for q, vector in zip(corpus.questions, qvecs, strict=True):
            ranked = {
                METHODS[0]: [h.passage.id for h in search_passages(store, ASKER, q.text, k=K)],
                METHODS[1]: _bm25(store, q.text, K),
                METHODS[2]: [int(ids[i]) for i in np.argsort(-(matrix @ vector), kind="stable")[:K]],
            }
            relevant = holding[q.fact.sentence]
            row: dict[str, Any] = {"question": q.text, "split": q.fact.split, "file": q.fact.file}
            for method, found in ranked.items():
                row[method] = score(found, relevant, [passages[i] for i in found])
            per_question.append(row)
        ask_s = time.perf_counter() - t0
    finally:
        store.close()
    return {
        "sites": len(corpus.files), "facts": len(corpus.facts), "questions": len(corpus.questions),
        "passages": len(passages), "formats": sorted({Path(n).suffix for n in corpus.files}),
        "index_s": round(index_s, 1), "ask_s": round(ask_s, 1), "k": K, "token_budget": TOKEN_BUDGET,
        "splits": {split: summarise([r for r in per_question if r["split"] == split]) for split in ("test", "dev")},
        "per_question": per_question,
    }  # fmt: skip


def score(found: Sequence[int], relevant: set[int], shown: Sequence[Passage]) -> dict[str, float]:
    """hit@k, reciprocal rank (within K) and whether a relevant passage is in the conversations block that a
    reply prompt would hold (``share_budget`` of these hits within the token budget, no memories beside)."""
    rank = next((i + 1 for i, pid in enumerate(found) if pid in relevant), None)
    _memories, block = share_budget([], [PassageHit(p, 1.0) for p in shown], TOKEN_BUDGET)
    in_prompt = any(p.id in relevant and f"- {p.line()}" in block.split("\n") for p in shown)
    lines = block.split("\n")
    return {**{f"hit@{k}": float(rank is not None and rank <= k) for k in KS}, "mrr": 1.0 / rank if rank else 0.0,
            "in_prompt": float(in_prompt), "shown": float(sum(f"- {p.line()}" in lines for p in shown))}  # fmt: skip


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method: the mean of each score over ``rows`` (4 decimals)."""
    out: dict[str, Any] = {"questions": len(rows)}
    for method in METHODS:
        out[method] = {key: round(float(np.mean([r[method][key] for r in rows])), 4) for key in rows[0][method]}
    return out


# -- report --------------------------------------------------------------------------------------------------


def tables(report: dict[str, Any]) -> str:
    """The three Markdown tables."""
    lines = ["(a) extraction (in-process) and indexing (`quinn kb add`: read in a child process, cut, embed,"
             " store); rates per CPU second (this process and its children), and per wall second", "",
             "| format | files | MB | pages | passages | extract pages/CPU s | extract MB/CPU s | extract CPU ms/file |"
             " index passages/CPU s | index passages/s wall | index s/file wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in report["formats"]:
        lines.append(f"| {r['format']} | {r['files']} | {r['bytes'] / 1e6:.3f} | {r['pages']} | {r['passages']} |"
                     f" {r['extract_pages_per_cpu_s']:,.0f} | {r['extract_mb_per_cpu_s']:.2f} |"
                     f" {r['extract_cpu_ms_per_file']} | {r['index_passages_per_cpu_s']} |"
                     f" {r['index_passages_per_s']} | {r['index_s_per_file']} |")  # fmt: skip
    s = report["search"]
    lines += ["", f"(b) passage search, {s['kb_passages']:,} knowledge-base passages + {s['users']} users with"
              f" {s['passages_per_user']} passages each ({s['user_passages']:,}), k={s['k']}, {s['queries']}"
              " queries, query embedding excluded", "", "| search | p50 | p95 |", "|---|---:|---:|"]  # fmt: skip
    for name, t in s["search_ms"].items():
        lines.append(f"| {name} | {t['p50']:.2f} ms | {t['p95']:.2f} ms |")
    q = report["quality"]
    for split in ("test", "dev"):
        summary = q["splits"][split]
        lines += ["", f"(c) retrieval quality, {split} split ({summary['questions']} questions on"
                  f" {q['sites'] // 2} sites; {q['passages']} passages in the base; k={q['k']}, prompt budget"
                  f" {q['token_budget']} tokens)", "",
                  "| method | hit@1 | hit@3 | hit@5 | hit@10 | MRR | in prompt | passages in prompt |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for method in METHODS:
            m = summary[method]
            lines.append(f"| {method} | " + " | ".join(f"{m[key]:.3f}" for key in (*[f"hit@{k}" for k in KS], "mrr",
                         "in_prompt")) + f" | {m['shown']:.1f} |")  # fmt: skip
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Extraction and indexing rate per format; hit@k per method on the test split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    rows = report["formats"]
    y = np.arange(len(rows))
    left.barh(y - 0.2, [r["extract_pages_per_cpu_s"] for r in rows], 0.4, label="extract pages / CPU s",
              color="tab:blue")  # fmt: skip
    left.barh(y + 0.2, [r["index_passages_per_cpu_s"] for r in rows], 0.4, label="index passages / CPU s",
              color="tab:orange")  # fmt: skip
    left.set_yticks(y, [r["format"] for r in rows])
    left.invert_yaxis()
    left.set_xscale("log")
    left.legend(loc="lower right", fontsize=8)
    left.set_title("speed per format")
    summary = report["quality"]["splits"]["test"]
    keys = [*[f"hit@{k}" for k in KS], "in_prompt"]
    x = np.arange(len(keys))
    for i, method in enumerate(METHODS):
        right.bar(x + (i - 1) * 0.27, [summary[method][k] for k in keys], 0.27, label=method)
    right.set_xticks(x, keys)
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    right.set_title(f"planted facts, test split ({summary['questions']} questions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> dict[str, Any]:
    """Run the benchmark, print the tables, write the JSON, MD (and PNG); returns the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.documents", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--seed", type=int, default=data.SEED, help="seed of every generated file and vector")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from quinn.memory.embed import LocalEmbedder

    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    info = machine_info()
    model = embedder or LocalEmbedder()
    args.out.mkdir(parents=True, exist_ok=True)
    step: Callable[[str], None] = lambda what: print(f"[{time.perf_counter() - started:6.1f} s] {what}", flush=True)  # noqa: E731
    report: dict[str, Any] = {
        "benchmark": "documents", "quick": args.quick, "seed": args.seed, "machine": info, "sizes": sizes,
        "embedder": model.model_id,
    }  # fmt: skip

    def keep(part: str, result: Any) -> None:  # each part saved as it ends: a long run cut short keeps them
        report[part] = result
        (args.out / "documents.json").write_text(json.dumps(report, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="quinn-documents-") as tmp:
        workdir = Path(tmp)
        step("(b) search")
        keep("search", search_speed(workdir, sizes["kb_passages"], sizes["users"], sizes["user_files"],
                                    sizes["passages_per_file"], sizes["queries"], args.seed))  # fmt: skip
        step("(c) quality")
        corpus = data.corpus(sites=sizes["sites"], seed=args.seed)
        (workdir / "kb").mkdir()
        measured = quality(model, workdir / "kb", corpus)
        questions = measured.pop("per_question")
        (args.out / "documents-questions.json").write_text(json.dumps(questions) + "\n")  # not committed (large)
        keep("quality", measured)
        step("(a) formats")
        store = MemoryStore(Database.open(str(workdir / "formats.db")), model)
        try:
            keep("formats", format_speed(store, workdir, sizes["files"], sizes["pages"], sizes["min_s"]))
        finally:
            store.close()
    keep("duration_s", round(time.perf_counter() - started, 1))
    text = tables(report)
    print(text)
    (args.out / "documents.md").write_text(text + "\n")
    if args.plot:
        plot(report, args.out / "documents.png")
    return report


if __name__ == "__main__":
    main()
