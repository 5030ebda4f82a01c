"""Domain detection: which configured subject areas an email is about, by keywords and embedding similarity.

No model call: a keyword (whole word or phrase, any case) decides at once; otherwise the email's most
informative sentences are compared with each domain's description, whole and cut into its phrases (a whole
description of many topics matches any one of them weakly: measured with all-MiniLM-L6-v2, "my dog Rex loves the
beach" scores 0.16 against a pets description and 0.44 against its phrase "dogs"). The best cosine similarity
must reach ``[memory] domain_min_similarity``. Several domains may match, or none.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quinn.config import DomainConfig
from quinn.memory import Embedder, query_chunks

log = logging.getLogger(__name__)

_PHRASE = re.compile(r"[,:;.()]|\band\b|\bor\b")


@dataclass(frozen=True)
class DomainMatch:
    """One domain an email belongs to, how strongly, and why (a keyword, or the similarity)."""

    name: str
    score: float
    reason: str


class DomainDetector:
    """Matches text against the configured domains; description vectors are computed once, on first use."""

    def __init__(self, domains: Sequence[DomainConfig], embedder: Embedder | None, min_similarity: float) -> None:
        self.domains = list(domains)
        self.embedder = embedder
        self.min_similarity = min_similarity
        self._patterns = {
            d.name: [
                re.compile(rf"(?<!\w){re.escape(k.strip())}(?!\w)", re.IGNORECASE) for k in d.keywords if k.strip()
            ]
            for d in self.domains
        }
        self._vectors: np.ndarray | None = None
        self._owners: list[int] = []

    @property
    def names(self) -> list[str]:
        """The configured domain names."""
        return [d.name for d in self.domains]

    def normalise(self, name: str | None) -> str | None:
        """A domain name as configured (case-insensitive), or None for an unknown one."""
        if not name:
            return None
        wanted = name.strip().lower()
        return next((d.name for d in self.domains if d.name == wanted), None)

    def _description_vectors(self) -> tuple[np.ndarray, list[int]] | None:
        """Vectors of each description and of its phrases, with the index of the domain each belongs to."""
        if self.embedder is None or not self.domains:
            return None
        if self._vectors is None:
            texts: list[str] = []
            owners: list[int] = []
            for index, domain in enumerate(self.domains):
                phrases = [p.strip() for p in _PHRASE.split(domain.description) if len(p.strip()) > 2]
                for text in dict.fromkeys([f"{domain.name}: {domain.description}", *phrases]):
                    texts.append(text)
                    owners.append(index)
            self._vectors = self.embedder.embed(texts)
            self._owners = owners
        return self._vectors, self._owners

    def detect(self, text: str) -> list[DomainMatch]:
        """The domains ``text`` belongs to, best first."""
        if not self.domains or not text.strip():
            return []
        found: dict[str, DomainMatch] = {}
        for domain in self.domains:
            for pattern in self._patterns[domain.name]:
                match = pattern.search(text)
                if match:
                    found[domain.name] = DomainMatch(domain.name, 1.0, f"keyword {match.group(0)!r}")
                    break
        described = self._description_vectors()
        chunks = query_chunks(text)
        if described is not None and chunks and self.embedder is not None:
            vectors, owners = described
            similarity = (self.embedder.embed(chunks) @ vectors.T).max(axis=0)  # unit vectors: dot = cosine
            best = [0.0] * len(self.domains)
            for owner, score in zip(owners, similarity, strict=True):
                best[owner] = max(best[owner], float(score))
            for domain, score in zip(self.domains, best, strict=True):
                if domain.name not in found and score >= self.min_similarity:
                    found[domain.name] = DomainMatch(domain.name, float(score), f"similarity {float(score):.2f}")
        return sorted(found.values(), key=lambda m: -m.score)
