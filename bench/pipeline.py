"""The whole pipeline through the real lab: throughput, latency per stage, APPEND -> reply, memory tokens.

    python -m bench.pipeline            # the full run (< 10 minutes on 2 cores)
    python -m bench.pipeline --quick    # about a minute: proves the benchmark still runs (tests/bench/test_smoke.py)

Quinn runs as ``quinn run`` runs (``lifecycle.serve`` in a child process, its own event loop, DB and IMAP
threads) against a private Dovecot, the aiosmtpd lab (delivering by IMAP APPEND) and the scripted model, which
answers at once. The load generator and the lab's SMTP server run in this process. Phases:

1. bare lab: per mail, the person's mail is sent and APPENDed, fetched over IMAP, and a reply sent back; no Quinn.
2. burst (IDLE daemon): ``mails`` from ``users`` sent as fast as the lab takes them; throughput = mails /
   (last reply in an inbox - first mail in Quinn's INBOX).
3. paced, IDLE: mails at random gaps (mean ``gap_s``) below capacity; APPEND -> reply-in-inbox per mail.
4. memory tokens: users with 1, 100 and 1,000 stored memories mail Quinn; the memory block of each reply
   prompt (profile + retrieved memories) is counted with Quinn's own estimate (``agent.context.estimate_tokens``).
5. paced, polling: a second daemon with ``imap.idle = false``.

Per-stage timings come from Quinn's own ``Metrics.stage`` (kept raw in the child, ``Metrics.keep_samples``).
Goals (issue 6): >= 20 mails/s; p95 APPEND -> reply <= 1.5 s; Quinn's own work <= 2x the bare lab cost per
mail; memory tokens per reply flat and <= 1,500.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import ROOT, machine_info, require_matplotlib
from bench.pipeline_lab import IMAP_PASSWORD_ENV, LLM_KEY_ENV, BenchDaemon, Mail, MailMaker, TimedSmtpLab, bare_lab
from bench.pipeline_lab import config_text as make_config
from bench.pipeline_report import goals, plot, stage_table, summary, table
from bench.synthetic import Generator
from tests.lab.brain import new_mail
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import REPLY, ScriptedLLM
from tests.lab.mails import plain_model
from tests.lab.smtp import unique_address

RESULTS = ROOT / "bench" / "results"
PROFILE_EVERY = 10  # one stored memory in ten is a profile preference (always in the prompt); the rest episodic


@dataclass(frozen=True)
class Sizes:
    """How much mail each phase sends."""

    mails: int  # burst
    users: int
    paced: int  # per paced phase
    gap_s: float  # mean gap between paced mails
    bare: int
    memory_levels: tuple[int, ...]
    memory_mails: int  # per level
    memories_per_burst_user: int
    warmup: int
    poll_interval_s: float


FULL = Sizes(500, 50, 80, 0.9, 100, (1, 100, 1000), 5, 10, 5, 1.0)
QUICK = Sizes(20, 4, 6, 0.5, 10, (1, 10, 40), 2, 2, 2, 1.0)


def populate(db_path: Path, embedder: Any, plan: dict[str, int], seed: int) -> int:
    """Store ``plan[user]`` generated memories per user with the real model (as extraction would, in bulk)."""
    from quinn.db import Database
    from quinn.memory import MemoryStore, NewMemory

    gen = Generator(seed)
    items = []
    for user, count in plan.items():
        for index, memory in enumerate(gen.memories(count)):
            profile = index % PROFILE_EVERY == 0
            items.append(
                NewMemory(
                    user,
                    memory.text,
                    scope="profile" if profile else "episodic",
                    type="preference" if profile else "fact",
                )
            )
    db = Database.open(str(db_path))
    try:
        store = MemoryStore(db, embedder)
        for start in range(0, len(items), 500):
            store.add_many(items[start : start + 500])
    finally:
        db.close()
    return len(items)


def send_all(lab: TimedSmtpLab, mails: Sequence[Mail], gaps_s: Sequence[float] = ()) -> None:
    """Send each mail through the lab (SMTP, then APPEND into Quinn's INBOX), after its gap if any."""
    for index, mail in enumerate(mails):
        lab.send(mail.sender, mail.to, mail.raw)
        if gaps_s:
            time.sleep(gaps_s[index])


def run_phase(
    lab: TimedSmtpLab,
    maker: MailMaker,
    box: str,
    senders: Sequence[str],
    n: int,
    name: str,
    gaps_s: Sequence[float] = (),
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Send ``n`` mails round-robin from ``senders`` to ``box``; wait for every reply; timings per mail."""
    mails = [maker.make(senders[i % len(senders)], box, name) for i in range(n)]
    began = time.time()
    send_all(lab, mails, gaps_s)
    sent = time.time()
    ids = [m.message_id for m in mails]
    missing = lab.wait_for_replies(ids, timeout_s)
    arrived = [lab.arrived_at[i] for i in ids]
    latencies = [lab.replied_at[i] - lab.arrived_at[i] for i in ids if i in lab.replied_at]
    done = [lab.replied_at[i] for i in ids if i in lab.replied_at]
    first_in, last_in = min(arrived), max(arrived)
    last_out = max(done) if done else time.time()
    return {
        "phase": name,
        "mails": n,
        "senders": len(senders),
        "missing_replies": len(missing),
        "window": [began, last_out],
        "send_rate_per_s": round(n / max(last_in - first_in, 1e-9), 2) if n > 1 else None,
        "send_duration_s": round(sent - began, 3),
        "throughput_per_s": round(len(done) / max(last_out - first_in, 1e-9), 2),
        "drain_s": round(last_out - first_in, 3),
        "latency_s": latencies,
        "message_ids": ids,
    }


def latency_stats(latencies: Sequence[float]) -> dict[str, float]:
    a = np.asarray(latencies)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(float(a.mean()), 3),
    }


def memory_block_tokens(prompt: str, user: str) -> tuple[int, int]:
    """(tokens, memory lines) of the memory block in a reply prompt, counted as Quinn counts them."""
    from quinn.agent.context import estimate_tokens

    tokens = lines = 0
    for header in (
        f"What you know about {user} (their profile and preferences):\n",
        "Memories that may be relevant to this email",
    ):
        at = prompt.find(header)
        if at < 0:
            continue
        body = prompt[prompt.index("\n", at + len(header) - 1) + 1 :].split("\n\n", 1)[0]
        tokens += estimate_tokens(body)
        lines += len(re.findall(r"^- \[memory:\d+\]", body, flags=re.M))
    return tokens, lines


def tokens_by_level(llm: ScriptedLLM, users: dict[int, str]) -> list[dict[str, Any]]:
    """The memory block of every reply prompt sent for each level's user."""
    out = []
    for level, user in users.items():
        prompts = [r.text for r in llm.requests if r.purpose == REPLY and f"<{user}>" in new_mail(r)]
        counted = [memory_block_tokens(p, user) for p in prompts]
        tokens = [t for t, _ in counted]
        out.append(
            {
                "stored_memories": level,
                "replies": len(prompts),
                "tokens": tokens,
                "tokens_mean": round(float(np.mean(tokens)), 1) if tokens else None,
                "tokens_max": max(tokens) if tokens else None,
                "memory_lines_mean": round(float(np.mean([n for _, n in counted])), 1) if counted else None,
            }
        )
    return out


def gaps(rng: random.Random, n: int, mean_s: float) -> list[float]:
    """Random (exponential) gaps, at least a fifth of the mean: mail that comes when it comes, below capacity."""
    return [max(mean_s / 5, rng.expovariate(1 / mean_s)) for _ in range(n)]


def run(args: argparse.Namespace, sizes: Sizes, embedder: Any, tmp: Path) -> dict[str, Any]:
    """All phases; returns the report (without the machine info)."""
    rng = random.Random(args.seed)
    threads = args.embed_threads
    maker = MailMaker(args.seed)
    with Dovecot() as dovecot, ScriptedLLM() as llm:
        llm.responder = plain_model
        lab = TimedSmtpLab(dovecot)
        lab.start()
        try:
            env = {IMAP_PASSWORD_ENV: dovecot.password, LLM_KEY_ENV: "bench-key"}
            print("bare lab ...", flush=True)
            bare = bare_lab(dovecot, lab, maker, unique_address("person"), unique_address("box"), sizes.bare)

            burst_users = [unique_address("burst") for _ in range(sizes.users)]
            level_users = {level: unique_address(f"mem{level}") for level in sizes.memory_levels}
            box = unique_address("quinn")
            db_path = tmp / "idle.db"
            plan = {u: sizes.memories_per_burst_user for u in burst_users}
            plan |= {user: level for level, user in level_users.items()}
            t0 = time.perf_counter()
            stored = populate(db_path, embedder, plan, args.seed)
            populate_s = time.perf_counter() - t0
            print(f"stored {stored} memories in {populate_s:.0f} s", flush=True)

            config = tmp / "idle.toml"
            config.write_text(
                make_config(
                    dovecot=dovecot,
                    smtp=lab,
                    llm_url=llm.openai_base_url,
                    address=box,
                    db_path=db_path,
                    idle=True,
                    poll_interval_s=None,
                )
            )
            daemon = BenchDaemon(config, env, tmp / "idle.log", tmp / "idle-samples.json", threads)
            phases: dict[str, dict[str, Any]] = {}
            try:
                startup_idle = daemon.start()
                warm = [unique_address("warm") for _ in range(sizes.warmup)]
                run_phase(lab, maker, box, warm, sizes.warmup, "warmup")
                print("burst ...", flush=True)
                phases["burst"] = run_phase(lab, maker, box, burst_users, sizes.mails, "burst")
                print(f"  {phases['burst']['throughput_per_s']} mails/s", flush=True)
                time.sleep(1.0)
                print("paced, IDLE ...", flush=True)
                paced_users = [unique_address("paced") for _ in range(max(1, sizes.paced // 8))]
                phases["paced_idle"] = run_phase(
                    lab, maker, box, paced_users, sizes.paced, "paced-idle", gaps(rng, sizes.paced, sizes.gap_s)
                )
                time.sleep(1.0)
                print("memory tokens ...", flush=True)
                for user in level_users.values():
                    run_phase(lab, maker, box, [user], sizes.memory_mails, "memory", gaps(rng, sizes.memory_mails, 0.3))
            finally:
                samples_idle = daemon.finish() if daemon.proc and daemon.proc.poll() is None else []
                daemon.stop()
            tokens = tokens_by_level(llm, level_users)

            print("paced, polling ...", flush=True)
            box2 = unique_address("quinnpoll")
            config2 = tmp / "poll.toml"
            config2.write_text(
                make_config(
                    dovecot=dovecot,
                    smtp=lab,
                    llm_url=llm.openai_base_url,
                    address=box2,
                    db_path=tmp / "poll.db",
                    idle=False,
                    poll_interval_s=sizes.poll_interval_s,
                )
            )
            daemon2 = BenchDaemon(config2, env, tmp / "poll.log", tmp / "poll-samples.json", threads)
            try:
                startup_poll = daemon2.start()
                run_phase(
                    lab, maker, box2, [unique_address("warm") for _ in range(sizes.warmup)], sizes.warmup, "warmup"
                )
                paced_users = [unique_address("polled") for _ in range(max(1, sizes.paced // 8))]
                phases["paced_polling"] = run_phase(
                    lab, maker, box2, paced_users, sizes.paced, "paced-polling", gaps(rng, sizes.paced, sizes.gap_s)
                )
            finally:
                samples_poll = daemon2.finish() if daemon2.proc and daemon2.proc.poll() is None else []
                daemon2.stop()
        finally:
            lab.stop()

    for name, phase in phases.items():
        samples = samples_poll if name == "paced_polling" else samples_idle
        lo, hi = phase["window"]
        phase["stages_ms"] = stage_table([s for s in samples if lo <= s[1] <= hi + 0.5])
        phase["latency"] = latency_stats(phase["latency_s"]) if phase["latency_s"] else None
    bare_ms = {
        k: {
            "p50": round(float(np.percentile(v, 50)) * 1000, 3),
            "p95": round(float(np.percentile(v, 95)) * 1000, 3),
            "mean": round(float(np.mean(v)) * 1000, 3),
        }
        for k, v in bare.items()
    }
    return {
        "sizes": sizes.__dict__ | {"memory_levels": list(sizes.memory_levels)},
        "bare_lab_ms": bare_ms,
        "bare_lab_mails": sizes.bare,
        "startup_s": {"idle": round(startup_idle, 2), "polling": round(startup_poll, 2)},
        "populate": {"memories": stored, "seconds": round(populate_s, 1)},
        "phases": phases,
        "memory_tokens": tokens,
        "config": {
            "idle_poll_interval_s": "default (30)",
            "polling_interval_s": sizes.poll_interval_s,
            "scheduler": "off",
            "domains": "deploy/quinn.example.toml's [[domains]]",
            "token_budget": "default (1200)",
            "llm": "scripted, answers at once",
        },
    }


def time_io_calls(app: Any) -> None:
    """``--profile-io``: time every call Quinn hands to its DB thread and its IMAP thread, as stages named
    ``db:<function>`` and ``imap:<function>`` (they nest inside the pipeline's stages). A diagnosis, not a figure
    to report: the wrapper itself costs a little."""
    from quinn.db import Database

    metrics = app.metrics
    run_db, run_imap = Database.run, app._imap

    def name(fn: Any) -> str:
        return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__)

    async def timed_db(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with metrics.stage(f"db:{name(fn)}"):
            return await run_db(self, fn, *args, **kwargs)

    async def timed_imap(fn: Any, *args: Any, **kwargs: Any) -> Any:
        with metrics.stage(f"imap:{name(fn)}"):
            return await run_imap(fn, *args, **kwargs)

    Database.run = timed_db  # type: ignore[method-assign]
    app._imap = timed_imap


def serve_daemon(config_path: Path, samples_path: Path, embed_threads: int | None) -> int:
    """The child: ``quinn run``'s body with the stage timings kept, written to ``samples_path`` at exit.

    ``embed_threads``: the embedder's CPU threads (``[embeddings] threads``) instead of the config's; None keeps
    the config's (default 1).
    """
    from quinn.app import Quinn
    from quinn.config import load_config
    from quinn.lifecycle import serve
    from quinn.logs import secret_values, setup_logging

    config = load_config(config_path, env=os.environ)
    if embed_threads is not None:
        embeddings = config.embeddings.model_copy(update={"threads": embed_threads})
        config = config.model_copy(update={"embeddings": embeddings})
    redactor = setup_logging(config.log_level, config.log_format, secret_values(config))
    app = Quinn(config)
    app.metrics.keep_samples()
    if os.environ.get("QUINN_BENCH_PROFILE_IO") == "1":
        time_io_calls(app)
    code = serve(app, config_path, redactor)
    samples_path.write_text(json.dumps([list(s) for s in app.metrics.samples or []]))
    return code


def main(argv: Sequence[str] | None = None, *, embedder: Any = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write JSON + MD (+ PNG) into ``--out``; returns the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    parser.add_argument(
        "--embed-threads", type=int, default=None, help="the daemon's [embeddings] threads (default: the config's, 1)"
    )
    parser.add_argument(
        "--profile-io", action="store_true", help="also time each DB and IMAP call in the daemon (diagnosis)"
    )
    parser.add_argument("--name", default="pipeline", help="file name of the results (default pipeline)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the child process (BenchDaemon)
    parser.add_argument("--samples", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        raise SystemExit(serve_daemon(args.serve, args.samples, args.embed_threads))
    require_matplotlib(args.plot)
    if args.profile_io:
        os.environ["QUINN_BENCH_PROFILE_IO"] = "1"  # read by the daemon child
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if embedder is None:
        from quinn.memory.embed import LocalEmbedder

        embedder = LocalEmbedder()
    sizes = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    info = machine_info()
    with tempfile.TemporaryDirectory(prefix="quinn-bench-pipeline-") as tmp:
        os.chmod(tmp, 0o755)
        results = run(args, sizes, embedder, Path(tmp))
    report = {
        "benchmark": "pipeline",
        "quick": args.quick,
        "embed_threads": args.embed_threads,
        "machine": info,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        **results,
    }
    report["goals"] = goals(report)
    report["summary"] = summary(report)
    report["duration_s"] = round(time.perf_counter() - started, 1)
    text = table(report)
    print(text)
    print(f"total {report['duration_s']:.0f} s")
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(text + "\n")
    if args.plot:
        plot(report, args.out / f"{args.name}.png")
    return report


if __name__ == "__main__":
    main()
