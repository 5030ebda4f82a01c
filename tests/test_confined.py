"""quinn/confined.py: work in a child process comes back whole, from a fresh child or the fork server, and a child
past its deadline is killed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from quinn.confined import ChildFailed, ChildLimits, run_confined

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = ChildLimits(timeout_s=30, memory_bytes=1024 * 1024 * 1024)


def _pid_and_double(value: int) -> tuple[int, int]:
    return os.getpid(), value * 2


def _forever(path: str) -> None:
    with open(path, "w") as marker:
        marker.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def _die() -> None:
    os._exit(3)


@pytest.mark.lab  # starts child processes
@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_the_result_comes_back_from_another_process(start: str) -> None:
    pid, doubled = run_confined(_pid_and_double, (21,), LIMITS, start)  # type: ignore[arg-type]
    assert doubled == 42 and pid != os.getpid()


@pytest.mark.lab
def test_a_child_past_its_deadline_is_killed(tmp_path) -> None:
    marker = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(ChildFailed) as stopped:
        run_confined(_forever, (str(marker),), ChildLimits(timeout_s=0.5, memory_bytes=LIMITS.memory_bytes),
                     "forkserver")  # fmt: skip
    assert stopped.value.kind == "timeout"
    assert time.monotonic() - started < 0.5 + 5
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped by its parent, the fork server
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)


@pytest.mark.lab
def test_a_child_that_dies_says_so() -> None:
    with pytest.raises(ChildFailed) as stopped:
        run_confined(_die, (), LIMITS, "forkserver")
    assert stopped.value.kind == "memory"  # no answer: the memory cap or a crash, said as one


@pytest.mark.lab
def test_the_console_script_costs_a_fork_server_child_no_import_of_the_cli(tmp_path) -> None:
    """A fork-server child runs the main script's top level again (``__mp_main__``). Under the ``quinn`` console
    script that imported quinn.cli, 1.1-1.5 s for each mail parsed in issue 32's import; its entry point is now
    ``quinn.entry``, which imports nothing: a child reports the CLI not imported."""
    import subprocess
    import sys

    script = tmp_path / "quinn"  # as pip writes a console script, with the entry point of pyproject.toml
    lines = Path(ROOT, "pyproject.toml").read_text().splitlines()
    entry = next(line for line in lines if line.startswith("quinn = "))
    module, function = entry.split('"')[1].split(":")
    script.write_text(
        f"import sys\nfrom {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    from quinn.confined import ChildLimits, run_confined\n"
        "    from tests.test_confined import _cli_imported\n"
        "    print(run_confined(_cli_imported, (), ChildLimits(timeout_s=30, memory_bytes=1024 ** 3), 'forkserver'))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "False", (done.stdout, done.stderr)


def _cli_imported() -> bool:
    import sys

    return "quinn.cli" in sys.modules
