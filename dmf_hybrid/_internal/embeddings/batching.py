"""Query embedding shared across concurrent searches: one model call for many callers.

Each search of the service runs in its own thread and needs its query's vector. Embedding
them one at a time keeps one core busy with one short forward pass after another and leaves
the model's batch-size gain unused, so 16 clients get no more throughput than one.
:class:`QueryBatcher` lets them share calls:

- a caller that finds the model idle becomes the *leader*: it takes the queue and embeds it in
  one call, in its own thread, then hands every caller its vector. When the previous batch
  served more than one caller (searches are arriving together), it first waits up to
  ``max_wait_ms`` for more (or until ``max_batch`` texts are queued); a lone client never
  waits;
- callers arriving while a call runs queue up and form the next batch at once, so under load
  batches grow by themselves;
- identical texts in one batch are embedded once; a model error reaches every caller of that
  batch as :class:`~dmf_hybrid._internal.errors.ServiceUnavailable` naming the cause;
- there is no background thread, so nothing can be left running: :meth:`close` refuses new
  callers and lets queued ones finish.

Determinism: a text's vector must not depend on the batch it was in, or a search's scores (rounded
to 6 digits) and near-ties would depend on which other searches ran at the same time. Only embedders
whose rows are the same bits alone and in any batch, and say so with ``batch_invariant = True``, are
batched (:class:`~dmf_hybrid._internal.embeddings.onnx_int8.OnnxEmbedder`,
:class:`~dmf_hybrid._internal.embeddings.HashEmbedder`); :func:`make_query_batcher` gives None for
the others, which keep embedding each query alone. The torch model is one of them: batched, a vector
moves by up to ~1e-7 (padding, and the matrix kernels' blocking, which changes with the number of
rows even among texts of equal token count), enough to change a rounded score."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..config import QUERY_BATCH_SIZE, QUERY_BATCH_WAIT_MS, Settings
from ..errors import ServiceUnavailable, ValidationError
from .base import Embedder, embed_queries

log = logging.getLogger(__name__)


Vector = npt.NDArray[np.float32]


@dataclass
class _Request:
    text: str
    vector: Vector | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class BatcherStats:
    """Counts since the batcher was made (for benchmarks and tests)."""

    calls: int = 0
    """Model calls (one per batch)."""
    texts: int = 0
    """Distinct texts embedded."""
    requests: int = 0
    """Callers served."""
    largest: int = 0
    """Most callers in one batch."""
    sizes: list[int] = field(default_factory=list)
    """Callers per batch, most recent last (at most 1,000 kept)."""


def batch_invariant(embedder: Any) -> bool:
    """Whether an embedder declares that batching never changes a text's vector."""
    return getattr(embedder, "batch_invariant", False) is True


def make_query_batcher(embedder: Embedder, settings: Settings) -> QueryBatcher | None:
    """The batcher a Settings asks for, or None (``query_batch_size`` 0, or an embedder
    whose vectors depend on their batch: each search then embeds its own query)."""
    if not settings.query_batch_size or not batch_invariant(embedder):
        return None
    if getattr(embedder, "gains_from_batching", True) is False:
        return None  # it runs each text alone anyway: sharing calls only serialises them
    return QueryBatcher(embedder, max_batch=settings.query_batch_size,
                        max_wait_ms=settings.query_batch_wait_ms)


class QueryBatcher:
    """Embeds the query texts of concurrent callers together (see the module doc)."""

    def __init__(self, embedder: Embedder, *, max_batch: int = QUERY_BATCH_SIZE,
                 max_wait_ms: float = QUERY_BATCH_WAIT_MS) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValidationError("max_batch must be an integer of at least 1",
                                  field="query_batch_size")
        if not 0 <= max_wait_ms <= 1000:
            raise ValidationError("max_wait_ms must be from 0 to 1000",
                                  field="query_batch_wait_ms")
        self.embedder = embedder
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.stats = BatcherStats()
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._busy = False  # a leader is collecting or embedding a batch
        self._last_size = 1  # callers in the previous batch
        self._closed = False

    def __repr__(self) -> str:
        return (f"QueryBatcher(max_batch={self.max_batch}, max_wait_ms={self.max_wait * 1000:g}"
                f", closed={self._closed})")

    def embed(self, text: str) -> Vector:
        """The vector of one query text (1-D float32, unit norm), embedded in a shared batch."""
        if not isinstance(text, str):
            raise ValidationError("a query text must be a string", field="text")
        me = _Request(text)
        with self._cond:
            if self._closed:
                raise ServiceUnavailable("the query embedder is closed")
            self._queue.append(me)
            self._cond.notify_all()  # a leader waiting for its batch to fill
            while not me.done and (self._busy or self._queue[0] is not me):
                self._cond.wait()
            if not me.done:  # the model is idle and this caller is first in line: lead
                self._busy = True
        if not me.done:
            self._lead()
        if me.error is not None:
            raise ServiceUnavailable(
                f"embedding the query failed: {type(me.error).__name__}: {me.error}",
                cause=type(me.error).__name__) from me.error
        assert me.vector is not None
        return me.vector

    def _lead(self) -> None:
        """Collect a batch (bounded wait), embed it outside the lock, hand out the vectors."""
        batch: list[_Request] = []
        try:
            with self._cond:
                wait = self.max_wait if self._last_size > 1 else 0.0
                deadline = time.monotonic() + wait
                while len(self._queue) < self.max_batch and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = self._queue[:self.max_batch]
                del self._queue[:self.max_batch]
                self._last_size = len(batch)
            self._embed_batch(batch)
        finally:
            with self._cond:
                for request in batch:
                    if not request.done:  # interrupted before the vectors were handed out
                        request.error = request.error or ServiceUnavailable("interrupted")
                        request.done = True
                self._busy = False
                self._cond.notify_all()

    def _embed_batch(self, batch: list[_Request]) -> None:
        texts = list(dict.fromkeys(r.text for r in batch))  # distinct, first-seen order
        try:
            vectors = self._vectors(texts)
        except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
            log.warning("query embedding failed for a batch of %d: %s", len(batch), exc)
            for request in batch:
                request.error = exc
        else:
            for request in batch:
                request.vector = vectors[request.text]
        with self._cond:
            for request in batch:
                request.done = True
            stats = self.stats
            stats.calls += 1
            stats.texts += len(texts)
            stats.requests += len(batch)
            stats.largest = max(stats.largest, len(batch))
            stats.sizes.append(len(batch))
            del stats.sizes[:-1000]

    def _vectors(self, texts: list[str]) -> dict[str, Vector]:
        matrix = embed_queries(self.embedder, texts)
        if matrix.shape[0] != len(texts):
            raise ServiceUnavailable(
                f"the embedder returned {matrix.shape[0]} vectors for {len(texts)} texts")
        # rows of their own, not views that would keep the whole batch alive in the cache
        return {text: row.copy() for text, row in zip(texts, matrix, strict=True)}

    def close(self) -> None:
        """Refuse new callers; callers already queued are still served (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed


__all__ = ["BatcherStats", "QueryBatcher", "batch_invariant", "make_query_batcher"]
