"""The lab's one waiter (quinn/lab/wait.py): what it returns, how it times out, what it says then."""

from __future__ import annotations

import asyncio
import time

import pytest

from quinn.lab.wait import WaitTimeout, wait_for, wait_for_async


def counter(truthy_from: int, value: object = "found"):
    """A check that is falsy on its first ``truthy_from`` calls, then returns ``value``; ``calls`` counts them."""
    calls: list[int] = []

    def check() -> object:
        calls.append(1)
        return value if len(calls) > truthy_from else None

    return check, calls


def test_returns_the_checks_first_truthy_value() -> None:
    check, calls = counter(2, value=["a reply"])
    assert wait_for(check, "a reply", timeout_s=5, interval_s=0) == ["a reply"]
    assert len(calls) == 3


def test_times_out_naming_what_and_how_long() -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"not reached after 0\.[12] s: the reply to <m-1@x\.test>") as raised:
        wait_for(lambda: [], "the reply to <m-1@x.test>", timeout_s=0.15, interval_s=0.01)
    assert 0.15 <= time.monotonic() - started < 1
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, AssertionError)
    assert "--- log ---" not in str(raised.value)


def test_the_check_runs_once_more_at_the_deadline() -> None:
    check, calls = counter(0)
    assert wait_for(check, "at once", timeout_s=0) == "found"  # no time at all: still one look
    check, calls = counter(1)
    assert wait_for(check, "on the last look", timeout_s=0.05, interval_s=10) == "found"  # sleeps to the deadline
    assert len(calls) == 2


def test_calls_log_on_failure_only_and_shows_its_tail() -> None:
    logged: list[int] = []

    def log() -> str:
        logged.append(1)
        return "x" * 5000 + "quinn exited"

    check, _calls = counter(1)
    wait_for(check, "fine", timeout_s=5, interval_s=0, log=log)
    assert logged == []
    with pytest.raises(WaitTimeout) as raised:
        wait_for(lambda: False, "quinn started", timeout_s=0, log=log)
    assert logged == [1]
    message = str(raised.value)
    assert message.startswith("not reached after 0.0 s: quinn started\n--- log ---\n")
    assert message.endswith("quinn exited") and len(message) < 4100  # the tail, not the whole log


def test_an_error_of_the_check_ends_the_wait_unless_retried() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("not listening yet")

    with pytest.raises(ConnectionRefusedError):
        wait_for(refused, "a server", timeout_s=5)
    with pytest.raises(WaitTimeout, match=r"a server \(last error: ConnectionRefusedError\('not listening yet'\)\)"):
        wait_for(refused, "a server", timeout_s=0.05, interval_s=0.01, retry_on=(OSError,))


async def test_the_async_waiter_lets_the_loop_run_meanwhile() -> None:
    done: list[str] = []
    asyncio.get_running_loop().call_later(0.05, done.append, "ran")
    assert await wait_for_async(lambda: done and done[0], "the callback", timeout_s=5, interval_s=0.01) == "ran"
    with pytest.raises(WaitTimeout, match="never"):
        await wait_for_async(lambda: None, "never", timeout_s=0.02, interval_s=0.01)
