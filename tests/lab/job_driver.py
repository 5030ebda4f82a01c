"""A JobRunner in its own process, stepped by the test: the "second daemon" of the shared-database lease test.

    python -m tests.lab.job_driver DB_URL LLM_BASE_URL HOLDER

reads commands on stdin, one per line, and answers each with one JSON line on stdout:

    tick 2026-11-22T10:05:00+00:00   -> sets its ManualClock there and runs every due job (``run_due``), as the
                                        schedule would at that moment: [{"job": ..., "status": ...}, ...]
    quit                             -> {"bye": true}, exit 0

The runner, its leases and run log are the production code; only time is driven by the test, so two of these
processes can be made to compete for every tick without the test sleeping.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys


async def main(db_url: str, llm_url: str, holder: str) -> int:
    from tests.lab.scheduler import open_bench

    bench = open_bench(llm_url, db_url, None)
    runner = bench.runner(holder=holder)
    print(json.dumps({"ready": holder}), flush=True)
    try:
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command == "quit":
                print(json.dumps({"bye": True}), flush=True)
                return 0
            if command != "tick":
                print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)
                continue
            bench.clock.set(argument)
            outcomes = await runner.run_due()
            print(json.dumps([{"job": o.job, "status": o.status, "reason": o.reason} for o in outcomes]), flush=True)
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.exit(asyncio.run(main(*sys.argv[1:4])))
