"""Hostile mail on the pure parse path (issue 30): seconds to parse the shapes an attacker picks.

Shapes: a References field of 25,000 and 80,000 ids (the issue's 1.7 MB mail), 600,000 tiny header fields,
60,000 tiny attachments, 10,000 recipients in To. Each is parsed ``--rounds`` times in this process; the median
is kept with what came out (ids kept, fields, attachments, or the refusal). Run it against another checkout to
compare: ``PYTHONPATH=/path/to/old python -m bench.hostile_parse --label old`` imports that checkout's parser (this
file needs nothing of the parser but ``parse_email``). Writes ``results/hostile_parse-LABEL.json`` and one
Markdown table of every label found, ``results/hostile_parse.md``.

    python -m bench.hostile_parse --label after        # ~1 min on 2 busy cores
    python -m bench.hostile_parse --quick --out /tmp/b # seconds: small shapes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.machine import machine_info

RESULTS = Path(__file__).resolve().parent / "results"
HEAD = b"From: Mallory <mallory@evil.test>\r\nTo: quinn@example.test\r\nSubject: s\r\nMessage-ID: <m@evil.test>\r\n"


def references(n: int) -> bytes:
    return HEAD + b"References: " + b" ".join(b"<id%06d@evil.test>" % i for i in range(n)) + b"\r\n\r\nhello\r\n"


def header_fields(n: int) -> bytes:
    return HEAD + b"".join(b"X-H%d: v\r\n" % i for i in range(n)) + b"\r\nhello\r\n"


def attachments(n: int) -> bytes:
    part = (b'--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="f%d.bin"'
            b"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAAA\r\n")  # fmt: skip
    head = b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\n'
    return (
        HEAD + head + b"Content-Type: text/plain\r\n\r\nhello\r\n" + b"".join(part % i for i in range(n)) + b"--b--\r\n"
    )


def recipients(n: int) -> bytes:
    to = b"To: " + b", ".join(b"u%d@example.test" % i for i in range(n)) + b"\r\n"
    return HEAD.replace(b"To: quinn@example.test\r\n", to) + b"\r\nhello\r\n"


SHAPES: list[tuple[str, Callable[[int], bytes], int, int]] = [  # name, maker, size, --quick size
    ("References ids", references, 25_000, 2_000),
    ("References ids", references, 80_000, 5_000),
    ("header fields", header_fields, 600_000, 20_000),
    ("attachments", attachments, 60_000, 2_000),
    ("To recipients", recipients, 10_000, 1_000),
]


def measure(raw: bytes, rounds: int) -> dict[str, Any]:
    from quinn.errors import MailParseError
    from quinn.mailbox.parse import parse_email

    took, outcome = [], ""
    for _ in range(rounds):
        started = time.perf_counter()
        try:
            email = parse_email(raw, max_bytes=64 * 1024 * 1024)
            outcome = (f"parsed: {len(email.references)} references, {sum(map(len, email.headers.values()))} "
                       f"header values, {len(email.attachments)} attachments, {len(email.to)} in To")  # fmt: skip
        except MailParseError as exc:
            outcome = f"refused: {exc.message}"
        took.append(time.perf_counter() - started)
    return {"bytes": len(raw), "seconds": round(statistics.median(took), 3), "outcome": outcome}


def table(out: Path) -> str:
    runs = {
        p.stem.removeprefix("hostile_parse-"): json.loads(p.read_text())
        for p in sorted(out.glob("hostile_parse-*.json"))
    }
    lines = ["# Hostile mail on the pure parse path (issue 30)", "",
             "Median seconds of `parse_email` per shape (`python -m bench.hostile_parse`); see each JSON for the "
             "machine and its load.", "",
             "| shape | MB | " + " | ".join(runs) + " |", "|---|---|" + "---|" * len(runs)]  # fmt: skip
    names = dict.fromkeys(name for run in runs.values() for name in run["shapes"])
    for name in names:
        first = next((r["shapes"][name] for r in runs.values() if name in r["shapes"]), None)
        if first is None:
            continue
        cells = [f"{r['shapes'][name]['seconds']:.2f} s" if name in r["shapes"] else "" for r in runs.values()]
        lines.append(f"| {name} | {first['bytes'] / 1e6:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "What came out:", ""]
    for label, run in runs.items():
        lines += [f"- {label}: " + "; ".join(f"{n}: {s['outcome']}" for n, s in run["shapes"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="name of this run (which parser it measured)")
    parser.add_argument("--rounds", type=int, default=1, help="parses per shape (the median is kept)")
    parser.add_argument("--quick", action="store_true", help="small shapes: seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--only", default="", help="comma-separated shape names to run (e.g. 'References ids 25,000')")
    args = parser.parse_args(argv)
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    shapes: dict[str, Any] = {}
    for name, maker, size, quick in SHAPES:
        n = quick if args.quick else size
        label = f"{name} {n:,}"
        if only and label not in only:
            continue
        shapes[label] = measure(maker(n), args.rounds)
        print(f"{label}: {shapes[label]['seconds']:.2f} s ({shapes[label]['outcome']})", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"label": args.label, "parser": sys.modules["quinn.mailbox.parse"].__file__, "machine": machine_info(),
              "shapes": shapes}  # fmt: skip
    (args.out / f"hostile_parse-{args.label}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "hostile_parse.md").write_text(table(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
