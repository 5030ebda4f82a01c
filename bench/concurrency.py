"""Mails in flight (issue 16): a burst answered with 1 (the old engine), 2, 4 and 8 mails in flight, side by side.

    python -m bench.concurrency            # the full run (~6 minutes on 2 cores)
    python -m bench.concurrency --quick    # under a minute: proves the benchmark still runs

Quinn runs as ``quinn run`` runs (bench.pipeline's child process) against a private Dovecot, the aiosmtpd lab and
the scripted model, which here takes as long as a model does: ``reply_s`` per reply and ``extract_s`` per
extraction (the defaults stand for a hosted model or a small local one on a GPU; a 0.5B model on these 2 cores
takes 30-90 s, where the gain would be the same in kind). A burst of ``mails`` from ``users`` senders (each
sends ``mails / users``, in separate threads) is sent at once; figures: drain time, throughput, APPEND -> reply
latency. Mails of one sender go one after another whatever the limit, so the gain is bounded by the number of
senders. The scripted model serves requests in parallel, as a hosted API does; a local llama.cpp server with one
slot would queue them (see bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.machine import ROOT, machine_info, require_matplotlib
from bench.pipeline import latency_stats, run_phase
from bench.pipeline_lab import IMAP_PASSWORD_ENV, LLM_KEY_ENV, BenchDaemon, MailMaker, TimedSmtpLab
from bench.pipeline_lab import config_text as make_config
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import Delay, Json, RecordedRequest, ScriptedLLM
from tests.lab.mails import plain_model
from tests.lab.smtp import unique_address

RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Sizes:
    mails: int
    users: int
    limits: tuple[int, ...]
    reply_s: float
    extract_s: float


FULL = Sizes(mails=48, users=16, limits=(1, 2, 4, 8), reply_s=2.0, extract_s=1.0)
QUICK = Sizes(mails=8, users=4, limits=(1, 4), reply_s=0.3, extract_s=0.1)


def slow_model(sizes: Sizes) -> Any:
    """The lab's plain model, answering after as long as a model would."""

    def answer(request: RecordedRequest) -> Any:
        reply = plain_model(request)
        return Delay(sizes.extract_s if isinstance(reply, Json) else sizes.reply_s, reply)

    return answer


def run_limit(limit: int, sizes: Sizes, dovecot: Dovecot, lab: TimedSmtpLab, llm: ScriptedLLM, maker: MailMaker,
              tmp: Path) -> dict[str, Any]:  # fmt: skip
    """One daemon with ``mails_in_flight = limit``, one burst; the phase's figures."""
    box = unique_address(f"quinn{limit}")
    config = tmp / f"in-flight-{limit}.toml"
    text = make_config(dovecot=dovecot, smtp=lab, llm_url=llm.openai_base_url, address=box,
                       db_path=tmp / f"in-flight-{limit}.db", idle=True, poll_interval_s=None)  # fmt: skip
    config.write_text(text + f"\n[service]\nmails_in_flight = {limit}\n")
    env = {IMAP_PASSWORD_ENV: dovecot.password, LLM_KEY_ENV: "bench-key"}
    daemon = BenchDaemon(config, env, tmp / f"in-flight-{limit}.log", tmp / f"in-flight-{limit}-samples.json")
    try:
        daemon.start()
        run_phase(lab, maker, box, [unique_address("warm")], 1, "warmup")
        senders = [unique_address("burst") for _ in range(sizes.users)]
        phase = run_phase(lab, maker, box, senders, sizes.mails, f"burst-{limit}", timeout_s=900)
        daemon.finish()
    finally:
        daemon.stop()
    return {
        "mails_in_flight": limit,
        "mails": phase["mails"],
        "senders": phase["senders"],
        "missing_replies": phase["missing_replies"],
        "drain_s": phase["drain_s"],
        "throughput_per_s": phase["throughput_per_s"],
        "latency": latency_stats(phase["latency_s"]) if phase["latency_s"] else None,
    }


def markdown(report: dict[str, Any]) -> str:
    s = report["sizes"]
    lines = [
        "# Mails in flight: one burst, answered with "
        + ", ".join(str(r["mails_in_flight"]) for r in report["runs"])
        + " mails at once (1: the old engine)",
        "",
        f"{s['mails']} mails from {s['users']} senders sent at once; the scripted model takes {s['reply_s']} s "
        f"per reply and {s['extract_s']} s per extraction. Quinn as `quinn run`, Dovecot and the SMTP lab on "
        f"127.0.0.1. {report['machine'].get('cores', '?')} cores.",
        "",
        "| mails in flight | drain (s) | mails/s | speed-up | latency p50 (s) | p95 (s) | max (s) | missing |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = report["runs"][0]["drain_s"]
    for run in report["runs"]:
        lat = run["latency"] or {}
        lines.append(
            f"| {run['mails_in_flight']} | {run['drain_s']:.1f} | {run['throughput_per_s']:.2f} | "
            f"{base / run['drain_s']:.2f}x | {lat.get('p50', float('nan')):.1f} | {lat.get('p95', float('nan')):.1f}"
            f" | {lat.get('max', float('nan')):.1f} | {run['missing_replies']} |"
        )
    lines += ["", f"Whole run {report['duration_s']} s; load average at the end {report['load_average_at_end']}.", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    limits = [str(r["mails_in_flight"]) for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(limits, [r["throughput_per_s"] for r in runs], color="#4c72b0")
    left.set_xlabel("mails in flight")
    left.set_ylabel("mails / s")
    left.set_title("throughput")
    right.bar(limits, [(r["latency"] or {}).get("p95", 0) for r in runs], color="#dd8452", label="p95")
    right.bar(limits, [(r["latency"] or {}).get("p50", 0) for r in runs], color="#55a868", label="p50")
    right.set_xlabel("mails in flight")
    right.set_ylabel("seconds")
    right.set_title("APPEND -> reply")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG (no matplotlib)")
    args = parser.parse_args(argv)
    require_matplotlib(args.plot)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    info = machine_info()
    runs = []
    with tempfile.TemporaryDirectory(prefix="quinn-bench-concurrency-") as tmp, Dovecot() as dovecot, \
            ScriptedLLM() as llm:  # fmt: skip
        os.chmod(tmp, 0o755)
        llm.responder = slow_model(sizes)
        lab = TimedSmtpLab(dovecot)
        lab.start()
        try:
            maker = MailMaker(args.seed)
            for limit in sizes.limits:
                print(f"{limit} in flight ...", flush=True)
                runs.append(run_limit(limit, sizes, dovecot, lab, llm, maker, Path(tmp)))
                print(f"  {runs[-1]['throughput_per_s']} mails/s, drained in {runs[-1]['drain_s']} s", flush=True)
        finally:
            lab.stop()
    report = {
        "benchmark": "concurrency",
        "quick": args.quick,
        "machine": info,
        "sizes": sizes.__dict__ | {"limits": list(sizes.limits)},
        "runs": runs,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "duration_s": round(time.perf_counter() - started, 1),
    }
    name = "concurrency-quick" if args.quick else "concurrency"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / f"{name}.md").write_text(markdown(report))
    if args.plot:
        plot(report, args.out / f"{name}.png")
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
