"""quinn/isolation.py: work in a child process comes back whole, and a child past its deadline is killed."""

from __future__ import annotations

import os
import time

import pytest

from quinn.isolation import STUCK_GRACE_S, ChildStopped, run_in_child


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
    pid, doubled = run_in_child(_pid_and_double, 21, timeout_s=30, start=start)  # type: ignore[arg-type]
    assert doubled == 42 and pid != os.getpid()


@pytest.mark.lab
def test_a_child_past_its_deadline_is_killed(tmp_path) -> None:
    marker = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(ChildStopped) as stopped:
        run_in_child(_forever, str(marker), timeout_s=0.5)
    assert stopped.value.timed_out
    assert time.monotonic() - started < 0.5 + STUCK_GRACE_S + 5
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped by its parent, the fork server
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)


@pytest.mark.lab
def test_a_child_that_dies_says_so() -> None:
    with pytest.raises(ChildStopped) as stopped:
        run_in_child(_die, timeout_s=30)
    assert not stopped.value.timed_out
