"""ChromaIndex: the VectorIndex on ChromaDB (embedded persistent, ephemeral, or HTTP server).

Chroma traps this module handles so callers need not:

- ``embedding_function=None`` always (Chroma's default downloads a model);
- cosine space is set at creation (``configuration={"hnsw": {"space": "cosine"}}``) and
  cannot change afterwards; an existing collection in another space is a SchemaError;
- Chroma infers a collection's dimension from its first vector, so the dimension is also
  recorded in the collection metadata (``dmf_dim``) and checked by ``ensure_collection``;
- ``upsert`` merges metadata keys: keys of the stored metadata that the new metadata lacks are
  sent as ``None``, which Chroma deletes, so the new metadata replaces the old one whole
  (assumes one writer per collection, as the indexer is);
- re-writing the vector of an existing ID is slow in Chroma (~60 per second here, against
  ~500 new IDs per second), so an ID whose stored vector is unchanged gets a metadata-only
  ``update`` (~2,700 per second) and an entirely unchanged ID is not written at all;
- ``add`` of an existing ID is ignored and ``update`` of a missing ID is a no-op: neither is
  used; an empty metadata dict is rejected by Chroma and sent as ``None``;
- writes go in batches below the client's maximum batch size; ``query`` may ask for more than
  the collection holds (Chroma 1.5 returns what it has); HNSW may still return fewer than
  asked (callers widen, not this class), and cuts ties arbitrarily, so ``query`` over-fetches
  until the tie at the n-th place is resolved by ID.

All ephemeral clients of one process share one in-memory system: give each test its own
collection names, or use persistent clients in temporary directories.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from dmf_hybrid._internal.errors import (
    DMFError,
    NotFound,
    SchemaError,
    ServiceUnavailable,
    ValidationError,
)
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

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

logger = logging.getLogger(__name__)

#: Collection metadata key holding the dimension the collection was created for.
DIM_KEY = "dmf_dim"
#: Upper bound on one write or page request, below Chroma's own maximum batch size.
DEFAULT_BATCH_SIZE = 1000
#: Chroma's ``hnsw`` configuration keys that may be set at creation, besides ``space``.
HNSW_KEYS = frozenset({"ef_construction", "ef_search", "max_neighbors", "num_threads"})
#: A stored vector within this (relative) distance of the new one counts as unchanged.
VECTOR_ATOL = 1e-6

T = TypeVar("T")


def _import_chromadb() -> Any:
    # chromadb is imported when a ChromaIndex is built (start-up cost: about a second; an
    # ExactIndex memory never pays it), so are its config and errors below
    try:
        import chromadb
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ServiceUnavailable(
            "the chromadb package is not installed; install it with `pip install chromadb`",
            package="chromadb",
        ) from exc
    return chromadb


def _settings() -> Any:
    from chromadb.config import Settings  # start-up cost, see _import_chromadb

    return Settings(anonymized_telemetry=False)


@contextmanager
def _chroma_errors(name: str | None = None) -> Iterator[None]:
    """Turn Chroma and transport exceptions into the dmf_hybrid error tree."""
    try:
        yield
    except DMFError:
        raise
    except Exception as exc:
        # start-up cost, see _import_chromadb
        from chromadb.errors import ChromaError, InvalidArgumentError
        from chromadb.errors import NotFoundError as ChromaNotFound

        if isinstance(exc, ChromaNotFound):
            raise NotFound(f"vector collection {name!r} does not exist", collection=name) from exc
        if isinstance(exc, InvalidArgumentError | ValueError | TypeError):
            raise ValidationError(f"Chroma rejected the request: {exc}", collection=name) from exc
        try:  # httpx comes with chromadb, which may be a remote client here
            import httpx

            transport_error: tuple[type[BaseException], ...] = (httpx.TransportError,)
        except ImportError:  # pragma: no cover - httpx ships with chromadb
            transport_error = ()
        if isinstance(exc, (ChromaError, ConnectionError, OSError, *transport_error)):
            raise ServiceUnavailable(
                f"Chroma is not available: {type(exc).__name__}: {exc}", collection=name
            ) from exc
        raise


class ChromaIndex:
    """A VectorIndex stored in ChromaDB; build one with :meth:`persistent`, :meth:`ephemeral`
    or :meth:`http`."""

    def __init__(
        self,
        client: ClientAPI,
        *,
        hnsw: Mapping[str, int] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        shared: bool = False,
    ) -> None:
        unknown = set(hnsw or {}) - HNSW_KEYS
        if unknown:
            raise ValidationError(
                f"unknown hnsw options {sorted(unknown)}; allowed: {sorted(HNSW_KEYS)}",
                field="hnsw",
            )
        self._client = client
        #: a server other processes write too (:meth:`http`), not this process's files
        self.shared = shared
        self._hnsw: dict[str, Any] = {**(hnsw or {}), "space": "cosine"}
        self._requested_batch = max(1, batch_size)
        self._batch: int | None = None
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Collection, int]] = {}

    # -- constructors -----------------------------------------------------------------------

    @classmethod
    def persistent(cls, path: str, **options: Any) -> ChromaIndex:
        """An index in an embedded Chroma storing its files under ``path``."""
        chromadb = _import_chromadb()
        with _chroma_errors():
            client = chromadb.PersistentClient(path=str(path), settings=_settings())
        return cls(client, **options)

    @classmethod
    def ephemeral(cls, **options: Any) -> ChromaIndex:
        """An index in an in-memory Chroma (shared by all ephemeral clients of the process)."""
        chromadb = _import_chromadb()
        with _chroma_errors():
            client = chromadb.EphemeralClient(settings=_settings())
        return cls(client, **options)

    @classmethod
    def http(cls, host: str, port: int, *, ssl: bool = False, **options: Any) -> ChromaIndex:
        """An index on a Chroma server (``chroma run``); ServiceUnavailable if unreachable."""
        chromadb = _import_chromadb()
        try:
            with _chroma_errors():
                client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=_settings())
        except (ValidationError, ServiceUnavailable) as exc:
            raise ServiceUnavailable(
                f"cannot reach Chroma at {host}:{port}: {exc.message}", host=host, port=port
            ) from exc
        return cls(client, shared=True, **options)

    def close(self) -> None:
        """Release the client (for a persistent client: its files and threads)."""
        with self._lock:
            self._cache.clear()
        close = getattr(self._client, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> ChromaIndex:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def heartbeat(self) -> bool:
        """True if Chroma answers (for readiness checks)."""
        try:
            with _chroma_errors():
                self._client.heartbeat()
        except DMFError:
            return False
        return True

    # -- helpers ------------------------------------------------------------------------------

    def _batch_size(self) -> int:
        if self._batch is None:
            with _chroma_errors():
                limit = int(self._client.get_max_batch_size())
            self._batch = max(1, min(self._requested_batch, limit))
        return self._batch

    def _fetch(self, name: str) -> tuple[Collection, int]:
        with _chroma_errors(name):
            col = self._client.get_collection(name, embedding_function=None)
            return col, self._checked_dim(col, name, None)

    def _checked_dim(self, col: Collection, name: str, wanted: int | None) -> int:
        """The collection's dimension after checking space (and ``wanted`` when given)."""
        config = col.configuration or {}
        hnsw = config.get("hnsw") or {}
        space = hnsw.get("space") or (col.metadata or {}).get("hnsw:space") or "l2"
        if space != "cosine":
            raise SchemaError(
                f"vector collection {name!r} uses {space!r} space, not cosine; drop and rebuild it",
                collection=name,
                space=space,
            )
        recorded = (col.metadata or {}).get(DIM_KEY)
        if recorded is None:  # created outside dmf_hybrid: learn it from a stored vector
            peek = col.peek(1)
            embeddings = peek.get("embeddings")
            recorded = len(embeddings[0]) if embeddings is not None and len(embeddings) else None
        dim = int(recorded) if recorded is not None else wanted
        if dim is None:
            raise SchemaError(
                f"vector collection {name!r} has no recorded dimension", collection=name
            )
        if wanted is not None and dim != wanted:
            raise SchemaError(
                f"vector collection {name!r} has dimension {dim}, not {wanted}",
                field="dim",
                collection=name,
                existing_dim=dim,
                requested_dim=wanted,
            )
        return dim

    def _collection(self, name: str) -> tuple[Collection, int]:
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None:
            return hit
        fetched = self._fetch(name)
        with self._lock:
            self._cache[name] = fetched
        return fetched

    def _run(self, name: str, op: Callable[[Collection, int], T]) -> T:
        """``op(collection, dim)``, refetching once if a cached handle went stale."""
        col, dim = self._collection(name)
        try:
            with _chroma_errors(name):
                return op(col, dim)
        except NotFound:
            with self._lock:
                self._cache.pop(name, None)
            col, dim = self._collection(name)  # NotFound here if it is really gone
            with _chroma_errors(name):
                return op(col, dim)

    # -- VectorIndex --------------------------------------------------------------------------

    def ensure_collection(self, name: str, dim: int) -> None:
        """Create the collection if missing; SchemaError if it exists with another dim."""
        check_collection_name(name)
        check_dim(dim)
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and hit[1] == dim:
            return
        _import_chromadb()
        from chromadb import errors as chromadb_errors  # start-up cost, see _import_chromadb

        with _chroma_errors(name):
            try:
                col = self._client.get_collection(name, embedding_function=None)
            except chromadb_errors.NotFoundError:
                try:
                    col = self._client.create_collection(
                        name,
                        configuration=cast(Any, {"hnsw": dict(self._hnsw)}),
                        metadata={DIM_KEY: dim},
                        embedding_function=None,
                    )
                    logger.info("created Chroma collection %s (dim %d, cosine)", name, dim)
                except chromadb_errors.ChromaError:  # created concurrently
                    col = self._client.get_collection(name, embedding_function=None)
            checked = self._checked_dim(col, name, dim)
        with self._lock:
            self._cache[name] = (col, checked)

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
        _, dim = self._collection(name)
        id_list, matrix, clean = check_batch(ids, vectors, metadatas, dim)
        step = self._batch_size()
        for start in range(0, len(id_list), step):
            write = partial(
                _replace,
                ids=id_list[start : start + step],
                vectors=matrix[start : start + step],
                metadatas=clean[start : start + step],
                keep_newer=keep_newer,
            )
            self._run(name, write)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Remove the IDs; unknown IDs and an unknown collection are ignored."""
        id_list = list(ids)
        if not id_list:
            return  # Chroma rejects an empty ID list
        try:
            self._collection(name)
        except NotFound:
            return
        step = self._batch_size()
        for start in range(0, len(id_list), step):
            chunk = id_list[start : start + step]
            try:
                self._run(name, partial(_delete_ids, ids=chunk))
            except NotFound:
                return

    def query(self, name: str, vector: npt.ArrayLike, n: int) -> list[tuple[str, float]]:
        """Top ``n`` (id, 1 - cosine distance) from HNSW, sorted sim desc then id asc.

        Approximate: may return fewer than ``min(n, count)`` hits. HNSW cuts ties at the
        n-th place arbitrarily, so this asks for one more than ``n`` and, while that extra hit
        still ties with the n-th, for twice as many, then cuts by ID.
        """
        check_n(n)

        def run(col: Collection, dim: int) -> list[tuple[str, float]]:
            query = check_query_vector(vector, dim).reshape(1, -1)
            if n == 0:
                return []
            fetch = n + 1
            while True:
                result = col.query(query_embeddings=query, n_results=fetch, include=["distances"])
                found_ids = result["ids"][0]
                distances = (result.get("distances") or [[]])[0]
                ranked = sorted(zip(distances, found_ids, strict=True))  # distance, then ID
                exhausted = len(ranked) < fetch  # Chroma returns at most its count
                if exhausted or len(ranked) <= n or ranked[-1][0] > ranked[n - 1][0]:
                    break
                fetch *= 2
            return [(id_, 1.0 - float(d)) for d, id_ in ranked[:n]]

        return self._run(name, run)

    def records(self, name: str) -> dict[str, Metadata]:
        """Every ID of the collection with its metadata, in ID order (paged reads)."""
        step = self._batch_size()

        def run(col: Collection, _dim: int) -> dict[str, Metadata]:
            out: dict[str, Metadata] = {}
            offset = 0
            while True:
                page = col.get(include=["metadatas"], limit=step, offset=offset)
                page_ids = page["ids"]
                stored: Any = page.get("metadatas")
                page_md: list[Any] = list(stored) if stored else [None] * len(page_ids)
                for id_, md in zip(page_ids, page_md, strict=True):
                    out[id_] = dict(md) if md else {}
                if len(page_ids) < step:
                    break
                offset += step
            return {id_: out[id_] for id_ in sorted(out)}

        return self._run(name, run)

    def vectors_of(self, name: str, ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The stored vectors of those ``ids`` that the collection holds (read by ID)."""

        def run(col: Collection, _dim: int) -> dict[str, npt.NDArray[np.float32]]:
            got = col.get(ids=list(ids), include=["embeddings"])
            stored: Any = got.get("embeddings")
            vectors = list(stored) if stored is not None else []
            return {id_: np.asarray(vec, dtype=np.float32)
                    for id_, vec in zip(got["ids"], vectors, strict=True)}

        return self._run(name, run)

    def count(self, name: str) -> int:
        """Number of vectors in the collection."""
        return self._run(name, lambda col, _dim: int(col.count()))

    def drop(self, name: str) -> None:
        """Delete the collection; an unknown one is ignored."""
        with self._lock:
            self._cache.pop(name, None)
        try:
            with _chroma_errors(name):
                self._client.delete_collection(name)
        except NotFound:
            return
        logger.info("dropped Chroma collection %s", name)

    def collections(self) -> list[str]:
        """Names of all collections, sorted."""
        with _chroma_errors():
            return sorted(col.name for col in self._client.list_collections())


def _delete_ids(col: Collection, _dim: int, *, ids: list[str]) -> None:
    col.delete(ids=ids)


def _same_vector(stored: Any, new: npt.NDArray[np.float32]) -> bool:
    """Whether Chroma's copy of a vector equals ``new`` up to its float round trip."""
    if stored is None:
        return False
    old = np.asarray(stored, dtype=np.float32)
    if old.shape != new.shape:
        return False
    scale = max(1.0, float(np.abs(new).max(initial=0.0)))
    return bool(np.abs(old - new).max(initial=0.0) <= VECTOR_ATOL * scale)


def _replace(
    col: Collection,
    _dim: int,
    *,
    ids: list[str],
    vectors: npt.NDArray[np.float32],
    metadatas: list[Metadata],
    keep_newer: str | None,
) -> None:
    """Write one batch so that each ID ends with exactly the new vector and metadata (or,
    with ``keep_newer``, keeps a stored entry whose value of that key is greater).

    Reads the stored entries first (Chroma returns them in its own order, so by ID). Stored
    keys missing from the new metadata are written as ``None``, which Chroma deletes. An ID
    whose stored vector already equals the new one gets a metadata-only ``update`` (or no
    write at all when the metadata is equal too): Chroma's ``upsert`` of an existing ID costs
    ~17 ms per vector on this machine, a metadata update ~0.4 ms.
    """
    stored = col.get(ids=ids, include=["metadatas", "embeddings"])
    stored_ids = stored["ids"]
    stored_md: Any = stored.get("metadatas")
    stored_vectors: Any = stored.get("embeddings")
    old: dict[str, tuple[Metadata, Any]] = {
        id_: (
            dict(stored_md[i] or {}) if stored_md is not None else {},
            stored_vectors[i] if stored_vectors is not None else None,
        )
        for i, id_ in enumerate(stored_ids)
    }
    older = set() if keep_newer is None else older_than_stored(
        {id_: md for id_, (md, _vector) in old.items()}, ids, metadatas, keep_newer)
    write_ids: list[str] = []
    write_rows: list[int] = []
    write_md: list[dict[str, Any] | None] = []
    meta_ids: list[str] = []
    meta_md: list[dict[str, Any]] = []
    for row, (id_, md) in enumerate(zip(ids, metadatas, strict=True)):
        if row in older:
            continue
        full: dict[str, Any] = dict(md)
        previous = old.get(id_)
        if previous is not None:
            old_md, old_vector = previous
            for key in old_md.keys() - md.keys():
                full[key] = None  # Chroma deletes a key written as None
            if _same_vector(old_vector, vectors[row]):
                if old_md != md:
                    meta_ids.append(id_)
                    meta_md.append(full)
                continue
        write_ids.append(id_)
        write_rows.append(row)
        write_md.append(full or None)
    if meta_ids:
        col.update(ids=meta_ids, metadatas=cast(Any, meta_md))
    if write_ids:
        col.upsert(
            ids=write_ids,
            embeddings=vectors[write_rows],
            metadatas=cast(Any, write_md if any(m is not None for m in write_md) else None),
        )
