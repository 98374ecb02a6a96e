"""A caller's embedding function (or LangChain ``Embeddings``) as this project's Embedder.

The memory records one embedding model: every cached vector is keyed by the embedder's
``model_id``. Wrapping the caller's function gives it its own ID (``caller:<name>:<dim>``
unless one is given), so the memory opened with it keeps those vectors apart from any other
model's, and reopening the same directory with another embedder reindexes, as changing the
``embedder`` setting does. Documents are embedded with ``embed_documents`` (of an
``Embeddings``) or the function, queries with ``embed_query`` (the function again, for a
function), as LangChain and LangGraph embed them. An ``async`` function (or one returning an
awaitable) is awaited on an event loop of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._internal.embeddings.base import FloatMatrix, check_texts
from .._internal.errors import ValidationError

EmbedFunction = Callable[[Sequence[str]], Sequence[Sequence[float]]]


def _settled(result: Any) -> Any:
    """``result``, awaited on an event loop of its own thread when it is awaitable (the
    caller may already be inside a running loop)."""
    if not inspect.isawaitable(result):
        return result

    async def wait() -> Any:
        return await result

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def _function_of(embed: Any) -> tuple[EmbedFunction, str]:
    """The batch function of ``embed`` and a name for it."""
    if hasattr(embed, "embed_documents"):
        return embed.embed_documents, f"{type(embed).__module__}.{type(embed).__qualname__}"
    if callable(embed):
        name = getattr(embed, "__qualname__", None) or type(embed).__qualname__
        return embed, f"{getattr(embed, '__module__', None) or 'function'}.{name}"
    raise ValidationError("embed must be an Embeddings object or a function of a list of texts",
                          field="embed")


class CallerEmbedder:
    """An Embedder around a function of texts (or an ``Embeddings``); rows L2-normalised."""

    batch_invariant = False

    def __init__(self, embed: Any, *, dim: int | None = None,
                 model_id: str | None = None) -> None:
        self._embed, name = _function_of(embed)
        query = getattr(embed, "embed_query", None)
        self._query: Callable[[str], Sequence[float]] | None = (
            query if callable(query) else None)
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ValidationError("dims must be a positive integer", field="dims")
        self._dim = dim
        self._name = name
        self._model_id = model_id
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CallerEmbedder({self._name}, dim={self._dim})"

    @property
    def dim(self) -> int:
        if self._dim is None:
            with self._lock:
                if self._dim is None:
                    self._dim = int(self._call(["dimension probe"]).shape[1])
        return self._dim

    @property
    def model_id(self) -> str:
        return self._model_id or f"caller:{self._name}:{self.dim}"

    def _call(self, texts: list[str], query: bool = False) -> FloatMatrix:
        if query and self._query is not None:
            rows: Any = [_settled(self._query(t)) for t in texts]
        else:
            rows = _settled(self._embed(texts))
        matrix = np.asarray([list(r) for r in rows], dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ValidationError(f"the embedding function returned {matrix.shape[0]} vectors "
                                  f"for {len(texts)} texts", field="embed")
        if not np.all(np.isfinite(matrix)):
            raise ValidationError("the embedding function returned a non-finite number",
                                  field="embed")
        return matrix

    def embed(self, texts: list[str]) -> FloatMatrix:
        """Document vectors (``embed_documents``, or the function)."""
        return self._embed_texts(texts, query=False)

    def embed_queries(self, texts: list[str]) -> FloatMatrix:
        """Query vectors (``embed_query`` of an ``Embeddings``, else the function)."""
        return self._embed_texts(texts, query=True)

    def _embed_texts(self, texts: list[str], query: bool) -> FloatMatrix:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        matrix = self._call(texts, query)
        if matrix.shape[1] != self.dim:
            raise ValidationError(f"the embedding function returned {matrix.shape[1]} "
                                  f"dimensions, not {self.dim}", field="embed")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
