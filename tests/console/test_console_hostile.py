"""Hostile use of the console (issue 30), through the real server as ``quinn console`` and ``quinn run`` serve it:
template previews that would loop for hours or ask for gigabytes, logins sent all at once, and a stranger's
failed logins for the admin's name from another address."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from quinn.agent.trials import TRIAL_LIMITS, TRIAL_SLOTS
from quinn.console.auth import hash_password
from quinn.console.serve import ConsoleServer
from quinn.lab.ports import free_port
from quinn.lab.wait import wait_for
from quinn.memory.store import MemoryStore
from tests.console.conftest import CONFIG, PASSWORDS, TEST_COST, World, csrf_of, full_console

# Hours of a nested loop in the sandbox (range() is capped at 100,000 items, not the nesting), and 4 GB of "x".
LOOP = "{% block system %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x" \
       "{% endblock %}{% block user %}y{% endblock %}"  # fmt: skip
MEMORY = '{% block system %}{{ "x" * (user.address | length * 300000000) }}{% endblock %}{% block user %}y' \
         "{% endblock %}"  # fmt: skip
STALLED_S = 5.0  # generous: the admin's login and page take well under a second when nothing stalls them
CONSOLE_LOG_IN = 3  # login_attempts in the tests' config

pytestmark = pytest.mark.lab  # the console's real server on a socket, template trials in child processes


@pytest.fixture
def server(world: World, tmp_path: Path) -> Iterator[ConsoleServer]:
    server, _admin_dir = full_console(world, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def client_of(server: ConsoleServer, address: str | None = None) -> httpx.Client:
    """A browser, from ``address`` as a TLS proxy in front would say (X-Forwarded-For; uvicorn trusts 127.0.0.1)."""
    headers = {"X-Forwarded-For": address} if address else {}
    return httpx.Client(base_url=server.url, timeout=60, headers=headers)


def log_in(client: httpx.Client, name: str = "root", password: str | None = None) -> httpx.Response:
    form = {"csrf": csrf_of(client.get("/login").text), "name": name,
            "password": PASSWORDS[name] if password is None else password}  # fmt: skip
    return client.post("/login", data=form)


def preview(client: httpx.Client, source: str) -> httpx.Response:
    page = client.get("/prompts/reply").text
    return client.post("/prompts/reply/preview", data={"csrf": csrf_of(page), "source": source})


def test_preview_bombs_get_a_clear_error_and_the_admin_is_answered_meanwhile(server: ConsoleServer) -> None:
    with client_of(server) as admin:
        assert log_in(admin).status_code == 303
        started = time.monotonic()
        memory = preview(admin, MEMORY)
        memory_s = time.monotonic() - started
        assert memory.status_code == 400, memory.text[-1500:]
        assert "memory limit" in memory.text  # the child hit its cap; the console did not allocate the 4 GB
        cookies = dict(admin.cookies)

    def bomb(_index: int) -> httpx.Response:
        with client_of(server) as client:
            client.cookies.update(cookies)
            return preview(client, LOOP)

    with ThreadPoolExecutor(max_workers=10) as pool:
        bombs = [pool.submit(bomb, index) for index in range(10)]
        time.sleep(1.0)  # the first two are rendering in their children now; the rest were refused
        with client_of(server) as late:
            started = time.monotonic()
            assert log_in(late).status_code == 303
            assert "People" in late.get("/people").text
            answered_s = time.monotonic() - started
        answers = [future.result() for future in bombs]
    timed_out = [a for a in answers if a.status_code == 400]
    busy = [a for a in answers if a.status_code == 503]
    print(f"memory bomb answered in {memory_s:.1f} s; admin's login and page during the loop bombs: {answered_s:.2f} "
          f"s; bombs: {len(timed_out)} stopped at the deadline, {len(busy)} refused as busy")  # fmt: skip
    assert answered_s < STALLED_S  # on c7b109b the login timed out: every thread was rendering a loop
    assert len(timed_out) + len(busy) == 10 and 1 <= len(timed_out) <= TRIAL_SLOTS
    for answer in timed_out:
        assert f"took longer than the {TRIAL_LIMITS.timeout_s:g} s limit" in answer.text
    for answer in busy:
        assert "running already" in answer.text and answer.headers["retry-after"]


def test_the_read_only_role_may_not_preview(server: ConsoleServer) -> None:
    with client_of(server) as viewer:
        assert log_in(viewer, "viewer").status_code == 303
        refused = preview(viewer, LOOP)
        assert refused.status_code == 403 and "read-only" in refused.text


def test_logins_sent_at_once_check_at_most_the_allowed_passwords(server: ConsoleServer) -> None:
    def attempt(index: int) -> int:
        with client_of(server) as client:
            return log_in(client, password=None if index == 39 else f"guess {index}").status_code

    with ThreadPoolExecutor(max_workers=40) as pool:
        codes = list(pool.map(attempt, range(40)))
    checked = sum(code in (303, 401) for code in codes)  # a password was hashed: refused ones are 429
    print(f"40 logins at once: {codes.count(401)} wrong passwords checked, {codes.count(303)} logged in, "
          f"{codes.count(429)} refused unchecked")  # fmt: skip
    assert checked <= CONSOLE_LOG_IN and codes.count(429) == 40 - checked  # on c7b109b: 39 wrong ones checked


def test_a_strangers_failures_slow_the_admin_down_never_lock_them_out(server: ConsoleServer) -> None:
    with client_of(server, "203.0.113.7") as stranger:
        codes = [log_in(stranger, password=f"guess {i}").status_code for i in range(CONSOLE_LOG_IN + 1)]
    assert codes == [401] * CONSOLE_LOG_IN + [429]  # the stranger's address is refused
    with client_of(server, "198.51.100.9") as admin:
        started = time.monotonic()
        answer = log_in(admin)
        waited_s = time.monotonic() - started
        print(f"the admin logged in from another address {waited_s:.1f} s after asking")
        assert answer.status_code == 303, re.sub(r"\s+", " ", answer.text)[-300:]  # on c7b109b: 429 for 5 min
        assert "People" in admin.get("/people").text


def test_sigterm_stops_quinn_console_while_previews_loop(tmp_path: Path) -> None:
    """On c7b109b the console ignored SIGTERM while previews looped (uvicorn waits for the requests in flight,
    which never ended): SIGKILL was needed. Now their children are killed at the deadline and the console stops."""
    port = free_port()
    (tmp_path / "quinn.toml").write_text(CONFIG.replace("login_attempts = 3", f"port = {port}"), encoding="utf-8")
    MemoryStore.open(str(tmp_path / "quinn.db"), embedder=None).close()
    env = {**os.environ, "Q_CONSOLE_ROOT": hash_password(PASSWORDS["root"], **TEST_COST),
           "Q_CONSOLE_VIEWER": hash_password(PASSWORDS["viewer"], **TEST_COST)}  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "quinn", "console", "-c", str(tmp_path / "quinn.toml")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/login", timeout=2), "quinn console listening", 120,
                 retry_on=(httpx.TransportError,))  # fmt: skip
        with httpx.Client(base_url=url, timeout=60) as admin:
            assert log_in(admin).status_code == 303
            cookies = dict(admin.cookies)

        def bomb(_index: int) -> int:
            with httpx.Client(base_url=url, timeout=60, cookies=cookies) as client:
                try:
                    return preview(client, LOOP).status_code
                except httpx.TransportError:  # the console went away mid-request: allowed
                    return 0

        with ThreadPoolExecutor(max_workers=TRIAL_SLOTS) as pool:
            bombs = [pool.submit(bomb, index) for index in range(TRIAL_SLOTS)]
            time.sleep(1.5)  # both are rendering in their children
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                _out, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail("quinn console ignored SIGTERM for a minute while previews looped")
            stopped_s = time.monotonic() - started
            answered = [future.result() for future in bombs]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    print(f"quinn console stopped {stopped_s:.1f} s after SIGTERM; the looping previews got {answered}")
    assert process.returncode == 0, err.decode()[-2000:]
    assert stopped_s < TRIAL_LIMITS.timeout_s + 15  # the deadline, and a generous margin for a busy machine
