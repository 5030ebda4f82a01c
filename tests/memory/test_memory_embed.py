"""Embedders: the OpenAI-compatible endpoint against the scripted server, the local model, the config switch."""

from __future__ import annotations

import numpy as np
import pytest

from quinn.errors import ConfigError, ConnectError
from quinn.memory.embed import LocalEmbedder, OpenAIEmbedder, RecentEmbeddings, build_embedder
from quinn.memory.models import NewMemory
from quinn.memory.store import MemoryStore
from tests.lab.llm_server import ScriptedLLM
from tests.lab.ports import free_port


def test_openai_embedder_batches_and_keeps_order(llm_server: ScriptedLLM):
    embedder = OpenAIEmbedder("nomic-embed-text", llm_server.openai_base_url, "test-key")
    assert (embedder.model_id, embedder.dim) == ("openai/nomic-embed-text", 384)  # found by a probe request
    texts = [f"text number {i}" for i in range(150)] + [""]
    llm_server.reset()
    vectors = embedder.embed(texts)
    requests = llm_server.requests_of("embeddings")
    assert [len(r.body_json["input"]) for r in requests] == [64, 64, 23]  # batched, never one call per text
    assert all(r.body_json["model"] == "nomic-embed-text" for r in requests)
    assert requests[0].path == "/v1/embeddings"
    assert vectors.shape == (151, 384) and vectors.dtype == np.float32
    assert np.allclose(vectors[7], np.array(llm_server.embed("text number 7"), dtype=np.float32), atol=1e-6)
    assert np.allclose(vectors[150], np.array(llm_server.embed(" "), dtype=np.float32), atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_openai_embedder_with_configured_dimensions_is_its_own_model(llm_server: ScriptedLLM):
    embedder = build_embedder("openai", "text-embedding-3-small", llm_server.openai_base_url, "k", dimensions=256)
    assert embedder is not None
    assert (embedder.model_id, embedder.dim) == ("openai/text-embedding-3-small@256", 256)
    assert embedder.embed(["hello"]).shape == (1, 256)
    assert llm_server.requests_of("embeddings")[-1].body_json["dimensions"] == 256


def test_openai_embedder_store_round_trip(llm_server: ScriptedLLM, tmp_path):
    embedder = OpenAIEmbedder("scripted", llm_server.openai_base_url, "k")
    store = MemoryStore.open(str(tmp_path / "m.db"), embedder=embedder)
    try:
        mid = store.add("alice@example.test", "Alice keeps bees")
        hit = store.search("alice@example.test", "Alice keeps bees", k=1)[0]
        assert hit.id == mid and hit.vector_similarity == pytest.approx(1.0, abs=1e-5)
        assert store.get(mid).embedding_model == "openai/scripted"  # type: ignore[union-attr]
        llm_server.reset()
        store.add_many([NewMemory("alice@example.test", f"Alice fact {i}") for i in range(100)])
        assert [len(r.body_json["input"]) for r in llm_server.requests_of("embeddings")] == [64, 36]
    finally:
        store.close()


def test_recent_texts_reach_the_model_once_and_get_the_same_vectors(llm_server: ScriptedLLM):
    embedder = build_embedder("openai", "scripted", llm_server.openai_base_url, "k", dimensions=384)
    assert isinstance(embedder, RecentEmbeddings)  # what the daemon gets
    assert (embedder.model_id, embedder.dim) == ("openai/scripted@384", 384)
    first = embedder.embed(["a question", "a fact"])
    again = embedder.embed(["a fact", "a question", "a fact"])
    third = embedder.embed(["new text", "a question"])
    inputs = [r.body_json["input"] for r in llm_server.requests_of("embeddings")]
    assert inputs == [["a question", "a fact"], ["new text"]]  # only unseen texts, each once
    assert again.shape == (3, 384) and again.dtype == np.float32
    assert np.array_equal(again, first[[1, 0, 1]])
    assert np.allclose(third[0], np.array(llm_server.embed("new text"), dtype=np.float32), atol=1e-6)
    assert embedder.embed([]).shape == (0, 384)


def test_recent_embeddings_forget_the_oldest_text(llm_server: ScriptedLLM):
    embedder = RecentEmbeddings(OpenAIEmbedder("scripted", llm_server.openai_base_url, "k", dimensions=384), size=2)
    for text in ("a", "b", "a", "c", "a", "b"):  # "a" was used again, so "b" is the one "c" pushes out
        embedder.embed([text])
    inputs = [r.body_json["input"] for r in llm_server.requests_of("embeddings")]
    assert inputs == [["a"], ["b"], ["c"], ["b"]]


@pytest.mark.lab  # a real refused TCP connection
def test_unreachable_embeddings_endpoint_is_a_connect_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ConnectError) as info:
        OpenAIEmbedder("nomic-embed-text", url, "k", max_retries=0, timeout_s=5)
    assert f"embeddings endpoint {url}" in str(info.value)
    assert "check embeddings.base_url" in str(info.value)


def test_build_embedder_choices(embedder: LocalEmbedder):
    assert build_embedder("none", "whatever") is None
    with pytest.raises(ConfigError, match=r"embeddings\.backend 'magic' is unknown"):
        build_embedder("magic", "m")
    with pytest.raises(ConfigError, match=r"embeddings\.model 'no-such-model' is not on this machine"):
        build_embedder("local", "no-such-model")
    assert (embedder.model_id, embedder.dim) == ("local/all-MiniLM-L6-v2", 384)
    a, b, c = embedder.embed(["Project Alpha deadline is June 30", "The Alpha project is due end of June", "Pizza"])
    assert float(a @ b) > 0.6 > float(a @ c)  # the real model, not a hash: paraphrases are near


def test_store_open_uses_the_local_model_by_default(tmp_path):
    store = MemoryStore.open(str(tmp_path / "default.db"))
    try:
        assert isinstance(store.embedder, LocalEmbedder) and store.embedder.model_id == "local/all-MiniLM-L6-v2"
    finally:
        store.close()


def test_embeddings_threads_reach_the_local_embedder():
    """``[embeddings] threads`` (default 1) reaches the local model: 2 threads per query were slow on a busy box."""
    from quinn.config import parse_config
    from quinn.memory.embed import embedder_for

    base = {"imap": {"host": "127.0.0.1", "username": "q@example.test", "password_env": "Q_PASSWORD"},
            "smtp": {"host": "127.0.0.1", "from_address": "q@example.test"},
            "llm": {"model": "ollama/llama3.2", "base_url": "http://127.0.0.1:9/v1"}}  # fmt: skip
    config = parse_config(base)
    assert config.embeddings.threads == 1
    embedder = embedder_for(config.embeddings)
    assert isinstance(embedder, RecentEmbeddings) and isinstance(embedder.inner, LocalEmbedder)
    assert embedder.inner.threads == 1
    two = embedder_for(parse_config({**base, "embeddings": {"threads": 2}}).embeddings)
    assert isinstance(two, RecentEmbeddings) and isinstance(two.inner, LocalEmbedder) and two.inner.threads == 2
    with pytest.raises(ConfigError, match=r"embeddings\.threads"):
        parse_config({**base, "embeddings": {"threads": 0}})


def test_the_torch_backend_without_torch_names_the_extra():
    """CI installs no torch: the opt-in backend must then say how to get it, not fail with an ImportError."""
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"needs sentence-transformers and torch.*quinn-mail\[torch\]"):
            build_embedder("sentence-transformers", "all-MiniLM-L6-v2")
    else:
        embedder = build_embedder("sentence-transformers", "all-MiniLM-L6-v2")
        assert embedder is not None and embedder.model_id == "local/all-MiniLM-L6-v2"  # same space as local
