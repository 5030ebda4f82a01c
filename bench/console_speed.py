"""Console speed (issue 20): every console page's server time with 1,000 users and 100k memories.

A libSQL file is filled through the store's own schema: memories through ``MemoryStore.add_many`` (versions, FTS
and the owner token as the daemon writes them; no embedder, so no vectors: the console never embeds on a read,
and a search without vectors is full-text, as on a console without the model), the rest by bulk INSERTs into the
tables the daemon writes (sessions, messages, the ledger, token usage, reply traces, job runs, the audit log).
Filling is not what is measured. Then every GET page of the console is requested in-process through Starlette's
TestClient (ASGI, no socket), logged in, ``--rounds`` times after one warm-up; the time is the request's, end to
end in the process: routing, the guard, the queries on the DB thread, the template. Goal: p95 ≤ 100 ms per page.

    python -m bench.console_speed                 # 1,000 users x 100 memories; ~2-4 min to fill on 2 cores
    python -m bench.console_speed --quick --out /tmp/b   # 20 users x 20 memories, seconds
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.machine import ROOT, machine_info, percentile_ms

GOAL_MS = 100.0
MAIL_PER_USER = 5
STATES = ["replied"] * 16 + ["failed", "quarantined", "deferred", "ignored"]
TOPICS = ["flat", "rent", "cello", "orchestra", "garden", "holiday", "lisbon", "porto", "train", "doctor", "sister",
          "birthday", "project", "deadline", "invoice", "marathon", "recipe", "bakery", "school", "piano"]  # fmt: skip
PASSWORD = "bench password"


def user_name(i: int) -> str:
    return f"user{i:04d}@bench.example"


def fill(path: Path, users: int, per_user: int, seed: int) -> dict[str, Any]:
    """The database: ``users`` people with ``per_user`` memories each, their mail, usage, traces, job runs."""
    from quinn.agent import reply_trace
    from quinn.agent.reply_trace import ShownMemory, ShownPassage, Trace
    from quinn.clock import iso
    from quinn.db import Database
    from quinn.memory.models import NewMemory
    from quinn.memory.store import MemoryStore
    from quinn.scheduler.jobs import JOBS

    rng = random.Random(seed)
    store = MemoryStore(Database.open(str(path)), None)
    now = datetime.now(UTC).replace(microsecond=0)
    started = time.perf_counter()
    batch: list[NewMemory] = []
    first_ids: dict[str, list[int]] = {}

    def flush() -> None:
        ids = store.add_many(batch)
        for item, memory_id in zip(batch, ids, strict=True):
            first_ids.setdefault(str(item.user_id), []).append(memory_id)
        batch.clear()

    for u in range(users):
        for m in range(per_user):
            words = rng.sample(TOPICS, 3)
            profile = m % 5 == 0
            batch.append(NewMemory(
                user_id=user_name(u), content=f"{user_name(u)[:8]} mentioned the {words[0]} and the {words[1]}, "
                f"about {words[2]} (note {m}).", scope="profile" if profile else "episodic",
                type="preference" if profile else "fact", domain=None if profile else rng.choice(["home", "work"]),
            ))  # fmt: skip
            if len(batch) >= 2000:
                flush()
    if batch:
        flush()
    memories_s = time.perf_counter() - started
    db = store.db
    with db.transaction() as tx:
        uid = 0
        for u in range(users):
            user = user_name(u)
            session = f"s-{u}"
            at = iso(now - timedelta(days=rng.randint(0, 30)))
            tx.execute("INSERT INTO sessions (id, user_id, subject, created_at, last_message_at)"
                       " VALUES (?, ?, ?, ?, ?)", (session, user, "Hello", at, at))  # fmt: skip
            for k in range(MAIL_PER_USER):
                uid += 1
                mid = f"<m{uid}@bench.example>"
                when = iso(now - timedelta(hours=rng.randint(0, 24 * 30)))
                state = rng.choice(STATES)
                tx.execute("INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr,"
                           " sent_at, body, created_at) VALUES (?, ?, 'in', ?, ?, ?, ?, ?, ?)",
                           (session, user, mid, f"About the {rng.choice(TOPICS)} ({k})", user, when,
                            "Hello Quinn, a question.", when))  # fmt: skip
                tx.execute("INSERT INTO mail_state (folder, uidvalidity, uid, message_id, state, reason, user_id,"
                           " session_id, received_at, updated_at, moved) VALUES ('INBOX', 1, ?, ?, ?, ?, ?, ?, ?, ?,"
                           " 1)", (uid, mid, state, "handle" if state == "replied" else "smtp 550", user, session,
                                   when, when))  # fmt: skip
                if state != "replied":
                    continue
                tx.execute("INSERT INTO llm_usage (at, model, purpose, user_id, message_id, input_tokens,"
                           " output_tokens, calls) VALUES (?, 'openai/gpt-bench', 'reply', ?, ?, ?, ?, 1)",
                           (when, user, mid, rng.randint(800, 3000), rng.randint(50, 400)))  # fmt: skip
                shown = rng.sample(first_ids[user], min(5, len(first_ids[user])))
                trace = Trace(memories=tuple(ShownMemory(i, "search", 0.7, 0.6) for i in shown),
                              passages=(ShownPassage(1, 0.4, 0.3),))  # fmt: skip
                tx.execute("INSERT INTO reply_traces (at, user_id, message_id, template, prompt_version, trace,"
                           " retrieved, gate, learnt) VALUES (?, ?, ?, 'reply', 'reply@bench', ?, ?, ?, ?)",
                           (when, user, mid, trace.to_json(), trace.retrieved,
                            rng.choice([reply_trace.PASSED, reply_trace.REJECTED]), rng.randint(0, 3)))  # fmt: skip
        for spec in JOBS:
            for r in range(60):
                at = iso(now - timedelta(hours=r * 6))
                tx.execute("INSERT INTO job_runs (job, started_at, finished_at, status, counts) VALUES (?, ?, ?, 'ok',"
                           " ?)", (spec.name, at, at, json.dumps({"processed": 4, "promoted": 1})))  # fmt: skip
        for a in range(1000):
            tx.execute("INSERT INTO audit_log (at, actor, action, object, user_id, detail) VALUES (?, 'root',"
                       " 'edit memory', ?, ?, 'bench')", (iso(now - timedelta(minutes=a)), f"memory {a + 1}",
                                                         user_name(a % users)))  # fmt: skip
    from quinn.agent import proposals
    from quinn.agent.prompts import PromptStore

    _version, text = PromptStore(None).text_of("reply")
    proposals.add(db, "reply", "reply@bench", text.replace("Quinn", "Quinn, briefly"), "shorter replies",
                  {"conversations": 12, "suggestions": ["Be brief."]}, now)  # fmt: skip
    db.query("PRAGMA wal_checkpoint(TRUNCATE)")
    tables = ("memories", "messages", "mail_state", "llm_usage", "reply_traces", "job_runs", "audit_log")
    counts = {t: int(db.query_value(f"SELECT count(*) FROM {t}") or 0) for t in tables}
    store.close()
    return {"fill_s": round(time.perf_counter() - started, 1), "memories_s": round(memories_s, 1), "rows": counts}


def pages(users: int, rng: random.Random, db: Any) -> list[tuple[str, str]]:
    """(name, path) of every GET page, with real ids from the filled database."""
    someone = user_name(rng.randrange(users))
    memory = int(db.query_value("SELECT id FROM memories WHERE user_id = ? LIMIT 1", (someone,)))
    trace = int(db.query_value("SELECT id FROM reply_traces ORDER BY id DESC LIMIT 1"))
    proposal = int(db.query_value("SELECT id FROM prompt_proposals ORDER BY id DESC LIMIT 1"))
    return [
        ("people", "/people"),
        ("people search", "/people?q=user00"),
        ("person", f"/people/{someone}"),
        ("person search", f"/people/{someone}?q=cello+orchestra"),
        ("person all versions", f"/people/{someone}?all=1"),
        ("memory", f"/memories/{memory}"),
        ("mail", "/mail"),
        ("mail failed", "/mail?state=failed"),
        ("mail of a person", f"/mail?user={someone}"),
        ("why", f"/replies/{trace}"),
        ("jobs and health", "/jobs"),
        ("audit", "/audit"),
        ("prompts", "/prompts"),
        ("prompt reply", "/prompts/reply"),
        ("prompt diff", "/prompts/reply/diff"),
        ("proposals", "/proposals"),
        ("proposal", f"/proposals/{proposal}"),
    ]


def measure(path: Path, users: int, rounds: int, seed: int) -> list[dict[str, Any]]:
    """Each page ``rounds`` times after one warm-up, through the console's app in-process."""
    from starlette.testclient import TestClient

    from quinn.agent.usage import Price
    from quinn.config import ConsoleConfig
    from quinn.console.app import Console
    from quinn.console.auth import Admin, PasswordHash, hash_password
    from quinn.console.routes import build_app
    from quinn.db import Database
    from quinn.memory.store import MemoryStore

    store = MemoryStore(Database.open(str(path)), None)
    try:
        admin = Admin("root", "admin", PasswordHash.parse(hash_password(PASSWORD, n=2**14, r=8, p=1), owner="root"))
        prices = {"openai/gpt-bench": Price(0.40, 1.60)}  # People and a person price their month's tokens
        app = build_app(Console(ConsoleConfig(), store, admins={"root": admin}, prices=prices))
        results = []
        with TestClient(app, base_url="http://127.0.0.1") as client:
            login = client.get("/login").text
            csrf = login.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            client.post("/login", data={"csrf": csrf, "name": "root", "password": PASSWORD})
            for name, url in pages(users, random.Random(seed), store.db):
                if client.get(url).status_code != 200:  # the warm-up, and a page that works at all
                    raise RuntimeError(f"{url} answered {client.get(url).status_code}")
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    response = client.get(url)
                    times.append(time.perf_counter() - t0)
                    assert response.status_code == 200
                results.append({"page": name, "path": url, "p50_ms": percentile_ms(times, 50),
                                "p95_ms": percentile_ms(times, 95), "max_ms": round(max(times) * 1000, 1),
                                "bytes": len(response.content),
                                "meets_goal": percentile_ms(times, 95) <= GOAL_MS})  # fmt: skip
        return results
    finally:
        store.close()


def table(result: dict[str, Any]) -> str:
    lines = [f"Console pages, {result['users']:,} users x {result['memories_per_user']} memories "
             f"({result['fill']['rows']['memories']:,} memory rows), {result['rounds']} requests each, "
             f"goal p95 <= {GOAL_MS:.0f} ms.", "",
             "| page | path | p50 ms | p95 ms | max ms | KiB | goal |",
             "|---|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in result["pages"]:
        lines.append(f"| {r['page']} | `{r['path']}` | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_ms']:.1f} "
                     f"| {r['bytes'] / 1024:.0f} | {'met' if r['meets_goal'] else 'MISSED'} |")  # fmt: skip
    m = result["machine"]
    lines += ["", f"Filled in {result['fill']['fill_s']} s (memories {result['fill']['memories_s']} s); rows: "
              + ", ".join(f"{k} {v:,}" for k, v in result["fill"]["rows"].items()) + ".",
              f"Machine: {m.get('cpu')}, {m.get('cores')} cores, load average "
              f"{m.get('load_average_1_5_15')}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--memories-per-user", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20, help="requests per page after the warm-up")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="20 users x 20 memories, 5 rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if args.quick:
        args.users, args.memories_per_user, args.rounds = 20, 20, 5
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "console.db"
        filled = fill(path, args.users, args.memories_per_user, args.seed)
        timed = measure(path, args.users, args.rounds, args.seed)
    result = {"bench": "console_speed", "users": args.users, "memories_per_user": args.memories_per_user,
              "rounds": args.rounds, "goal_p95_ms": GOAL_MS, "fill": filled, "pages": timed,
              "machine": machine_info()}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    name = "console_speed" + ("-quick" if args.quick else "")
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / f"{name}.md").write_text(table(result), encoding="utf-8")
    sys.stdout.write(table(result))
    return result


if __name__ == "__main__":
    main()
