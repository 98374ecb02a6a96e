"""LocalVectors: the exact in-memory mirror of one type's vectors (the planner's exact scorer).

Loaded from DuckDB's embedding cache and kept in step by the indexer; read by search, which
scores candidate sets against it exactly. It mirrors DuckDB, not the vector index.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..ids import DEFAULT_TENANT, vector_id
from ..vector.exact import ReadWriteLock, normalise_rows, precise_scores
from .keys import KeyIndex, distinct, key_index, locate, positions_of

log = logging.getLogger(__name__)

#: Initial rows of a mirror.
MIN_ROWS = 64
#: Bytes of the Python objects of one row besides its arrays (its entity ID and text hash
#: strings, their list slots, its entry in the row map): 260 measured with tracemalloc over
#: 4,000 rows.
ROW_OBJECT_BYTES = 260
#: A candidate set of at least 1/FULL_SCAN_FRACTION of the mirror is scored in one full pass.
FULL_SCAN_FRACTION = 2
#: Rows gathered and scored at a time: the block stays in cache and BLAS stays on one thread
#: (measured on 100k x 384: 10k candidates in 1.8 ms by blocks of 1024 vs 8 ms in one go).
SCORE_CHUNK = 1024
#: Candidate sets of fewer rows are gathered again on every search (that is cheap); larger
#: ones of a cached candidate list may keep their gathered vectors (:class:`Blocks`).
BLOCK_MIN_ROWS = 2048
#: Up to this many rows are scored in float64 at once, with no float32 pass first.
PRECISE_ONLY_ROWS = 64
#: Mirror generations: unique across mirrors, so a rebuilt mirror never matches an old memo.
_GENERATIONS = itertools.count(1)
#: Tokens naming the candidate lists whose blocks :class:`Blocks` keeps.
_TOKENS = itertools.count(1)
#: Bound on the float32 error of a cosine of unit vectors (a few hundred rounded products).
SCORE_EPS = 1e-4

#: (tenant, entity ID): what names an entity (IDs are unique per tenant only)
Key = tuple[str, str]
FloatMatrix = npt.NDArray[np.float32]


class Blocks:
    """Gathered vectors of repeated candidate sets, least recently used out past a byte bound.

    A filter repeated at one state maps to the same mirror rows every time (the row memo of
    its cached candidate list); gathering those rows from the whole matrix is most of the cost
    of scoring them (random reads), and scoring a contiguous copy is several times faster.
    A block holds the rows' vectors as they were at one :attr:`LocalVectors.version`, which
    every change of a row's vector moves on (an update that leaves the vector as it was, a
    new row at the end or the removal of the last row does not), so a block is only read
    while it is exact, and only for the very rows it was gathered from.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._blocks: OrderedDict[int, tuple[int, FloatMatrix]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, memo: dict[str, Any], version: int) -> FloatMatrix | None:
        """The block of that candidate list at ``version``, if one is kept."""
        token = memo.get("block")
        if token is None:
            return None
        with self._lock:
            found = self._blocks.get(token)
            if found is None or found[0] != version:
                return None
            self._blocks.move_to_end(token)
            return found[1]

    def fits(self, rows: int, dim: int) -> bool:
        """Whether a block of that many rows may be kept at all."""
        return rows >= BLOCK_MIN_ROWS and rows * dim * 4 <= self.max_bytes

    def keep(self, memo: dict[str, Any], version: int, block: FloatMatrix) -> None:
        """Keep a candidate list's block, dropping the least recently used past the bound."""
        token = memo.setdefault("block", next(_TOKENS))
        with self._lock:
            old = self._blocks.pop(token, None)
            if old is not None:
                self.held -= old[1].nbytes
            self._blocks[token] = (version, block)
            self.held += block.nbytes
            while self.held > self.max_bytes:
                _, (_, dropped) = self._blocks.popitem(last=False)
                self.held -= dropped.nbytes

    def drop(self, memo: dict[str, Any]) -> None:
        """Drop the block of one candidate list (its rows moved)."""
        token = memo.get("block")
        with self._lock:
            old = self._blocks.pop(token, None) if token is not None else None
            if old is not None:
                self.held -= old[1].nbytes

    def clear(self) -> None:
        """Drop every block (a vector changed)."""
        with self._lock:
            self._blocks.clear()
            self.held = 0


class LocalVectors:
    """The exact in-memory mirror of one type's vectors: the planner's exact scorer.

    Rows are L2-normalised float32 vectors (``matrix[:size]``, swap-remove on delete), found by
    (tenant, entity ID) or by DuckDB's 64-bit ``hash(tenant, id)`` of them (``key_sql``),
    so a candidate set can be mapped to rows without making Python strings (the sorted key
    index is rebuilt lazily after IDs come or go; a key collision switches that mapping off and
    callers fall back to IDs). Two tenants' entities with the same ID are two rows. Each row
    also keeps the entity's tenant and text hash, which the planner checks proposals against.
    ``block_bytes``: the bound of :class:`Blocks` (0: no blocks are kept).
    """

    def __init__(self, dim: int, block_bytes: int = 0) -> None:
        self.dim = dim
        self._matrix: FloatMatrix = np.zeros((MIN_ROWS, dim), dtype=np.float32)
        self._keys = np.zeros(MIN_ROWS, dtype=np.uint64)
        self._tenant = np.zeros(MIN_ROWS, dtype=np.int32)
        self._tenant_code: dict[str, int] = {}
        self._tenant_name: list[str] = []
        self._ids: list[str] = []  # entity ID of each row
        self._text_hash: list[str] = []
        self._row: dict[str, int] = {}  # vector ID (tenant-qualified entity ID) -> row
        self._by_key: KeyIndex | None = None
        self._lock = ReadWriteLock()
        self.collided = False
        self.size = 0
        #: changes with every change of which entity sits in which row (see :meth:`top`)
        self.generation = next(_GENERATIONS)
        #: changes with every change of a row's vector (a block is exact only at its version)
        self.version = 0
        self.blocks = Blocks(block_bytes)

    def __len__(self) -> int:
        return self.size

    def nbytes(self) -> int:
        """What it holds: its arrays and kept blocks exactly, the Python objects of its rows
        (IDs, text hashes, the row map) by :data:`ROW_OBJECT_BYTES` each."""
        with self._lock.read():
            arrays = self._matrix.nbytes + self._keys.nbytes + self._tenant.nbytes
            return arrays + self.blocks.held + self.size * ROW_OBJECT_BYTES

    def has(self, tenant: str, eid: str) -> bool:
        """Whether the entity ``eid`` of ``tenant`` has a vector here."""
        return vector_id(tenant, eid) in self._row

    def have(self, tenant: str, eids: Sequence[str]) -> list[bool]:
        """:meth:`has` of each of several entities."""
        rows = self._row
        if tenant == DEFAULT_TENANT:  # its vector IDs are the entity IDs
            return [eid in rows for eid in eids]
        return [vector_id(tenant, eid) in rows for eid in eids]

    def text_hash_of(self, tenant: str, eid: str) -> str | None:
        """The text hash the stored vector of ``tenant``'s ``eid`` was made from (None: absent)."""
        return self.text_hashes_of(tenant, [eid])[0]

    def text_hashes_of(self, tenant: str, eids: Sequence[str]) -> list[str | None]:
        """:meth:`text_hash_of` of several entities, under one lock."""
        with self._lock.read():
            rows = [self._row.get(vector_id(tenant, eid)) for eid in eids]
            return [None if row is None else self._text_hash[row] for row in rows]

    def upsert(self, ids: Sequence[str], keys: Sequence[int], vectors: FloatMatrix,
               tenants: Sequence[str], text_hashes: Sequence[str]) -> None:
        """Insert or replace the rows of (tenants[i], ids[i]) (vectors need not be normalised)."""
        if not len(ids):
            return
        unit = normalise_rows(np.asarray(vectors, dtype=np.float32))
        vids = [vector_id(t, e) for t, e in zip(tenants, ids, strict=True)]
        with self._lock.write():
            new = [i for i, vid in enumerate(vids) if vid not in self._row]
            self._reserve(self.size + len(new))
            for i in new:
                self._row[vids[i]] = self.size
                self._ids.append(ids[i])
                self._text_hash.append("")
                self._keys[self.size] = keys[i]
                self.size += 1
            rows = np.fromiter((self._row[vid] for vid in vids), dtype=np.intp, count=len(vids))
            # a row that keeps its vector (an update of fields the text does not read) leaves
            # the blocks exact; a new row is in no block
            old = np.ones(len(vids), dtype=bool)
            old[new] = False
            moved = bool(old.any()) and not np.array_equal(self._matrix[rows[old]], unit[old])
            self._matrix[rows] = unit
            for row, tenant, text_hash in zip(rows.tolist(), tenants, text_hashes, strict=True):
                code = self._tenant_code.get(tenant)
                if code is None:
                    code = self._tenant_code[tenant] = len(self._tenant_name)
                    self._tenant_name.append(tenant)
                self._tenant[row] = code
                self._text_hash[row] = text_hash
            if new:
                self._index_keys(rows[~old])
                self.generation = next(_GENERATIONS)
            if moved:
                self._changed()

    def _index_keys(self, rows: npt.NDArray[np.intp]) -> None:
        """Add new rows to the key index (caller holds the write lock): an insertion into
        the sorted keys, not a sort of all of them; a collision leaves it to be rebuilt."""
        if self._by_key is None or not len(rows):
            return
        ordered, positions = self._by_key
        keys = self._keys[rows]
        order = np.argsort(keys, kind="stable")
        keys, rows = keys[order], rows[order]
        _, hit = locate(ordered, keys)
        if hit.any() or (len(keys) > 1 and bool((keys[1:] == keys[:-1]).any())):
            self._by_key = None  # two entities share a key: the rebuild says so
            return
        slots = np.searchsorted(ordered, keys)
        self._by_key = (np.insert(ordered, slots, keys), np.insert(positions, slots, rows))

    def _unindex_key(self, key: int, moved: tuple[int, int] | None) -> None:
        """Take a deleted row's key out of the key index and, if another row moved into its
        place, point that row's key at its new position (caller holds the write lock)."""
        if self._by_key is None:
            return
        ordered, positions = self._by_key
        at, hit = locate(ordered, np.array([key], dtype=np.uint64))
        if not hit[0]:
            self._by_key = None
            return
        ordered, positions = np.delete(ordered, at[0]), np.delete(positions, at[0])
        if moved is not None:
            moved_key, row = moved
            at, hit = locate(ordered, np.array([moved_key], dtype=np.uint64))
            if not hit[0]:
                self._by_key = None
                return
            positions[at[0]] = row
        self._by_key = (ordered, positions)

    def delete(self, keys: Iterable[Key]) -> None:
        """Remove the rows of these (tenant, entity ID); unknown ones are ignored."""
        with self._lock.write():
            for tenant, eid in keys:
                row = self._row.pop(vector_id(tenant, eid), None)
                if row is None:
                    continue
                last = self.size - 1
                key = int(self._keys[row])
                if row != last:
                    moved = vector_id(self._tenant_name[int(self._tenant[last])],
                                      self._ids[last])
                    self._unindex_key(key, (int(self._keys[last]), row))
                    self._matrix[row] = self._matrix[last]
                    self._keys[row] = self._keys[last]
                    self._tenant[row] = self._tenant[last]
                    self._text_hash[row] = self._text_hash[last]
                    self._ids[row] = self._ids[last]
                    self._row[moved] = row
                    self._changed()  # a vector moved into that row
                else:
                    self._unindex_key(key, None)  # the last row: no other row moves
                self._ids.pop()
                self._text_hash.pop()
                self.size = last
                self.generation = next(_GENERATIONS)

    def _changed(self) -> None:
        """A vector changed (caller holds the write lock): every block is stale."""
        self.version += 1
        if self.blocks.held:
            self.blocks.clear()

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows at once (a load of known size grows the matrix once)."""
        with self._lock.write():
            self._reserve(rows)

    def _reserve(self, needed: int) -> None:
        capacity = self._matrix.shape[0]
        if needed <= capacity:
            return
        grown = max(needed, 2 * capacity)
        matrix = np.zeros((grown, self.dim), dtype=np.float32)
        matrix[: self.size] = self._matrix[: self.size]
        keys = np.zeros(grown, dtype=np.uint64)
        keys[: self.size] = self._keys[: self.size]
        tenant = np.zeros(grown, dtype=np.int32)
        tenant[: self.size] = self._tenant[: self.size]
        self._matrix, self._keys, self._tenant = matrix, keys, tenant

    def rows_of_ids(self, tenant: str, ids: Iterable[str]) -> npt.NDArray[np.intp]:
        """Rows of those IDs of ``tenant`` that are here, ascending, each once."""
        with self._lock.read():
            get = self._row.get
            vids = ids if tenant == DEFAULT_TENANT else (vector_id(tenant, e) for e in ids)
            rows = np.fromiter((r for r in map(get, vids) if r is not None), dtype=np.intp)
        return distinct(rows)

    def keys_of(self, tenant: str, ids: Sequence[str]) -> npt.NDArray[np.uint64]:
        """The ``hash(tenant, id)`` of each of ``tenant``'s IDs here (0 for an absent one)."""
        with self._lock.read():
            get = self._row.get
            rows = [get(vector_id(tenant, eid)) for eid in ids]
            return np.fromiter((0 if r is None else self._keys[r] for r in rows),
                               dtype=np.uint64, count=len(rows))

    def rows_of_keys(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.intp] | None:
        """Rows whose ``hash(tenant, id)`` is among ``keys``, ascending (None after a collision)."""
        with self._lock.write() if self._by_key is None else self._lock.read():
            if self.collided:
                return None
            if self._by_key is None:
                self._by_key = key_index(self._keys[: self.size],
                                         np.arange(self.size, dtype=np.intp))
                if self._by_key is None:
                    self.collided = True  # two IDs share a 64-bit hash: map by ID instead
                    log.warning("hash(tenant, id) collision in the exact mirror; mapping by ID")
                    return None
            # sorted: the search walks the index in order
            return np.sort(positions_of(self._by_key, distinct(keys)))

    def top(self, query: npt.NDArray[np.float64], depth: int,
            find: Callable[[], npt.NDArray[np.intp] | None],
            memo: dict[str, Any] | None = None) -> tuple[list[str], npt.NDArray[np.float64]] | None:
        """:meth:`head` of the rows ``find()`` maps a candidate set to (None if it returns None).

        Rows move when entities come or go (swap-remove), so the rows are scored only if no
        such change happened since they were found; otherwise they are found again (and, if
        they are the same rows, the list still counts as repeated). ``memo``
        belongs to one cached candidate list: while nothing has moved, the same list maps to
        the same rows, so a repeated filter skips the mapping (and, from its second search
        on, past ``BLOCK_MIN_ROWS`` rows, scores a kept copy of their vectors: :class:`Blocks`).
        """
        while True:
            generation = self.generation
            known = memo.get("rows") if memo is not None else None
            repeated = known is not None and known[0] == generation
            if known is not None and repeated:
                rows = known[1]
            else:
                rows = find()
                if rows is None:
                    return None
                if known is not None and memo is not None:
                    if np.array_equal(known[1], rows):
                        repeated = True  # entities came or went elsewhere: same rows
                    else:
                        self.blocks.drop(memo)  # its rows moved: its block is not theirs
                if memo is not None and self.generation == generation:
                    memo["rows"] = (generation, rows)
            # a block is only worth its copy for a list used a second time
            found = self.head(query, depth, rows, generation, memo if repeated else None)
            if found is not None:
                return found

    def precise(self, tenant: str, ids: Iterable[str], query: npt.NDArray[np.float64]
                ) -> tuple[list[str], npt.NDArray[np.float64]]:
        """Those of ``tenant``'s ``ids`` that are here and their float64 cosines: :meth:`top`
        of a few IDs (up to ``PRECISE_ONLY_ROWS``, which it scores only in float64), with the
        rows found and scored under one lock (a row's score does not depend on its batch)."""
        with self._lock.read():
            get = self._row.get
            found = [(eid, row) for eid in ids
                     if (row := get(vector_id(tenant, eid))) is not None]
            unit = self._matrix[[row for _, row in found]]
        return [eid for eid, _ in found], precise_scores(unit, query)

    def rows_of_tenant(self, tenant: str) -> npt.NDArray[np.intp]:
        """Every row of one tenant, ascending."""
        with self._lock.read():
            code = self._tenant_code.get(tenant)
            if code is None:
                return np.zeros(0, dtype=np.intp)
            if len(self._tenant_code) == 1:
                return np.arange(self.size, dtype=np.intp)
            return np.flatnonzero(self._tenant[: self.size] == code).astype(np.intp)

    def head(self, query: npt.NDArray[np.float64], depth: int,
             rows: npt.NDArray[np.intp] | None = None, generation: int | None = None,
             memo: dict[str, Any] | None = None
             ) -> tuple[list[str], npt.NDArray[np.float64]] | None:
        """Entity IDs and float64 cosines of the rows that may rank in the top ``depth``.

        ``rows`` (default: every row) should be one tenant's, or two rows may share an ID.
        ``generation``: the :attr:`generation` the rows were found at; None is returned if
        rows have moved since. ``memo``: the row memo of the cached candidate list the rows
        belong to (its gathered vectors may be kept and reused, see :class:`Blocks`).

        All rows are scored roughly in float32; each row within ``SCORE_EPS`` of the
        ``depth``-th best is re-scored in float64 on its own, so the result does not depend on
        the batch a row was scored in (BLAS kernels round by position). A few rows are only
        scored in float64.
        """
        q32 = query.astype(np.float32)
        with self._lock.read():
            if generation is not None and generation != self.generation:
                return None
            size = self.size
            if rows is None:
                rows = np.arange(size, dtype=np.intp)
            if len(rows) > PRECISE_ONLY_ROWS:
                rows = self._rough(rows, q32, depth, memo)
            unit = np.take(self._matrix, rows, axis=0)
            ids = [self._ids[r] for r in rows.tolist()]
        return ids, precise_scores(unit, query)

    def _rough(self, rows: npt.NDArray[np.intp], q32: FloatMatrix, depth: int,
               memo: dict[str, Any] | None) -> npt.NDArray[np.intp]:
        """The rows whose float32 score is within ``SCORE_EPS`` of the ``depth``-th best
        (caller holds the read lock)."""
        size = self.size
        scores = np.empty(len(rows), dtype=np.float32)
        if len(rows) * FULL_SCAN_FRACTION >= size:  # most rows: one pass, no gather
            every = np.empty(size, dtype=np.float32)
            for at in range(0, size, SCORE_CHUNK):
                every[at:at + SCORE_CHUNK] = self._matrix[at:min(size, at + SCORE_CHUNK)] @ q32
            scores[:] = every[rows]
        else:
            block = None if memo is None else self.blocks.get(memo, self.version)
            if block is not None and len(block) == len(rows):
                scores[:] = block @ q32  # contiguous: one product (measured 5-10x faster)
            else:
                keep = memo is not None and self.blocks.fits(len(rows), self.dim)
                block = np.empty((len(rows), self.dim), dtype=np.float32) if keep else None
                for at in range(0, len(rows), SCORE_CHUNK):
                    part = rows[at:at + SCORE_CHUNK]
                    gathered = np.take(self._matrix, part, axis=0)
                    scores[at:at + len(part)] = gathered @ q32
                    if block is not None:
                        block[at:at + len(part)] = gathered
                if block is not None and memo is not None:
                    self.blocks.keep(memo, self.version, block)
        if len(scores) <= depth:
            return rows
        kth = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        return rows[scores >= kth - SCORE_EPS]
