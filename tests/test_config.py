"""Configuration: strict validation, one clear line per mistake, and an example file that documents every key."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from quinn.config import LIST_SECTIONS, SECTIONS, Config, load_config, parse_config
from quinn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "deploy" / "quinn.example.toml"
MINIMAL = """
[imap]
host = "imap.example.org"
username = "quinn@example.org"
password_env = "Q_IMAP"
[smtp]
host = "smtp.example.org"
from_address = "Quinn@Example.org"
[llm]
model = "ollama/llama3.2"
base_url = "http://localhost:11434/v1"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quinn.toml"
    path.write_text(text, encoding="utf-8")
    return path


def example_keys() -> dict[str, set[str]]:
    """Keys in the example file, commented-out ones included (a '# key = value' line documents a key)."""
    keys: dict[str, set[str]] = {"": set()}
    section = ""
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        stripped = line.lstrip("# ").strip()
        header = line.removeprefix("# ")  # a commented-out table ("# [[console.admins]]") documents one too
        if header.startswith("[") and "]" in header:
            section = header.lstrip("[")[: header.lstrip("[").index("]")]
            keys[section] = set()
        elif "=" in stripped and not stripped.startswith(("#", "[")) and " " not in stripped.split("=")[0].strip():
            keys[section].add(stripped.split("=")[0].strip())
    return keys


def test_example_documents_every_key():
    documented = example_keys()
    for name, section in {**SECTIONS, **LIST_SECTIONS}.items():
        missing = set(section.model_fields) - documented.get(name, set())
        assert not missing, f"deploy/quinn.example.toml lacks [{name}] {sorted(missing)}"
        unknown = documented.get(name, set()) - set(section.model_fields)
        assert not unknown, f"deploy/quinn.example.toml documents unknown [{name}] {sorted(unknown)}"
    top = {n for n, f in Config.model_fields.items() if n not in SECTIONS and n not in LIST_SECTIONS}
    assert top <= documented[""]


def test_example_is_valid_config():
    env = {"QUINN_IMAP_PASSWORD": "x", "OPENAI_API_KEY": "y"}
    config = load_config(EXAMPLE, env=env)
    assert config.imap.secret("password") == "x"
    assert config.llm.secret("api_key") == "y"
    assert tomllib.loads(EXAMPLE.read_text())["llm"]["model"] == config.llm.model


def test_minimal_config_defaults_and_secrets(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), env={"Q_IMAP": "pw"})
    assert config.smtp.from_address == "quinn@example.org"
    assert config.imap.secret("password") == "pw"
    assert config.database.url == str(tmp_path / "quinn.db")  # relative paths are relative to the file
    assert "pw" not in repr(config)


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        (MINIMAL.replace('host = "imap.example.org"\n', ""), {"Q_IMAP": "x"}, "missing key imap.host"),
        (MINIMAL + "\n[imap2]\n", {"Q_IMAP": "x"}, "unknown key imap2"),
        (MINIMAL.replace("[llm]", "[llm]\ntimeout = 3"), {"Q_IMAP": "x"}, "unknown key llm.timeout"),
        (MINIMAL, {}, "imap.password_env names the environment variable Q_IMAP, which is not set"),
        (MINIMAL.replace('"ollama/llama3.2"', '"llama3"'), {"Q_IMAP": "x"}, 'llm.model: must be "provider/model"'),
        (MINIMAL.replace('"Quinn@Example.org"', '"quinn"'), {"Q_IMAP": "x"}, "smtp.from_address: must be an email"),
        (MINIMAL + "\n[imap.x]\n", {"Q_IMAP": "x"}, "unknown key imap.x"),
        (MINIMAL.replace("[smtp]", "[smtp]\nport = 70000"), {"Q_IMAP": "x"}, "smtp.port"),
        ("not toml [", {}, "is not valid TOML"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, text, env, expected):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=env)
    assert expected in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_parse_config_requires_sections():
    with pytest.raises(ConfigError, match="missing key imap"):
        parse_config({})


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quinn", *args], capture_output=True, text=True, timeout=60,
                          env=env)  # fmt: skip


@pytest.mark.lab  # runs a process
def test_cli_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("quinn ")


@pytest.mark.lab  # runs a process
def test_cli_missing_key_is_one_line(tmp_path):
    path = write(tmp_path, MINIMAL.replace('host = "smtp.example.org"\n', ""))
    result = run_cli("run", "-c", str(path), env={"Q_IMAP": "x", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "missing key smtp.host" in lines[0]


@pytest.mark.lab  # runs a process
def test_cli_missing_file_is_one_line(tmp_path):
    result = run_cli("check", "-c", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "not found" in result.stderr


def test_trust_defaults_to_authenticated_and_the_old_switch_says_what_replaced_it(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), env={"Q_IMAP": "pw"})
    assert (config.policy.trust, config.policy.authserv_id, config.policy.received_above_stamp) == (
        "authenticated", None, 0
    )  # fmt: skip
    for old, new in (("true", '"authenticated"'), ("false", '"insecure-from-header"')):
        path = write(tmp_path, MINIMAL + f"\n[policy]\nrequire_authentication = {old}\n")
        with pytest.raises(ConfigError, match=f"replaced by policy.trust: write trust = {new}"):
            load_config(path, env={"Q_IMAP": "pw"})
    path = write(tmp_path, MINIMAL + '\n[policy]\ntrust = "from-header"\n')
    with pytest.raises(ConfigError, match=r"policy\.trust"):
        load_config(path, env={"Q_IMAP": "pw"})


def test_an_idless_stamp_and_an_authserv_id_are_one_too_many(tmp_path):
    """Exchange Online's stamp has no id: with an id configured as well, it is unclear which server stamps."""
    idless = MINIMAL + "\n[policy]\nidless_stamp = true\nreceived_above_stamp = 3\n"
    assert load_config(write(tmp_path, idless), env={"Q_IMAP": "pw"}).policy.idless_stamp is True
    both = idless + 'authserv_id = "mx.example.org"\n'
    with pytest.raises(ConfigError, match=r"idless_stamp = true and policy\.authserv_id are both set"):
        load_config(write(tmp_path, both), env={"Q_IMAP": "pw"})


def test_every_problem_of_a_file_at_once_with_did_you_mean(tmp_path):
    """An empty file used to take one round per key; a misspelled required key was reported as missing."""
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), env={})
    text = str(info.value)
    assert "3 problems" in text
    assert all(f"missing key {s}" in text for s in ("imap", "smtp", "llm"))
    typo = MINIMAL.replace('host = "imap.example.org"', 'hots = "imap.example.org"').replace(
        "[llm]", "[llm]\ntimout_s = 3"
    )
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, typo), env={"Q_IMAP": "x"})
    text = str(info.value)
    assert "unknown key imap.hots: did you mean imap.host?" in text and "missing key imap.host" not in text
    assert "unknown key llm.timout_s: did you mean llm.timeout_s?" in text and "2 problems" in text
    with pytest.raises(ConfigError, match=r"unknown key polcy: did you mean policy\?"):
        load_config(write(tmp_path, MINIMAL + "\n[polcy]\nallow = []\n"), env={"Q_IMAP": "x"})
    with pytest.raises(ConfigError, match=r"unknown key domains\.0\.keywrds: did you mean domains\.0\.keywords\?"):
        load_config(write(tmp_path, MINIMAL + '\n[[domains]]\nname = "w"\ndescription = "d"\nkeywrds = []\n'),
                    env={"Q_IMAP": "x"})  # fmt: skip
