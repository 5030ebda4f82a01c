"""Start-up time of the quinn command (issue 19): import, `quinn run` to ready, and the commands a newcomer runs.

Each figure is a fresh process, timed from spawn to exit (or, for `quinn run`, to its "quinn started" line),
against the lab: Dovecot, the SMTP lab, the scripted model, a config written by `quinn init`. "every SDK" is the
same code with Mirascope importing every provider SDK (as before quinn.sdks); "lean" is the quinn command as
shipped. Goals: `quinn run` to ready <= 3 s after the first start, commands that embed <= 1.5 s, on 2 cores.

    python -m bench.startup [--rounds 5] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.machine import machine_info
from tests.lab.daemon import init_flags, seconds_to_ready
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import ScriptedLLM, Text
from tests.lab.smtp import SmtpLab

RESULTS = Path(__file__).parent / "results"
GOALS_S = {"run to ready": 3.0, "ask": 1.5, "memory search": 1.5}
EVERY_SDK = "import sys; from quinn.cli import main; sys.exit(main(sys.argv[1:]))"  # lean_imports off


def command(lean: bool, *args: str) -> list[str]:
    """``quinn ARGS`` as the console script runs it (lean), or with every provider SDK imported."""
    return [sys.executable, "-m", "quinn", *args] if lean else [sys.executable, "-c", EVERY_SDK, *args]


def wall_s(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[-6:])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def measure(rounds: int, tmp: Path) -> dict[str, dict[str, list[float]]]:
    dovecot, llm = Dovecot(), ScriptedLLM()
    dovecot.start()
    smtp = SmtpLab(dovecot)
    smtp.start()
    llm.start()
    llm.responder = lambda request: Text("Noted.")
    try:
        config = str(tmp / "quinn.toml")
        flags = init_flags("quinn@example.test", dovecot, smtp, llm, tmp)
        subprocess.run(command(True, "init", "-c", config, *flags), check=True, capture_output=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "LAB_MAIL_PASSWORD": dovecot.password, "LAB_LLM_KEY": "k"}
        # The first start makes the database and the folders; every timed start comes after it.
        seconds_to_ready(command(True, "run", "-c", config), env, tmp / "first.log")
        # A memory for `memory search` to find (a "remember" needs no model), so the search embeds and ranks.
        wall_s(command(True, "ask", "-c", config, "--as", "alice@example.org", "Please remember that I love Thai "
                       "food, green curry above all."), env)  # fmt: skip
        times: dict[str, dict[str, list[float]]] = {}
        for _ in range(rounds):
            for lean in (False, True):
                variant = "lean" if lean else "every SDK"
                row = times.setdefault(variant, {})
                probe = "import quinn.app" if not lean else (
                    "from quinn.config import LlmConfig; from quinn.sdks import skip_unused; "
                    "skip_unused(LlmConfig(model='openai/gpt-test')); import quinn.app")  # fmt: skip
                row.setdefault("import quinn.app", []).append(wall_s([sys.executable, "-c", probe], env))
                row.setdefault("--help", []).append(wall_s(command(lean, "--help"), env))
                row.setdefault("run to ready", []).append(seconds_to_ready(command(lean, "run", "-c", config), env,
                                                                  tmp / "run.log"))  # fmt: skip
                ask = command(lean, "ask", "-c", config, "--as", "alice@example.org", "Any dinner ideas for tonight?")
                row.setdefault("ask", []).append(wall_s(ask, env))
                row.setdefault("check", []).append(wall_s(command(lean, "check", "-c", config), env))
                # A command that embeds and calls no model: the memory CLI loads the embedder, not an SDK.
                search = command(lean, "memory", "search", "alice@example.org", "dinner ideas", "-c", config)
                row.setdefault("memory search", []).append(wall_s(search, env))
                print(f"  {variant}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in row.items()), flush=True)
        return times
    finally:
        llm.stop()
        smtp.stop()
        dovecot.stop()


def summary(times: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    return {variant: {name: {"median_s": round(statistics.median(v), 2), "min_s": round(min(v), 2),
                             "max_s": round(max(v), 2)} for name, v in row.items()}
            for variant, row in times.items()}  # fmt: skip


def table(stats: dict[str, dict[str, dict[str, float]]], rounds: int) -> str:
    names = list(stats["lean"])
    lines = [f"# Start-up time (median of {rounds} fresh processes; min-max)", "",
             "| | every SDK (before) | lean (the quinn command) | goal |", "|---|---|---|---|"]  # fmt: skip
    for name in names:
        cells = [f"{s[name]['median_s']:.2f} s ({s[name]['min_s']:.2f}-{s[name]['max_s']:.2f})"
                 for s in (stats["every SDK"], stats["lean"])]  # fmt: skip
        goal = f"<= {GOALS_S[name]} s" if name in GOALS_S else ""
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {goal} |")
    return "\n".join(lines)


def plot(stats: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stats["lean"])
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, (variant, color) in enumerate((("every SDK", "tab:gray"), ("lean", "tab:blue"))):
        ax.bar([x + (i - 0.5) * width for x in range(len(names))], [stats[variant][n]["median_s"] for n in names],
               width, label=variant, color=color)  # fmt: skip
    for x, name in enumerate(names):
        if name in GOALS_S:
            ax.hlines(GOALS_S[name], x - width, x + width, colors="tab:red", linestyles="dashed")
    ax.plot([], [], color="tab:red", linestyle="dashed", label="goal")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds (median)")
    ax.set_title("quinn start-up on this machine: every provider SDK vs lean imports")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    args = parser.parse_args(argv)
    info = machine_info()
    with tempfile.TemporaryDirectory(prefix="quinn-startup-") as tmp:
        times = measure(args.rounds, Path(tmp))
    stats = summary(times)
    load = [round(x, 2) for x in os.getloadavg()]
    report = {"benchmark": "startup", "rounds": args.rounds, "machine": info, "load_average_at_end": load,
              "summary": stats, "raw_s": times}  # fmt: skip
    text = table(stats, args.rounds)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "startup.md").write_text(text + "\n")
    if args.plot:
        plot(stats, args.out / "startup.png")
    return report


if __name__ == "__main__":
    main()
