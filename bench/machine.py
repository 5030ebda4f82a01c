"""What a benchmark ran on: written into every results file, so figures from different machines are not mixed."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _blas() -> list[dict[str, Any]]:
    """The BLAS numpy runs on (OPENBLAS_CORETYPE can force a slow kernel: see bench/README.md)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("internal_api", "version", "architecture", "num_threads")
    return [{k: info.get(k) for k in keep} for info in threadpool_info() if info.get("user_api") == "blas"]


def _git() -> dict[str, Any]:
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    return {"commit": run("rev-parse", "HEAD") or None, "dirty": bool(run("status", "--porcelain", "--", "quinn"))}


def machine_info() -> dict[str, Any]:
    """Host, CPU, load, library versions and BLAS kernel, as JSON-ready data."""
    return {
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "numpy": np.__version__,
        "blas": _blas(),
        "openblas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
        "libsql": _version("libsql"),
        "torch": _version("torch"),
        "sentence_transformers": _version("sentence-transformers"),
        "git": _git(),
    }


def percentile_ms(seconds: list[float], q: float) -> float:
    """The q-th percentile of durations given in seconds, in milliseconds (3 decimals)."""
    return round(float(np.percentile(np.asarray(seconds), q)) * 1000.0, 3)


def require_matplotlib(plot: bool) -> None:
    """Fail before any work when a plot is wanted but matplotlib is missing (minutes of work would be lost)."""
    if not plot:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("matplotlib is not installed: pip install -e '.[bench]', or pass --no-plot") from None
