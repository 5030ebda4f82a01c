"""Shared fixtures: the mail lab (Dovecot + SMTP), sqld, and a guard that keeps tests on 127.0.0.1.

Lab servers are real processes; every fixture stops what it started in a ``finally``, and
`tests.lab.process.stop_all` (atexit) is the safety net for a run that dies half way.
QUINN_ALLOW_SKIP=1 turns a missing Dovecot or sqld into a skip instead of an error (never set it in CI).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # `pytest` (unlike `python -m pytest`) does not put the repo root on sys.path
    sys.path.insert(0, _ROOT)

import pytest  # noqa: E402

from tests.lab.dovecot import Dovecot, dovecot_available  # noqa: E402
from tests.lab.guard import install_network_guard  # noqa: E402
from tests.lab.process import stop_all  # noqa: E402
from tests.lab.require import missing  # noqa: E402
from tests.lab.smtp import LAB_AUTHSERV, MailLab, SmtpLab, unique_address  # noqa: E402
from tests.lab.sqld import Sqld, serving_sqld  # noqa: E402
from tests.lab.tls import make_certificate, openssl_available  # noqa: E402


@pytest.fixture(autouse=True)
def _network_guard() -> Iterator[None]:
    """Every test: any connect outside 127.0.0.0/8, ::1 or localhost raises RuntimeError."""
    undo = install_network_guard()
    try:
        yield
    finally:
        undo()


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Every test: the root logger's handlers and level as before it. A test that runs ``quinn.cli.main``
    in-process gets a handler on the stderr pytest captured for it; left behind, the lab's server threads
    logged into that closed file in later tests ("Logging error: I/O operation on closed file")."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def _stop_lab_servers() -> Iterator[None]:
    """Session end: stop any lab server a test started by hand and forgot."""
    try:
        yield
    finally:
        stop_all()


@pytest.fixture(scope="session")
def dovecot() -> Iterator[Dovecot]:
    """One Dovecot for the session; use fresh addresses (`users`) so tests do not share mailboxes.

    Tests that stop or restart a server should make their own `Dovecot()` instead.
    """
    if not dovecot_available():
        missing("Dovecot", "apt-get install --no-install-recommends dovecot-imapd")
    server = Dovecot()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def make_dovecot() -> Iterator[Callable[..., Dovecot]]:
    """A factory of private, started Dovecots (``make_dovecot(idle=False)``) for tests that stop or restart
    one; all are closed after the test."""
    if not dovecot_available():
        missing("Dovecot", "apt-get install --no-install-recommends dovecot-imapd")
    servers: list[Dovecot] = []

    def make(**kwargs: Any) -> Dovecot:
        server = Dovecot(**kwargs)
        servers.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def users() -> Callable[[str], str]:
    """A factory of fresh addresses: ``users("alice")`` -> ``alice-1a2b3c4d@example.test``."""
    return unique_address


@pytest.fixture
def smtp_lab(dovecot: Dovecot) -> Iterator[SmtpLab]:
    """An SMTP server for this test that delivers into `dovecot`; stopped afterwards."""
    server = SmtpLab(dovecot)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def mail_lab(dovecot: Dovecot, smtp_lab: SmtpLab, users: Callable[[str], str]) -> MailLab:
    """Dovecot, this test's SMTP server and the address factory in one object."""
    return MailLab(dovecot=dovecot, smtp=smtp_lab, new_user=users)


@pytest.fixture(scope="session")
def sqld() -> Iterator[Sqld]:
    """One real libSQL server for the session: ``libsql.connect(sqld.url)``."""
    with serving_sqld() as server:
        yield server


# ======================================================================================================
# Project fixtures (LLM server, quinn config, ...): the lead adds them below this line.
# ======================================================================================================


from collections.abc import AsyncIterator  # noqa: E402

from tests.lab.brain import Brain  # noqa: E402
from tests.lab.daemon import LabConfig, QuinnProcess  # noqa: E402
from tests.lab.llm_server import ScriptedLLM  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--long``: also run the long variants of the proof suites (tests marked ``long``)."""
    parser.addoption("--long", action="store_true", default=False, help="also run tests marked long")


@pytest.fixture(scope="session")
def real_llm() -> Iterator[Any]:
    """A real model (Qwen2.5-Coder-0.5B Q4_K_M on llama-cpp-python's server) for the session, on 127.0.0.1.

    Missing weights or runtime fail the test (skip with QUINN_ALLOW_SKIP=1); see tests/lab/real_model.py for
    where the weights come from and why they are only a test fixture.
    """
    from tests.lab.real_llm import RUNTIME_HINT, RealLLM, runtime_available
    from tests.lab.real_model import FETCH_HINT, verified_path

    model = verified_path()
    if model is None:
        missing("The lab's real model (verified GGUF file)", FETCH_HINT)
    if not runtime_available():
        missing("llama-cpp-python's server", RUNTIME_HINT)
    # One thread: the other xdist worker keeps a core busy. Measured with a 1,223-token prompt and one busy
    # process beside the server on a 2-core box: 2 threads took 46-113 s a request (21-22 s alone), 1 thread
    # 35-39 s (35-37 s alone).
    server = RealLLM(model, n_threads=1)
    try:
        server.start()
        yield server
    finally:
        server.close()


# Fixtures that stand up a lab server or process. A test using none of them is in the unit layer (marker
# ``unit``, ``pytest -m unit``: about a minute, no Dovecot) unless marked ``lab`` or ``heavy`` (in process but
# slow); `_unit_stays_in_process` holds it to
# that, so a test that starts a server by hand without saying so fails instead of slowing the layer down.
LAB_FIXTURES = frozenset({"dovecot", "make_dovecot", "smtp_lab", "mail_lab", "sqld", "real_llm", "llm_server",
                          "lab_config", "quinn_daemon", "make_quinn", "brain", "job_bench", "tls_cert",
                          "browser", "served", "served_with_prompts"})  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that need no lab server are marked ``unit``; without ``--long``, tests marked ``long`` are
    skipped (CI's default run stays fast)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_sqld = callspec is not None and "sqld" in callspec.params.values()  # tests/memory's backend param
        # markers, not keywords: a keyword is also any name above the test, and tests/lab/ holds tests too
        lab = item.get_closest_marker("lab") is not None or item.get_closest_marker("heavy") is not None or on_sqld
        if not lab and not LAB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.unit)
        # Under pytest-xdist (``-n 2 --dist loadgroup``) the real-model tests share one worker, so one model server
        # starts and two never share the machine's two cores.
        if item.get_closest_marker("realmodel") is not None or "real_llm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("realmodel"))
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --long")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup`` (the README's test command) a test marked ``xdist_group`` must carry its group in
    its node id, as ``@name``: pytest-xdist adds it on each worker and schedules by it. pytest 9.2 ignores the way
    pytest-xdist 3.8 sets it, and the groups fell apart without a word: the install tests built their venv on both
    workers at once, two real-model servers shared the two cores, and the suite took far longer. Stop instead."""
    if not getattr(session.config.option, "loadgroup", False):  # set on pytest-xdist's workers only
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]  # fmt: skip
    if lost:
        message = (
            f"pytest-xdist's groups do not hold: {len(lost)} test(s) marked xdist_group lack the '@group' in their "
            f"node id (first: {lost[0]}), so --dist loadgroup would spread them over workers. This pytest and "
            "pytest-xdist do not work together: install the versions pyproject.toml pins (pip install -e '.[dev]')."
        )
        print(f"\nERROR: {message}", file=sys.__stderr__, flush=True)  # a worker's error shows only as INTERNALERROR
        raise pytest.UsageError(message)


LAYERS = ("realmodel", "unit")  # the groups whose cost the summary reports
_layer_cost: dict[str, list[float]] = {layer: [0, 0.0] for layer in LAYERS}  # tests run, seconds


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time (setup included: the real model starts in the first test's) to its layer."""
    for layer in LAYERS:
        if layer in report.keywords:
            _layer_cost[layer][0] += report.when == "call"
            _layer_cost[layer][1] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per layer: how many of its tests ran and the seconds they took (what the layer costs CI)."""
    for layer, (tests, seconds) in _layer_cost.items():
        if tests:
            terminalreporter.write_line(f"layer {layer}: {tests:g} tests ran in {seconds:.0f} s")


@pytest.fixture(autouse=True)
def _unit_stays_in_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``unit`` test may not start a process or open a TCP connection (even on 127.0.0.1): either is a lab
    server in disguise. The attempt raises, and the test fails at teardown even if the code under test swallowed
    that error (it would be testing this guard, not itself). Mark the test ``lab`` if it really needs one."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import socket
    import subprocess

    seen: list[str] = []

    def refuse(what: str) -> NoReturn:
        seen.append(what)
        raise RuntimeError(f"a unit test (no lab fixture) {what}: use a lab fixture or mark the test lab")

    popen_init, connect = subprocess.Popen.__init__, socket.socket.connect

    def no_process(self: Any, *args: Any, **kwargs: Any) -> None:
        refuse(f"started a process: {args[0] if args else kwargs.get('args')!r}")

    def no_tcp(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            self.close()
            refuse(f"opened a TCP connection to {address!r}")
        connect(self, address)

    subprocess.Popen.__init__ = no_process  # type: ignore[method-assign]
    socket.socket.connect = no_tcp  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        socket.socket.connect = connect  # type: ignore[method-assign]
    if seen:
        pytest.fail(f"a unit test (no lab fixture) {seen[0]}: use a lab fixture or mark the test lab", pytrace=False)


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLM]:
    """The scripted OpenAI-compatible model for this test; every request is recorded."""
    server = ScriptedLLM()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def lab_config_text(
    *, imap_port: int, smtp_port: int, address: str, llm_url: str, db_path: Path, extra: str = "",
    model: str = "openai/gpt-test", idle: bool = True, imap_extra: str = "", smtp_extra: str = "",
    llm_timeout_s: float = 20, llm_extra: str = "", backlog: str = "answer",
) -> str:  # fmt: skip
    """A quinn.toml pointing at the lab; secrets are read from QUINN_TEST_* variables.

    ``imap_extra`` / ``smtp_extra`` / ``llm_extra`` are more lines for those sections; ``extra`` holds further
    sections. Quinn trusts the lab's MX (``authserv_id``, added to a ``[policy]`` of ``extra`` or as one of its
    own), as an operator following deploy/SECURITY.md would: the default trust setting, with the stamp it needs.
    ``backlog``: the lab answers mail put in the folder before the daemon's first start (most tests deliver first
    and start after); the tests of the backlog rule pass "skip", the default of a real install.
    """
    if "authserv_id" not in extra:
        line = f'authserv_id = "{LAB_AUTHSERV}"\n'
        extra = extra.replace("[policy]\n", "[policy]\n" + line, 1) if "[policy]\n" in extra else (
            f"{extra}\n[policy]\n{line}")  # fmt: skip
    return f"""
log_level = "INFO"

[imap]
host = "127.0.0.1"
port = {imap_port}
username = "{address}"
password_env = "QUINN_TEST_IMAP_PASSWORD"
tls = "none"
idle = {str(idle).lower()}
poll_interval_s = 0.5
backlog = "{backlog}"
{imap_extra}

[smtp]
host = "127.0.0.1"
port = {smtp_port}
tls = "none"
from_address = "{address}"
{smtp_extra}

[llm]
model = "{model}"
base_url = "{llm_url}"
api_key_env = "QUINN_TEST_LLM_KEY"
timeout_s = {llm_timeout_s}
max_retries = 0
{llm_extra}

[database]
url = "{db_path}"

{extra}
"""


@pytest.fixture
def lab_config(
    tmp_path: Path, dovecot: Dovecot, smtp_lab: SmtpLab, llm_server: ScriptedLLM, users: Callable[[str], str]
) -> Callable[..., LabConfig]:
    """A factory of quinn.toml files for the lab: ``lab_config(extra="[policy]...")``."""

    def make(*, extra: str = "", name: str = "quinn.toml", **kwargs: Any) -> LabConfig:
        """kwargs: lab_config_text's, plus ``address``, ``db_path``, ``server`` (another Dovecot) and
        ``smtp`` (another SmtpLab)."""
        address = kwargs.pop("address", None) or users("quinn")
        db_path = kwargs.pop("db_path", None) or tmp_path / "quinn.db"
        server: Dovecot = kwargs.pop("server", None) or dovecot
        smtp: SmtpLab = kwargs.pop("smtp", None) or smtp_lab
        text = lab_config_text(imap_port=server.port, smtp_port=smtp.port, address=address,
                               llm_url=llm_server.openai_base_url, db_path=db_path, extra=extra, **kwargs)  # fmt: skip
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        env = {"QUINN_TEST_IMAP_PASSWORD": server.password, "QUINN_TEST_LLM_KEY": "test-key"}
        return LabConfig(path=path, env=env, address=address, db_path=db_path)

    return make


@pytest.fixture
def quinn_daemon(tmp_path: Path) -> Iterator[Callable[..., QuinnProcess]]:
    """Start ``quinn run`` subprocesses; any still running after the test is killed."""
    started: list[QuinnProcess] = []

    def start(config: LabConfig, *args: str) -> QuinnProcess:
        proc = QuinnProcess(config, tmp_path / f"quinn-{len(started)}.log", args=args or ("run",)).start()
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()


@pytest.fixture
async def make_quinn(lab_config, mail_lab) -> AsyncIterator[Callable[..., Any]]:
    """Start in-process Quinns against the lab: ``quinn = await make_quinn(extra_toml)``; closed after the test."""
    from tests.lab.inprocess import LabQuinn

    started: list[LabQuinn] = []

    async def make(extra: str = "", **config: Any) -> LabQuinn:  # config: more of lab_config's (llm_extra=...)
        quinn = LabQuinn(lab_config(extra=extra, **config), mail_lab)
        started.append(quinn)
        return await quinn.start()

    try:
        yield make
    finally:
        for quinn in started:
            await quinn.close()


@pytest.fixture
def brain(llm_server: ScriptedLLM) -> Brain:
    """The scripted model as a stand-in brain: ``brain.learn[trigger] = extraction``, ``brain.reply = fn``."""
    return Brain(llm_server)


@pytest.fixture(scope="session")
def local_embedder() -> Any:
    """The real all-MiniLM-L6-v2, loaded offline once per test session (0.2-0.5 s, numpy)."""
    from quinn.memory.embed import LocalEmbedder

    return LocalEmbedder()


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost / 127.0.0.1: ``(cert.pem, key.pem)``; the cert is its own CA."""
    if not openssl_available():
        missing("openssl", "apt-get install openssl")
    directory = tmp_path_factory.mktemp("tls")
    directory.chmod(0o755)
    return make_certificate(directory)


@pytest.fixture
def job_bench(tmp_path: Path, llm_server: ScriptedLLM, local_embedder: Any) -> Iterator[Any]:
    """A scheduler job bench (tests/lab/scheduler.py) on this test's database, the scripted model and the real
    embedder, with a ManualClock at now."""
    from quinn.clock import utcnow
    from tests.lab.scheduler import open_bench

    bench = open_bench(llm_server.openai_base_url, str(tmp_path / "quinn.db"), local_embedder, start=utcnow())
    try:
        yield bench
    finally:
        bench.close()
