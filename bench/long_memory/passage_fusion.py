"""How the passage search fuses its two legs, judged on real conversations (issue 32).

``python -m bench.long_memory.passage_fusion --db WORKDIR4/quinn.db --db WORKDIR5/quinn.db --db WORKDIR6/quinn.db``
takes the databases of the long-memory benchmark's three real parts (``--part 4`` to ``6 --workdir ...``: the
people's mail as ``quinn import`` stored it; no model is called here) and asks each person every FriendsQA
question answerable from their own lines that reached their history (``real_friends.candidates``: ~100 a
person, not only the 12 the benchmark asks), in the benchmark's mail form. Per fusion: the share of questions
whose answer (the question's evidence patterns) is in a passage among the first k. With ``--generated``, the
three generated parts' databases (``--part 1`` to ``3``), their own questions, are reported beside (never what a
choice is made on).

Fusions, one run: **shipped** (``passages.search_passages`` as a reply calls it); **convex** (0.8 × cosine + 0.2
× BM25 coverage: the passages' fusion before this change); **BM25** (the lexical leg alone); **vector** and
**vector centred** (cosine from the origin, and from the mean of the person's vectors); **convex centred**;
**RRF raw** (rank fusion with the plain cosine). FriendsQA is fetched beforehand (``real_friends``); nothing
here downloads.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.long_memory import data as generated_data
from bench.long_memory import real_friends as friends

KS = (3, 5, 10, 20)
BEFORE_WEIGHT = 0.8  # the convex fusion's vector share before this change (search.VECTOR_WEIGHT)
Legs = tuple[dict[int, float], dict[int, float], dict[int, float]]  # lexical, raw cosine, centred cosine


def _order(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda pid: (-scores[pid], -pid))


def _rrf(*legs: dict[int, float], top: int = 50) -> list[int]:
    """Quinn's rank fusion (``query.rrf``, k = 60) of each leg's ``top`` best."""
    from quinn.memory.query import rrf

    return _order(rrf([_order(leg)[:top] for leg in legs]))


def _convex(lexical: dict[int, float], cosine: dict[int, float]) -> list[int]:
    fused = {pid: BEFORE_WEIGHT * max(sim, 0.0) for pid, sim in cosine.items()}
    for pid, coverage in lexical.items():
        fused[pid] = fused.get(pid, 0.0) + (1.0 - BEFORE_WEIGHT) * coverage
    return _order(fused)


FUSIONS: dict[str, Callable[[Legs], list[int]]] = {
    "convex (before)": lambda legs: _convex(legs[0], legs[1]),
    "BM25": lambda legs: _order(legs[0]),
    "vector": lambda legs: _order(legs[1]),
    "vector centred": lambda legs: _order(legs[2]),
    "convex centred": lambda legs: _convex(legs[0], legs[2]),
    "RRF raw": lambda legs: _rrf(legs[0], legs[1]),
}


def legs(store: Any, user: str, query: str) -> Legs:
    """The lexical leg as the search computes it, and both cosines of every one of the person's passages."""
    from quinn.memory import passages
    from quinn.memory.search import CHUNK_WEIGHT_DECAY, Centre, query_chunks

    chunks = query_chunks(query)
    owners = [user, passages.KNOWLEDGE_OWNER]
    where, params = passages.passage_filter(user, (), (), passages.retracted_messages(store.db, user, ()), False, True)
    lexical = passages._lexical_scores(store.db, where, params, " ".join(chunks), owners)
    vectors = np.asarray(store.embedder.embed(chunks), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    ids, matrix = store.passage_cache.vectors(store.db, user, store.embedder.model_id, store.embedder.dim)
    raw, centred = Centre(matrix).similarities(matrix, vectors)
    decay = CHUNK_WEIGHT_DECAY ** np.arange(len(vectors), dtype=np.float32)
    keys = [int(i) for i in ids]
    return (
        lexical,
        dict(zip(keys, (raw * decay).max(axis=1), strict=True)),
        dict(zip(keys, (centred * decay).max(axis=1), strict=True)),
    )


def ask(db: Path, first: str, questions: list[tuple[str, tuple[str, ...]]]) -> list[dict[str, int | None]]:
    """Per question whose answer is in one of the person's passages: the rank of the first such passage by
    each fusion (None: not among the candidates)."""
    from quinn.memory import MemoryStore, search_passages

    if not db.is_file():  # opening it would create an empty store
        raise SystemExit(f"--db {db}: no such file; give the quinn.db of a part run with --workdir")
    store = MemoryStore.open(str(db))
    try:
        found = store.db.query("SELECT DISTINCT user_id FROM passages WHERE user_id LIKE ?", [first.lower() + "-%"])
        if not found:
            raise SystemExit(f"--db {db}: no passages of a person called {first}; give the parts in order")
        user = found[0][0]
        text = {int(r[0]): r[1] for r in store.db.query("SELECT id, content FROM passages WHERE user_id = ?", [user])}
        rows = []
        for number, (question, evidence) in enumerate(questions, start=1):
            patterns = [re.compile(p, re.IGNORECASE) for p in evidence]
            holds = {pid for pid, t in text.items() if any(p.search(t) for p in patterns)}
            if not holds:
                continue  # in a file's text or a memory only: not what this measures
            body = f"Hi Quinn,\n\n{question} Please keep it short.\n\nThanks,\n{first}"
            query = f"Quick question #{number % 13 + 1}\n{body}"  # the benchmark's mail form
            scored = legs(store, user, query)
            row: dict[str, int | None] = {}
            shipped = [h.passage.id for h in search_passages(store, user, query, k=100)]
            for name, order in [("shipped", shipped), *((n, f(scored)) for n, f in FUSIONS.items())]:
                row[name] = next((i for i, pid in enumerate(order, start=1) if pid in holds), None)
            rows.append(row)
        return rows
    finally:
        store.close()


def summary(rows: list[dict[str, int | None]]) -> dict[str, dict[str, float]]:
    names = ["shipped", *FUSIONS]
    return {
        name: {f"hit@{k}": round(sum(1 for r in rows if (r[name] or 10**9) <= k) / max(len(rows), 1), 3) for k in KS}
        for name in names
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.long_memory.passage_fusion", description=__doc__.splitlines()[0])
    p.add_argument("--db", type=Path, action="append", required=True, help="a real part's quinn.db, parts 4, 5, 6")
    p.add_argument("--generated", type=Path, action="append", default=[], help="a generated part's quinn.db, 1-3")
    p.add_argument("--real", type=Path, default=Path("bench/data/long_memory_real.json"))
    p.add_argument("--mirror", type=Path, default=friends.MIRROR)
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--name", default="passage_fusion")
    args = p.parse_args(argv)
    if not args.real.is_file():
        raise SystemExit(f"--real {args.real}: no such file; build it with python -m bench.long_memory.real_friends")
    raw: list[dict[str, Any]] = []
    for path in friends.FILES:
        raw += json.loads(friends.read_source(args.mirror, friends.REPO, path))["data"]
    scenes = friends.scenes_from(raw)
    df = friends.doc_freq(scenes)
    lines = {(s.title, line.uid): line.text for s in scenes for line in s.lines}
    people = json.loads(args.real.read_text())["people"]
    real: list[dict[str, int | None]] = []
    for db, person in zip(args.db, people, strict=False):
        own = "\n".join(friends._own(m["body"], person["first"]) for m in person["mails"])
        pool = friends.candidates(scenes, f"{person['first']} {person['last']}", df)
        asked = [(friends.ASK + q.text, q.evidence) for q in pool if any(lines[q.scene, u] in own for u in q.uids)]
        real += ask(db, person["first"], asked)
    made: list[dict[str, int | None]] = []
    for db, generated in zip(args.generated, generated_data.build(), strict=False):
        made += ask(db, generated.first, [(q.text, q.evidence) for q in generated.questions if q.evidence])
    result = {"benchmark": "passage_fusion", "real": {"questions": len(real), "by_fusion": summary(real)},
              "generated": {"questions": len(made), "by_fusion": summary(made)}}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = ["# Passage search fusions on real conversations (issue 32)", ""]
    for label, part in (("real people (FriendsQA)", result["real"]), ("generated people", result["generated"])):
        if not part["questions"]:
            continue
        head = "| fusion | " + " | ".join(f"hit@{k}" for k in KS) + " |"
        md += [f"## {label}: {part['questions']} questions", "", head, "|---|" + "---:|" * len(KS)]
        md += [f"| {n} | " + " | ".join(f"{v:.3f}" for v in s.values()) + " |" for n, s in part["by_fusion"].items()]
        md.append("")
    (args.out / f"{args.name}.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
