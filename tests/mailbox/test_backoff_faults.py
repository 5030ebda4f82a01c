"""The small pieces under reconnects and crash tests: jittered backoff, and the test-only fault hook."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quinn.errors import ConfigError
from quinn.faults import POINTS, fault_point, parse_faults
from quinn.mailbox.backoff import Backoff


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(1.0, 8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert 0.5 * base <= delay <= min(1.5 * base, 8.0)
    assert backoff.failures == 6
    backoff.reset()
    assert backoff.failures == 0 and backoff.next_delay() <= 1.5


def test_jitter_spreads_the_delays() -> None:
    assert len({round(Backoff(10.0, 60.0).next_delay(), 6) for _ in range(20)}) > 1


def test_fault_spec_parsing() -> None:
    assert parse_faults("after_send:3, before_move:1") == {"after_send": 3, "before_move": 1}
    assert set(POINTS) == {
        "after_fetch",
        "after_llm",
        "before_send",
        "after_send",
        "before_move",
        "before_learn",
        "after_learn",
        "after_store",
    }
    for bad in ("after_send", "after_send:0", "nowhere:1", "after_send:x"):
        with pytest.raises(ConfigError, match="QUINN_FAULT"):
            parse_faults(bad)


def test_fault_point_is_inert_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUINN_FAULT", raising=False)
    for _ in range(3):
        fault_point("after_send")  # would kill this test run if it were active


@pytest.mark.lab  # runs a process
def test_fault_point_kills_on_the_nth_pass() -> None:
    code = (
        "from quinn.faults import fault_point\n"
        "for i in range(5):\n    print(i, flush=True)\n    fault_point('after_fetch')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"QUINN_FAULT": "after_fetch:3", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == -9
    assert result.stdout.split() == ["0", "1", "2"]  # killed on the third pass, before the fourth print
