"""Figures, goals, the Markdown table and the plot of bench/pipeline.py (pure: the report dict in, text out)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# The stages issue 6 names, in the order a mail meets them, then the wider ones Quinn already timed.
STAGES = ("fetch", "parse", "thread", "retrieve", "render", "llm", "send", "mark")
WIDER = ("reply", "extract", "mail")
LAB_BOUND = ("fetch", "send", "mark")  # stages that mostly wait on round trips to Dovecot and the SMTP lab
GOAL_THROUGHPUT_PER_S = 20.0
GOAL_P95_S = 1.5
GOAL_OWN_RATIO = 2.0
GOAL_TOKENS = 1500
FLAT_RATIO = 1.25  # "flat": the block at the largest store at most this much above the one at 100 memories
PHASES = (("burst", "burst (IDLE)"), ("paced_idle", "paced, IDLE"), ("paced_polling", "paced, polling"))


def stage_table(samples: Sequence[Sequence[Any]]) -> dict[str, dict[str, float]]:
    """Per stage: count, p50, p95 and mean in milliseconds, from ``[stage, started_at_s, duration_s]`` rows."""
    by_stage: dict[str, list[float]] = defaultdict(list)
    for stage, _started, duration in samples:
        by_stage[stage].append(duration)
    out = {}
    for stage in (*STAGES, *WIDER, *sorted(set(by_stage) - set(STAGES) - set(WIDER))):
        values = np.asarray(by_stage.get(stage, []))
        if values.size:
            out[stage] = {
                "count": int(values.size),
                "p50": _ms(np.percentile(values, 50)),
                "p95": _ms(np.percentile(values, 95)),
                "mean": _ms(values.mean()),
            }
    return out


def _ms(seconds: float) -> float:
    return round(float(seconds) * 1000.0, 3)


def own_work(report: dict[str, Any]) -> dict[str, float]:
    """Quinn's own work per mail in the burst: the wall time per mail minus the bare lab's cost per mail."""
    burst = report["phases"]["burst"]
    per_mail_ms = burst["drain_s"] * 1000.0 / burst["mails"]
    bare_ms = report["bare_lab_ms"]["total"]["mean"]
    own_ms = per_mail_ms - bare_ms
    stages = burst["stages_ms"]
    # Inside Quinn's own handling: the stages that wait on the lab's servers, and everything else (CPU, DB).
    io_ms = sum(stages[s]["mean"] for s in LAB_BOUND if s in stages)
    handle_ms = stages["mail"]["mean"] if "mail" in stages else float("nan")
    return {
        "handle_mean_ms": round(handle_ms, 2),
        "lab_bound_stages_mean_ms": round(io_ms, 2),
        "rest_of_handling_mean_ms": round(handle_ms - io_ms, 2),
        "wall_per_mail_ms": round(per_mail_ms, 2),
        "bare_lab_per_mail_ms": round(bare_ms, 2),
        "own_per_mail_ms": round(own_ms, 2),
        "ratio": round(own_ms / bare_ms, 2),
    }


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of issue 6 with the measured figure and whether it was met."""
    phases = report["phases"]
    out = []
    rate = phases["burst"]["throughput_per_s"]
    out.append(
        {
            "goal": f"throughput >= {GOAL_THROUGHPUT_PER_S:g} mails/s",
            "measured": f"{rate:g} mails/s",
            "met": rate >= GOAL_THROUGHPUT_PER_S,
        }
    )
    for key, label in (("paced_idle", "IDLE"), ("paced_polling", "polling")):
        p95 = phases[key]["latency"]["p95"] if phases[key]["latency"] else float("inf")
        out.append(
            {
                "goal": f"p95 APPEND -> reply <= {GOAL_P95_S:g} s ({label})",
                "measured": f"{p95:.3f} s",
                "met": p95 <= GOAL_P95_S,
            }
        )
    own = own_work(report)
    out.append(
        {
            "goal": f"Quinn's own work <= {GOAL_OWN_RATIO:g}x the bare lab per mail",
            "measured": f"{own['own_per_mail_ms']:.1f} ms vs {own['bare_lab_per_mail_ms']:.1f} ms "
            f"= {own['ratio']:.2f}x",
            "met": own["ratio"] <= GOAL_OWN_RATIO,
        }
    )
    levels = [t for t in report["memory_tokens"] if t["tokens_max"] is not None]
    worst = max((t["tokens_max"] for t in levels), default=0)
    big = [t for t in levels if t["stored_memories"] >= 100] or levels
    flat = big[-1]["tokens_mean"] / max(big[0]["tokens_mean"], 1) if big else float("inf")
    out.append(
        {
            "goal": f"memory tokens per reply flat and <= {GOAL_TOKENS:,}",
            "measured": f"max {worst:,}; {big[-1]['stored_memories']:,} vs {big[0]['stored_memories']:,} "
            f"memories: {flat:.2f}x"
            if big
            else "no replies",
            "met": worst <= GOAL_TOKENS and flat <= FLAT_RATIO,
        }
    )
    missing = sum(p["missing_replies"] for p in phases.values())
    out.append({"goal": "every mail answered", "measured": f"{missing} replies missing", "met": missing == 0})
    return out


def summary(report: dict[str, Any]) -> str:
    """One paragraph with the headline figures."""
    p = report["phases"]
    own = own_work(report)
    levels = [t for t in report["memory_tokens"] if t["tokens_mean"] is not None]
    tokens = "/".join(f"{t['tokens_mean']:,.0f}" for t in levels)
    stored = "/".join(f"{t['stored_memories']:,}" for t in levels)
    met = sum(g["met"] for g in report["goals"])
    return (
        f"{p['burst']['mails']} mails from {p['burst']['senders']} users through real Dovecot and aiosmtpd "
        f"with an instant scripted model: {p['burst']['throughput_per_s']:g} mails/s sustained; APPEND -> "
        f"reply-in-inbox p95 {p['paced_idle']['latency']['p95']:.2f} s with IDLE and "
        f"{p['paced_polling']['latency']['p95']:.2f} s polling every {report['sizes']['poll_interval_s']:g} s; "
        f"Quinn's own work {own['own_per_mail_ms']:.0f} ms per mail against {own['bare_lab_per_mail_ms']:.0f} ms "
        f"for the bare lab ({own['ratio']:.1f}x); memory block in the reply prompt {tokens} tokens at {stored} "
        "stored memories per user. "
        f"{met} of {len(report['goals'])} goals met."
    )


def table(report: dict[str, Any]) -> str:
    """The Markdown tables of the report."""
    lines = ["| goal | measured | |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {g['measured']} | {'met' if g['met'] else 'MISSED'} |" for g in report["goals"]]
    phases = [(k, label) for k, label in PHASES if k in report["phases"]]
    lines += [
        "",
        "| stage (ms) | " + " | ".join(f"{label} p50 | p95" for _, label in phases) + " |",
        "|---|" + "---:|---:|" * len(phases),
    ]
    for stage in (*STAGES, *WIDER):
        cells = []
        for key, _ in phases:
            s = report["phases"][key]["stages_ms"].get(stage)
            cells += [f"{s['p50']:.2f}", f"{s['p95']:.2f}"] if s else ["-", "-"]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| phase | mails | senders | mails/s | APPEND -> reply p50 | p95 | max | missing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in phases:
        ph = report["phases"][key]
        lat = ph["latency"] or {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
        lines.append(
            f"| {label} | {ph['mails']} | {ph['senders']} | {ph['throughput_per_s']:g} | {lat['p50']:.3f} s "
            f"| {lat['p95']:.3f} s | {lat['max']:.3f} s | {ph['missing_replies']} |"
        )
    bare = report["bare_lab_ms"]
    lines += [
        "",
        "| bare lab, per mail (ms) | SMTP + APPEND in | IMAP fetch | SMTP + APPEND reply | total |",
        "|---|---:|---:|---:|---:|",
    ]
    for stat in ("p50", "p95", "mean"):
        lines.append(
            f"| {stat} | " + " | ".join(f"{bare[k][stat]:.2f}" for k in ("append", "fetch", "send", "total")) + " |"
        )
    own = own_work(report)
    lines += [
        "",
        f"Burst: {own['wall_per_mail_ms']:.1f} ms of wall time per mail, of which the bare lab "
        f"{own['bare_lab_per_mail_ms']:.1f} ms: Quinn's own work {own['own_per_mail_ms']:.1f} ms "
        f"({own['ratio']:.2f}x). Handling one mail took {own['handle_mean_ms']:.1f} ms on average, of which "
        f"{own['lab_bound_stages_mean_ms']:.1f} ms in the stages that wait on the lab (fetch, send with the "
        f"Bcc copy, mark) and {own['rest_of_handling_mean_ms']:.1f} ms in the rest. "
        f'Daemon start-up (process start to "quinn started"): '
        f"{report['startup_s']['idle']:.1f} s / {report['startup_s']['polling']:.1f} s.",
    ]
    lines += [
        "",
        "| stored memories per user | replies | memory tokens mean | max | memory lines |",
        "|---:|---:|---:|---:|---:|",
    ]
    for t in report["memory_tokens"]:
        lines.append(
            f"| {t['stored_memories']:,} | {t['replies']} | {t['tokens_mean']} | {t['tokens_max']} | "
            f"{t['memory_lines_mean']} |"
        )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Stage latencies, the APPEND -> reply distribution and the memory tokens, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [2.2, 1.3, 1]})
    phases = [(k, label) for k, label in PHASES if k in report["phases"]]
    x = np.arange(len(STAGES))
    width = 0.8 / len(phases)
    for i, (key, label) in enumerate(phases):
        stages = report["phases"][key]["stages_ms"]
        p50 = [stages.get(s, {}).get("p50", np.nan) for s in STAGES]
        p95 = [stages.get(s, {}).get("p95", np.nan) for s in STAGES]
        bars = ax1.bar(x + (i - (len(phases) - 1) / 2) * width, p95, width, alpha=0.35)
        ax1.bar(
            x + (i - (len(phases) - 1) / 2) * width,
            p50,
            width,
            color=bars[0].get_facecolor()[:3],
            label=f"{label} (p50; pale: p95)",
        )
    ax1.set_yscale("log")
    ax1.set_xticks(x, STAGES)
    ax1.set_ylabel("milliseconds (log)")
    ax1.set_title("Quinn's stages per mail")
    ax1.legend(fontsize=7)
    for key, label in phases:
        lat = np.sort(np.asarray(report["phases"][key]["latency_s"]))
        if lat.size:
            ax2.plot(lat, np.arange(1, lat.size + 1) / lat.size, label=label)
    ax2.axvline(GOAL_P95_S, color="tab:red", linestyle="dashed", label="goal (p95)")
    ax2.axhline(0.95, color="gray", linewidth=0.5)
    ax2.set_xscale("log")
    ax2.set_xlabel("APPEND -> reply in inbox (s, log)")
    ax2.set_ylabel("share of mails")
    ax2.set_title(f"Latency (burst: {report['phases']['burst']['throughput_per_s']:g} mails/s)")
    ax2.legend(fontsize=7)
    levels = report["memory_tokens"]
    ax3.bar([f"{t['stored_memories']:,}" for t in levels], [t["tokens_mean"] or 0 for t in levels], color="tab:green")
    ax3.axhline(GOAL_TOKENS, color="tab:red", linestyle="dashed", label="goal")
    ax3.set_xlabel("stored memories per user")
    ax3.set_ylabel("memory tokens per reply (mean)")
    ax3.set_title("Memory block in the prompt")
    ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
