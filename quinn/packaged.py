"""Files the wheel carries beside the code (pyproject.toml force-includes them), found in a source checkout too.

The docs and error hints point at these: the example config (``quinn config example``), the systemd unit, and
the labelled set of ``quinn eval extraction``. In the wheel they live under ``quinn/_deploy`` and
``quinn/_data``; in a checkout (``pip install -e .``) at their places in the tree.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from quinn.errors import ConfigError

# name -> (folder inside the installed package, folder in a source checkout)
FILES = {
    "quinn.example.toml": ("_deploy", "deploy"),
    "quinn.service": ("_deploy", "deploy"),
    "extraction_eval.jsonl": ("_data", "tests/data"),
}


def packaged_file(name: str) -> Path:
    """The path of one of ``FILES``: the wheel's copy, else the checkout's."""
    inside, checkout = FILES[name]
    for path in (
        Path(str(resources.files("quinn"))) / inside / name,
        Path(__file__).resolve().parents[1] / checkout / name,
    ):
        if path.is_file():
            return path
    raise ConfigError(f"{name} is missing from this installation of Quinn", "reinstall quinn-mail")
