"""`quinn demo` (issue 19): a throwaway Dovecot and SMTP server on 127.0.0.1, Quinn's daemon on them, and mail
from the terminal, with the scripted model as "the model of your choice" (``--base-url``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from quinn.cli import main
from quinn.lab.wait import wait_for
from tests.lab.brain import NOTHING, Brain, new_mail
from tests.lab.llm_server import ScriptedLLM, Text
from tests.lab.mails import query

YOU = "you@demo.test"


def demo(llm: ScriptedLLM, *args: str | Path) -> int:
    return main(["demo", "--model", "openai/gpt-test", "--base-url", llm.openai_base_url,
                 "--api-key-env", "DEMO_LLM_KEY", *map(str, args)])  # fmt: skip


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_LLM_KEY", "test-key")


@pytest.mark.timeout(300)  # two daemons' start-ups (the embedding model loads) on a loaded 2-core machine
def test_demo_mails_quinn_which_answers_and_remembers(
    llm_server: ScriptedLLM, brain: Brain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "The user lives in Lisbon.", "type": "fact"}]}
    brain.reply = lambda request: Text("You live in Lisbon." if "Where do I live" in new_mail(request) else "Noted.")
    kept = tmp_path / "demo"
    code = demo(llm_server, "--keep", kept, "--json", "--send", "I live in Lisbon, near the river.",
                "--send", "Where do I live?")  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = json.loads(out)
    # Issue 34: with --json, progress goes to stderr as it happens; the model check's verdict is in the JSON.
    assert err.count("waiting for Quinn's reply...") == 2 and answer["model_check"]["passed"], err
    assert [(e["text"], e["reply"]) for e in answer["exchanges"]] == [
        ("I live in Lisbon, near the river.", "Noted."), ("Where do I live?", "You live in Lisbon.")]  # fmt: skip
    [memory] = answer["memories"]
    assert memory["content"] == "The user lives in Lisbon."
    # The fact learnt from the first mail reached the model in the prompt for the second, as a memory: the demo's
    # MX stamped the mail and the config trusts that stamp, as a real install's does.
    prompt = brain.prompt("Where do I live?")
    assert f"[memory:{memory['id']}]" in prompt and "The user lives in Lisbon." in prompt
    # The daemon's path: both mails came in over IMAP and were answered, each reply went out over SMTP.
    db = kept / "quinn.db"
    assert query(db, "SELECT state FROM mail_state WHERE user_id = ? ORDER BY uid", (YOU,)) == [("replied",)] * 2
    assert query(db, "SELECT direction FROM messages WHERE user_id = ? ORDER BY id", (YOU,)) == [
        ("in",), ("out",), ("in",), ("out",)]  # fmt: skip
    assert (kept / "quinn.toml").is_file()

    # For people, without --keep: the reply printed under the mail, and the folder gone afterwards.
    code = demo(llm_server, "--send", "Hello again")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"you: Hello again\nquinn \(\d+\.\d s\):\nNoted\.\n", out), out
    folder = Path(re.search(r"the demo's quinn.toml is (\S+?),? ", out).group(1)).parent  # type: ignore[union-attr]
    assert folder != kept and not folder.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "quinn demo needs a model: --model PROVIDER/MODEL, and --base-url URL"),
        (("--model", "llama3.2"), "--model 'llama3.2' names no model of a known provider"),
    ],
)
def test_demo_without_a_usable_model_option_says_which_and_shows_ollama(
    args: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *args, "--send", "Hello"]) == 2
    err = capsys.readouterr().err
    assert says in err and "--model ollama/llama3.2" in err


@pytest.mark.lab  # runs a process
def test_demo_with_a_model_server_that_does_not_answer_says_so_and_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    kept = tmp_path / "demo"
    assert main(["demo", "--model", "ollama/llama3.2", "--base-url", url, "--send", "Hello", "--keep", str(kept)]) == 3
    err = capsys.readouterr().err
    assert (
        f"ollama/llama3.2 at {url} did not answer" in err
        and "is the model's server running and --base-url right?" in err
    )
    imap_port = int(re.search(r"port = (\d+)", (kept / "quinn.toml").read_text()).group(1))  # type: ignore[union-attr]
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", imap_port), timeout=5):
        pass  # the demo's Dovecot was stopped on the way out


def test_demo_without_dovecot_says_how_to_install_it(
    llm_server: ScriptedLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dovecot"
    monkeypatch.setenv("QUINN_DOVECOT_BIN", str(missing))
    assert demo(llm_server, "--send", "Hello") == 2
    err = capsys.readouterr().err
    assert "quinn demo needs Dovecot: apt-get install dovecot-imapd" in err and str(missing) in err
    assert llm_server.requests == []  # nothing started


def test_demo_without_aiosmtpd_says_which_extra_to_install(
    llm_server: ScriptedLLM, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "aiosmtpd", None)  # as if it were not installed: importing it fails
    assert demo(llm_server, "--send", "Hello") == 2
    err = capsys.readouterr().err
    assert "quinn demo needs aiosmtpd" in err and "pip install 'quinn-mail[demo]'" in err


@pytest.mark.timeout(300)
def test_demo_at_the_prompt_answers_shows_memory_and_stops_clean_on_ctrl_c(
    llm_server: ScriptedLLM, brain: Brain, tmp_path: Path
) -> None:
    brain.learn["Lisbon"] = {**NOTHING, "new": [{"content": "The user lives in Lisbon.", "type": "fact"}]}
    env = {**os.environ, "DEMO_LLM_KEY": "test-key", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "quinn", "demo", "--model", "openai/gpt-test",
               "--base-url", llm_server.openai_base_url, "--api-key-env", "DEMO_LLM_KEY"]  # fmt: skip
    lines: list[str] = []
    # A terminal's Ctrl-C, whatever this test runs under: started in the background (`cmd &`, nohup) the test
    # process ignores SIGINT, and a child inherits that, so the demo would never see it (found so: 120 s, killed).
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as proc:  # fmt: skip
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()

        def printed(text: str, timeout_s: float = 120) -> str:
            def shown() -> bool:
                assert proc.poll() is None, f"quinn demo exited with {proc.returncode}:\n{''.join(lines)}"
                return any(text in line for line in lines)

            wait_for(shown, f"{text!r} printed", timeout_s, interval_s=0.05, log=lambda: "".join(lines))
            return "".join(lines)

        try:
            started = printed("Type a message")
            assert proc.stdin is not None
            proc.stdin.write("I live in Lisbon, near the river.\n/memory\n")
            proc.stdin.flush()
            shown = printed("(fact) The user lives in Lisbon.")
            assert "quinn (" in shown and "Noted, thank you." in shown  # the scripted model's reply, read over IMAP
            assert "model check: " in started and "does not echo the mail" in started  # the model check at start
            # Issue 34: an export's attachment is saved where the demo says, and its path shown.
            proc.stdin.write("export my memory\n")
            proc.stdin.flush()
            code = re.search(r"\bQ-[A-Z2-9]{4}(?:-[A-Z2-9]{4})+", printed("Q-")).group(0)  # type: ignore[union-attr]
            proc.stdin.write(f"yes {code}\n")
            proc.stdin.flush()
            attached = Path(re.search(r"attached: (\S+)", printed("attached: ")).group(1))  # type: ignore[union-attr]
            assert "The user lives in Lisbon." in attached.read_text()
            folder = Path(re.search(r"the demo's quinn.toml is (\S+?),? ", started).group(1)).parent  # type: ignore[union-attr]
            imap_port = int(re.search(r"IMAP 127\.0\.0\.1:(\d+)", started).group(1))  # type: ignore[union-attr]
            assert folder.is_dir()
            proc.send_signal(signal.SIGINT)  # Ctrl-C at the prompt
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pytest.fail("quinn demo did not stop within 120 s of Ctrl-C; it printed:\n" + "".join(lines[-60:]))
            assert code == 130
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(10)
    assert not folder.exists()  # the throwaway config and database are gone...
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", imap_port), timeout=5):
        pass  # ...and so is its Dovecot
