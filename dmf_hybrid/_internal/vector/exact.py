"""ExactIndex: an in-memory, exact (brute-force) VectorIndex on numpy.

It is the fake that ships with the package for tests, and the search planner's exact scorer:
:meth:`ExactIndex.score_ids` ranks a candidate ID set found by a DuckDB filter with recall 1.0.

Each collection keeps a float32 matrix of L2-normalised rows (capacity doubles as it grows),
an id -> row dict, and deletes by moving the last row into the hole (swap-remove), so the live
rows are always ``matrix[:size]``. A readers-writer lock lets many readers score at once while
one writer mutates; a reader always sees a state between two whole operations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from dmf_hybrid._internal.errors import NotFound, SchemaError
from dmf_hybrid._internal.vector.base import (
    Metadata,
    MetadataValue,
    check_batch,
    check_collection_name,
    check_dim,
    check_n,
    check_query_vector,
    older_than_stored,
)

_MIN_CAPACITY = 16

FloatMatrix = npt.NDArray[np.float32]


class ReadWriteLock:
    """Many readers or one writer; a waiting writer blocks new readers (no writer starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._reading = _Reading(self)

    def read(self) -> _Reading:
        """A context manager holding a read lock while it is entered (one object for every
        reader: it keeps no state of its own, and is half the cost of a generator's)."""
        return self._reading

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Reading:
    """Entering it takes a read lock of its :class:`ReadWriteLock`; leaving gives it back."""

    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        lock = self._lock
        with lock._cond:
            while lock._writer or lock._writers_waiting:
                lock._cond.wait()
            lock._readers += 1

    def __exit__(self, *exc: object) -> None:
        lock = self._lock
        with lock._cond:
            lock._readers -= 1
            if not lock._readers:
                lock._cond.notify_all()


class _Collection:
    """The rows of one collection; callers hold the index lock."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix: FloatMatrix = np.zeros((_MIN_CAPACITY, dim), dtype=np.float32)
        self.size = 0
        self.row_ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.metadata: dict[str, Metadata] = {}

    def _reserve(self, needed: int) -> None:
        capacity = self.matrix.shape[0]
        if needed <= capacity:
            return
        grown = np.zeros((max(needed, 2 * capacity), self.dim), dtype=np.float32)
        grown[: self.size] = self.matrix[: self.size]
        self.matrix = grown

    def upsert(self, ids: list[str], unit_rows: FloatMatrix, metadatas: list[Metadata]) -> None:
        targets = np.empty(len(ids), dtype=np.intp)
        new = [i for i, id_ in enumerate(ids) if id_ not in self.rows]
        self._reserve(self.size + len(new))
        for i in new:
            self.rows[ids[i]] = self.size
            self.row_ids.append(ids[i])
            self.size += 1
        for i, id_ in enumerate(ids):
            targets[i] = self.rows[id_]
            self.metadata[id_] = metadatas[i]
        self.matrix[targets] = unit_rows

    def delete(self, ids: Sequence[str]) -> None:
        for id_ in ids:
            row = self.rows.pop(id_, None)
            if row is None:
                continue
            del self.metadata[id_]
            last = self.size - 1
            if row != last:
                moved = self.row_ids[last]
                self.matrix[row] = self.matrix[last]
                self.row_ids[row] = moved
                self.rows[moved] = row
            self.row_ids.pop()
            self.size = last
        capacity = self.matrix.shape[0]
        if capacity > 4 * _MIN_CAPACITY and self.size < capacity // 4:
            self.matrix = self.matrix[: max(2 * self.size, _MIN_CAPACITY)].copy()


def normalise_rows(matrix: FloatMatrix) -> FloatMatrix:
    """``matrix`` with each row scaled to unit L2 norm (zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: FloatMatrix = (matrix / norms).astype(np.float32, copy=False)
    return unit


def precise_scores(unit_rows: npt.NDArray[np.float32], query: npt.NDArray[np.float64]
                   ) -> npt.NDArray[np.float64]:
    """Cosine of each unit row with a unit query in float64, independent of the row's batch."""
    if not len(unit_rows):
        return np.zeros(0, dtype=np.float64)
    scores: npt.NDArray[np.float64] = (unit_rows.astype(np.float64) * query).sum(axis=1)
    return scores


def top_k(
    scores: FloatMatrix, ids: Sequence[str], k: int, rows: npt.NDArray[np.intp] | None = None
) -> list[tuple[str, float]]:
    """The ``k`` best (id, score) pairs, sorted by score desc then id asc.

    ``scores[i]`` belongs to ``ids[rows[i]]`` (or ``ids[i]`` without ``rows``). argpartition
    finds the k-th best score; every entry tied with it is kept before the final sort, so ties
    at the cut are decided by ID, never by partition order.
    """
    m = scores.shape[0]
    if k <= 0 or m == 0:
        return []
    if k < m:
        kth = np.argpartition(scores, m - k)[m - k :]
        threshold = scores[kth].min()
        candidates = np.flatnonzero(scores >= threshold)
    else:
        candidates = np.arange(m)
    labels = candidates if rows is None else rows[candidates]
    hits = [
        (ids[label], float(score))
        for label, score in zip(labels.tolist(), scores[candidates].tolist(), strict=True)
    ]
    hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return hits[:k]


class ExactIndex:
    """An exact in-memory VectorIndex; thread-safe for many readers and one writer."""

    shared = False  # one process's memory

    def __init__(self) -> None:
        self._lock = ReadWriteLock()
        self._collections: dict[str, _Collection] = {}

    def _get(self, name: str) -> _Collection:
        col = self._collections.get(name)
        if col is None:
            raise NotFound(f"vector collection {name!r} does not exist", collection=name)
        return col

    def ensure_collection(self, name: str, dim: int) -> None:
        """Create the collection if missing; SchemaError if it exists with another dim."""
        check_collection_name(name)
        check_dim(dim)
        with self._lock.write():
            col = self._collections.get(name)
            if col is None:
                self._collections[name] = _Collection(dim)
            elif col.dim != dim:
                raise SchemaError(
                    f"vector collection {name!r} has dimension {col.dim}, not {dim}",
                    field="dim",
                    collection=name,
                    existing_dim=col.dim,
                    requested_dim=dim,
                )

    def upsert(
        self,
        name: str,
        ids: Sequence[str],
        vectors: npt.ArrayLike,
        metadatas: Sequence[Mapping[str, MetadataValue | None]],
        keep_newer: str | None = None,
    ) -> None:
        """Insert or fully replace vector and metadata of each ID (with ``keep_newer``: of
        each ID whose stored value of that key is not greater than the new one's)."""
        with self._lock.read():
            dim = self._get(name).dim
        id_list, matrix, clean = check_batch(ids, vectors, metadatas, dim)
        if not id_list:
            return
        unit_rows = normalise_rows(matrix)
        with self._lock.write():
            col = self._get(name)
            if col.dim != dim:  # dropped and re-created meanwhile
                raise SchemaError(f"vector collection {name!r} changed dimension", collection=name)
            if keep_newer is not None:
                older = older_than_stored(col.metadata, id_list, clean, keep_newer)
                keep = [i for i in range(len(id_list)) if i not in older]
                id_list, unit_rows = [id_list[i] for i in keep], unit_rows[keep]
                clean = [clean[i] for i in keep]
            col.upsert(id_list, unit_rows, clean)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Remove the IDs; unknown IDs and an unknown collection are ignored."""
        with self._lock.write():
            col = self._collections.get(name)
            if col is not None:
                col.delete(list(ids))

    def query(self, name: str, vector: npt.ArrayLike, n: int) -> list[tuple[str, float]]:
        """Top ``n`` (id, cosine similarity) over all rows, exact; sim desc then id asc."""
        check_n(n)
        with self._lock.read():
            col = self._get(name)
            query = _unit(check_query_vector(vector, col.dim))
            scores = col.matrix[: col.size] @ query
            return top_k(scores, col.row_ids, n)

    def score_ids(
        self, name: str, vector: npt.ArrayLike, ids: Sequence[str], k: int
    ) -> list[tuple[str, float]]:
        """Top ``k`` (id, cosine similarity) among ``ids``, exact; sim desc then id asc.

        IDs not in the collection are skipped; repeated IDs count once.
        """
        check_n(k)
        with self._lock.read():
            col = self._get(name)
            query = _unit(check_query_vector(vector, col.dim))
            get = col.rows.get
            found = [row for row in map(get, ids) if row is not None]
            if not found:
                return []
            if len(set(found)) != len(found):
                found = list(dict.fromkeys(found))
            rows = np.array(found, dtype=np.intp)
            scores = np.take(col.matrix, rows, axis=0) @ query
            return top_k(scores, col.row_ids, k, rows)

    def has(self, name: str, id: str) -> bool:
        """Whether the collection exists and holds ``id``."""
        with self._lock.read():
            col = self._collections.get(name)
            return col is not None and id in col.rows

    def vector(self, name: str, id: str) -> FloatMatrix | None:
        """A copy of the stored (unit-normalised) vector of ``id``, or None if absent."""
        with self._lock.read():
            col = self._get(name)
            row = col.rows.get(id)
            return None if row is None else col.matrix[row].copy()

    def records(self, name: str) -> dict[str, Metadata]:
        """Every ID of the collection with a copy of its metadata, in ID order."""
        with self._lock.read():
            col = self._get(name)
            return {id_: dict(col.metadata[id_]) for id_ in sorted(col.metadata)}

    def meta_value(self, name: str, id: str, key: str) -> MetadataValue | None:
        """One metadata value of ``id`` (None if the collection, ID or key is absent)."""
        col = self._collections.get(name)
        if col is None:
            return None
        meta = col.metadata.get(id)
        return None if meta is None else meta.get(key)

    def count(self, name: str) -> int:
        """Number of vectors in the collection."""
        with self._lock.read():
            return self._get(name).size

    def dim(self, name: str) -> int:
        """The collection's dimension."""
        with self._lock.read():
            return self._get(name).dim

    def drop(self, name: str) -> None:
        """Delete the collection; an unknown one is ignored."""
        with self._lock.write():
            self._collections.pop(name, None)

    def collections(self) -> list[str]:
        """Names of all collections, sorted."""
        with self._lock.read():
            return sorted(self._collections)


def _unit(vector: FloatMatrix) -> FloatMatrix:
    norm = float(np.linalg.norm(vector))
    return vector if norm == 0.0 else (vector / norm).astype(np.float32, copy=False)
