"""Fault injection for crash tests. TEST-ONLY: inert unless the environment variable QUINN_FAULT is set.

``QUINN_FAULT="after_send:3"`` makes the process SIGKILL itself the 3rd time it passes the point ``after_send``;
several points may be given, comma-separated (``after_fetch:2,before_move:5``). The crash tests use it to stop
``quinn run`` exactly inside the windows that exactly-once delivery must survive. Never set it in production.

Points: ``after_fetch`` (body fetched, nothing recorded), ``after_llm`` (reply drafted, not yet in the outbox),
``before_send`` (outbox written, SMTP not started), ``after_send`` (SMTP accepted, outbox not yet marked),
``before_move`` (final state recorded, mail not yet filed away), ``before_learn`` (filed, queued for learning, the
extraction not run), ``after_learn`` (memories stored, the mail still queued), ``after_store`` (`quinn import`: the
mail stored, indexed and its files kept, not yet queued for learning nor final).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections import Counter

from quinn.errors import ConfigError

log = logging.getLogger(__name__)

ENV = "QUINN_FAULT"
POINTS = frozenset(
    {
        "after_fetch",
        "after_llm",
        "before_send",
        "after_send",
        "before_move",
        "before_learn",
        "after_learn",
        "after_store",
    }
)
_passed: Counter[str] = Counter()


def parse_faults(spec: str) -> dict[str, int]:
    """``"after_send:3,before_move:1"`` -> ``{"after_send": 3, "before_move": 1}``; a bad spec is a ConfigError."""
    faults: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, count = item.partition(":")
        if point not in POINTS or not count.isdigit() or int(count) < 1:
            raise ConfigError(f"{ENV}={spec!r}: bad item {item!r}", f"use POINT:N with POINT in {sorted(POINTS)}")
        faults[point] = int(count)
    return faults


def fault_point(name: str) -> None:
    """Count a pass through ``name``; SIGKILL this process when QUINN_FAULT says this pass is the one."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    _passed[name] += 1
    if parse_faults(spec).get(name) == _passed[name]:
        log.warning("fault injected: SIGKILL at %s (pass %d)", name, _passed[name])
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
