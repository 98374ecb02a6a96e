"""A tiny deterministic feature-hashing embedder for tests: no model, no torch, the same
vectors in every process.
"""

from __future__ import annotations

import hashlib
import logging
import re
from functools import lru_cache

import numpy as np

from dmf_hybrid._internal.errors import ValidationError

from .base import FloatMatrix, check_texts

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % dim, (1.0 if value >> 63 else -1.0)


class HashEmbedder:
    """A deterministic feature-hashing embedder for tests (no model, same output everywhere).

    Features are the lower-cased word tokens (weight 1) and the character trigrams of each
    word padded with ``#`` (weight 0.25), hashed with BLAKE2b to a signed bucket. Texts that
    share words therefore have a higher cosine than unrelated texts. A text without
    features gets a fixed unit vector.
    """

    WORD_WEIGHT = 1.0
    #: Each text's vector is computed alone, so batching never changes it.
    batch_invariant = True
    TRIGRAM_WEIGHT = 0.25

    def __init__(self, dim: int = 64) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValidationError("dim must be an integer of at least 2", field="dim")
        self.dim = dim
        self.model_id = f"hash-{dim}"
        empty = np.zeros(dim, dtype=np.float32)
        index, sign = _bucket("\x00empty", dim)
        empty[index] = sign
        self._empty = empty

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim})"

    def _vector(self, text: str) -> FloatMatrix:
        vec = np.zeros(self.dim, dtype=np.float64)
        for word in _WORD.findall(text.lower()):
            index, sign = _bucket("w:" + word, self.dim)
            vec[index] += sign * self.WORD_WEIGHT
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                index, sign = _bucket("t:" + padded[i : i + 3], self.dim)
                vec[index] += sign * self.TRIGRAM_WEIGHT
        norm = float(np.linalg.norm(vec))
        if norm < 1e-12:
            return self._empty.copy()
        return (vec / norm).astype(np.float32)

    def embed(self, texts: list[str]) -> FloatMatrix:
        """An ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        items = check_texts(texts)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        for row, text in enumerate(items):
            out[row] = self._vector(text)
        return out
