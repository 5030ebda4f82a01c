"""Which model-provider SDKs the ``quinn`` process imports (issue 19: start-up time).

``import mirascope.llm`` imports every provider SDK it knows, whichever the config uses: google-genai and
anthropic alone took 1.5-2 s of a 3.4-3.9 s ``import quinn.app`` on a shared 2-core machine. Mirascope's own
answer to an SDK that is not installed is to stub that provider out (``mirascope._stubs``). ``skip_unused``
makes the SDKs the config does not name look not installed to this process, before Mirascope is imported;
openai is always kept (the OpenAI-compatible path and Mirascope's OpenAI-based providers use it).

Only the ``quinn`` command does this (``cli.main(lean_imports=True)``, from the console script and ``python -m
quinn``): a process that imports Quinn as a library, or the test process, keeps every SDK. A reload that switches
to a provider skipped at start is refused with the reason (``LLM`` asks ``skipped``): it needs a restart.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec

from quinn.config import LlmConfig

# provider prefix -> the top-level modules of its SDK that Mirascope imports
SKIPPABLE = {"anthropic": ("anthropic",), "google": ("google.genai",)}


class _SkipSdks(MetaPathFinder):
    """Makes the SDK modules of ``prefixes`` fail to import, as if not installed."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        self.prefixes = tuple(prefixes)
        self.roots = tuple(root for p in self.prefixes for root in SKIPPABLE[p])

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if any(name == root or name.startswith(root + ".") for root in self.roots):
            raise ModuleNotFoundError(f"{name} is not loaded by this quinn process (its config names no such model)",
                                      name=name)  # fmt: skip
        return None


def needed(config: LlmConfig) -> set[str]:
    """The provider prefixes the configured models use."""
    return {model.split("/", 1)[0] for model in (config.model, config.background_model) if model}


def skip_unused(config: LlmConfig) -> list[str]:
    """Keep the SDKs of providers ``config`` does not use from being imported; returns the prefixes skipped.

    A no-op once Mirascope is imported (it has imported them all) or for an SDK already imported.
    """
    if "mirascope.llm" in sys.modules:
        return []
    prefixes = [p for p, roots in SKIPPABLE.items() if p not in needed(config) and not set(roots) & set(sys.modules)]
    if prefixes:
        sys.meta_path.insert(0, _SkipSdks(prefixes))
    return prefixes


def skipped(prefix: str) -> bool:
    """Whether this process was started without the SDK of ``prefix``."""
    return any(isinstance(f, _SkipSdks) and prefix in f.prefixes for f in sys.meta_path)
