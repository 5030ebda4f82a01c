"""quinn.sdks: the quinn command imports only the model SDKs its config names (issue 19: start-up time).

Each case runs in a fresh interpreter: the test process itself keeps every SDK (it imported them already)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from quinn.config import LlmConfig
from quinn.errors import ConfigError
from quinn.sdks import skip_unused
skipped = skip_unused(LlmConfig(model=sys.argv[1]))
import quinn.app  # Mirascope and every provider it can import
from quinn.agent.llm import LLM
try:
    LLM(LlmConfig(model="anthropic/claude-test", base_url="http://127.0.0.1:1"))  # a reload to Anthropic
    refused = None
except ConfigError as exc:
    refused = str(exc)
print(json.dumps({"skipped": skipped, "anthropic": "anthropic" in sys.modules,
                  "google": "google.genai" in sys.modules, "openai": "openai" in sys.modules, "refused": refused}))
"""


def probe(model: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, model], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.lab  # runs a process
def test_only_the_configured_providers_sdk_is_imported() -> None:
    lean = probe("openai/gpt-test")
    assert lean["skipped"] == ["anthropic", "google"]
    assert (lean["anthropic"], lean["google"], lean["openai"]) == (False, False, True)
    assert "started without the anthropic SDK" in lean["refused"] and "restart quinn" in lean["refused"]


@pytest.mark.lab  # runs a process
def test_a_configured_provider_keeps_its_sdk() -> None:
    anthropic = probe("anthropic/claude-test")
    assert anthropic["skipped"] == ["google"]
    assert anthropic["anthropic"] and not anthropic["google"]
    assert anthropic["refused"] is None  # its SDK is there: registering it works
