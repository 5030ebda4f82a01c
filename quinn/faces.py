"""Package faces that load on first use (PEP 562), for packages whose modules are costly to import.

A face is what other packages may use of a package (its ``__all__``; tests/test_layers.py holds every caller to
it). ``quinn.agent``'s modules import the model SDKs, which ``sdks.skip_unused`` must see before anyone imports
them, and ``quinn.mailbox``'s the IMAP and SMTP clients; `quinn --help` needs none of them. So such a face maps
each name to the module it lives in and imports that module when the name is first read; a type checker reads
the same names from the face's ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``homes`` maps each exported name to its module ("" for a module
    exported as a namespace: ``from quinn.agent import proposals``)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{homes[name] or name}")
        value = module if not homes[name] else getattr(module, name)
        namespace[name] = value  # later reads are plain attribute reads
        return value

    return __getattr__
