"""The lab's real model server: it starts from the verified weights, answers on 127.0.0.1, behaves as
tests/lab/real_llm.py says (the quirks the scripted server imitates), and is stopped with its whole group."""

from __future__ import annotations

import httpx
import pytest

from tests.lab.process import _group_alive
from tests.lab.real_llm import RealLLM, RealLLMError
from tests.lab.real_model import QWEN_05B, ModelFixtureError, model_dir, verified_path, verify

pytestmark = pytest.mark.realmodel


def test_the_weights_are_the_pinned_file() -> None:
    path = verified_path()
    assert path is not None and path.stat().st_size == QWEN_05B.size


def test_a_file_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QUINN_MODEL_DIR", str(tmp_path))
    (tmp_path / QWEN_05B.filename).write_bytes(b"GGUF not really")
    assert model_dir() == tmp_path and verified_path() is None  # no stamp, wrong size: never loaded
    with pytest.raises(ModelFixtureError, match=f"expected {QWEN_05B.size}"):
        verify(tmp_path / QWEN_05B.filename, QWEN_05B)


def chat(server: RealLLM, **body: object) -> httpx.Response:
    body = {"model": "any", "max_tokens": 40, "temperature": 0, **body}
    return httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=120)


def test_the_server_answers_and_has_the_quirks_the_scripted_one_imitates(real_llm: RealLLM) -> None:
    hello = chat(real_llm, messages=[{"role": "user", "content": "Say hello."}])
    assert hello.status_code == 200 and hello.json()["choices"][0]["message"]["content"].strip()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ask = [{"role": "user", "content": "Which city is the capital of France? Answer in JSON."}]
    refused = chat(real_llm, messages=ask, response_format={"type": "json_schema", "json_schema": {
        "name": "answer", "schema": schema}})  # fmt: skip
    assert refused.status_code == 500
    constrained = chat(real_llm, messages=ask, response_format={"type": "json_object", "schema": schema})
    assert constrained.status_code == 200
    assert "city" in constrained.json()["choices"][0]["message"]["content"]


def test_a_stopped_server_leaves_no_process(real_llm: RealLLM) -> None:
    server = RealLLM(real_llm.model_path, n_ctx=512)
    try:
        server.start()
        pgid = server._proc.pid  # type: ignore[union-attr]
    finally:
        server.close()
    assert not server.running and not _group_alive(pgid)
    with pytest.raises(RealLLMError, match="exited"):
        RealLLM(server.dir / "missing.gguf").start(timeout_s=30)
