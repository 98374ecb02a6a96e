"""Reading a type's in-memory mirrors from the store: rows to items, and a snapshot read unlocked.

The exact vector mirror and the BM25 indexes of a type are read from DuckDB on its first search (or
at the service's warm-up): 15-25 s at 100,000 entities. :func:`read_snapshot` reads them inside one
DuckDB read transaction, so they show one committed state, the one at a known audit seq, while no
lock of this process is held: commits go on meanwhile. The indexer then installs the snapshot under
its locks and brings it forward to the current state: the audit events since the snapshot's seq name
the entities that changed (:mod:`dmf_hybrid._internal.store.changes`), and those rows alone are read
again. Rows whose vector was not in the embedding cache at the snapshot are embedded then too, never
while reading (embedding caches the vector, a write)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .ids import sha256_hex
from .mirrors.keyword import KeywordIndex
from .mirrors.text import KeywordDocument, TypeAnalyzer, entity_document, type_analysis
from .mirrors.vectors import Key, LocalVectors
from .schema import EntityType, text_of_parts
from .store import Store
from .store.db import Reader
from .store.dialect import vector_matrix
from .store.mirror_reads import (
    LiveRow,
    embedded_count,
    live_row_batches,
    vector_batches,
)

# (id, tenant, version, text_hash, text, DuckDB hash(tenant, id), keyword document) of one
# live entity
Item = tuple[str, str, int, str, str, int, KeywordDocument]
FaultHook = Callable[[str], None]
#: Rows per batch when a mirror is loaded from DuckDB.
LOAD_BATCH = 8192
#: Tries to start a read transaction between two commits before giving up.
SNAPSHOT_TRIES = 3


def items_of(etype: EntityType, live: list[LiveRow], gone: list[Key],
             warn: Callable[[str], None] | None = None) -> list[Item]:
    """The items of live rows; the keys of those that are not embedded go to ``gone``."""
    items: list[Item] = []
    analysis = type_analysis(etype)
    for eid, tenant, version, text_hash, data, key in live:
        parts = etype.embed_parts(data)
        text = text_of_parts(parts)
        if parts is None or text is None:
            gone.append((tenant, eid))
            continue
        th = sha256_hex(text)
        if text_hash is not None and th != text_hash and warn is not None:
            warn(eid)
        items.append((eid, tenant, version, th, text, key,
                      entity_document(analysis, etype, data, text, parts)))
    return items


def all_items(reader: Reader, etype: EntityType) -> Iterator[list[Item]]:
    """Every live, embedded item of a type, by ID then tenant, ``LOAD_BATCH`` at a time
    (building the BM25 index of 100,000 entities from one list held them all at once)."""
    for rows in live_row_batches(reader, etype, LOAD_BATCH):
        yield items_of(etype, rows, [])


def keyword_indexes(reader: Reader, etype: EntityType,
                    analysis: TypeAnalyzer) -> dict[str, KeywordIndex]:
    """One BM25 index per tenant of a type's live, embedded entities."""
    out: dict[str, KeywordIndex] = {}

    def index_of(tenant: str) -> KeywordIndex:
        if tenant not in out:
            out[tenant] = KeywordIndex(analyzer=analysis)
        return out[tenant]

    for items in all_items(reader, etype):
        add_keyword(index_of, items)
    return out


def add_keyword(index_of: Callable[[str], KeywordIndex], items: list[Item]) -> None:
    """Upsert items into their tenants' BM25 indexes (``index_of``: a tenant's index, made
    if it has none yet)."""
    by_tenant: dict[str, tuple[list[tuple[str, KeywordDocument]], list[int]]] = {}
    for eid, tenant, _version, _th, _text, key, doc in items:
        docs, keys = by_tenant.setdefault(tenant, ([], []))
        docs.append((eid, doc))
        keys.append(key)
    for tenant, (docs, keys) in sorted(by_tenant.items()):
        index_of(tenant).upsert(docs, keys)


def vector_mirror(reader: Reader, etype: EntityType, model_id: str, dim: int,
                  block_bytes: int) -> tuple[LocalVectors, list[Key]]:
    """The exact mirror of a type's live rows joined to the embedding cache, and the
    (tenant, id) of live rows whose vector the cache does not hold.

    Streamed in batches of ``LOAD_BATCH`` rows into a mirror sized once, so the load never
    holds more than one batch besides the mirror (at 100,000 x 384 a whole-table fetch, its
    sort and their copies took ~800 MB more than the mirror's 150 MB).
    """
    import pyarrow as pa  # start-up cost: only bulk loads and vector fetches need Arrow
    import pyarrow.compute as pc

    local = LocalVectors(dim, block_bytes)
    local.reserve(embedded_count(reader, etype))
    missing: list[Key] = []
    with vector_batches(reader, etype, model_id, LOAD_BATCH) as batches:
        for batch in batches:
            valid = pc.is_valid(batch.column("vector"))
            cached = batch.filter(valid)
            if cached.num_rows:
                local.upsert(cached.column("id").to_pylist(),
                             cached.column("key").to_numpy().tolist(),
                             vector_matrix(cached.column("vector"), cached.num_rows),
                             cached.column("tenant").to_pylist(),
                             cached.column("text_hash").to_pylist())
            if cached.num_rows < batch.num_rows:
                gone = batch.filter(pc.invert(valid))
                missing += zip(gone.column("tenant").to_pylist(),
                               gone.column("id").to_pylist(), strict=True)
    pa.default_memory_pool().release_unused()
    return local, missing


@dataclass
class Snapshot:
    """A type's mirrors as DuckDB held them at audit seq ``seq``."""

    seq: int
    mirror: LocalVectors | None  # None: not asked for
    keyword: dict[str, KeywordIndex] | None  # per tenant; None: not asked for
    missing: list[Key] = field(default_factory=list)  # live rows without a cached vector


def read_snapshot(store: Store, etype: EntityType, *, model_id: str, dim: int,
                  block_bytes: int, mirror: bool, keyword: TypeAnalyzer | None,
                  fault: FaultHook | None = None) -> Snapshot | None:
    """The mirror (if ``mirror``) and the BM25 indexes (if ``keyword``, with that analysis) of
    a type, read in one DuckDB read transaction and so at one committed seq; no lock of this
    process is held. None if commits kept starting while the transaction began (the caller
    reads under its locks instead). Call outside a write transaction."""
    with store.db.read_transaction(SNAPSHOT_TRIES) as began:
        if began is None:
            return None
        reader, seq = began
        local, missing = (vector_mirror(reader, etype, model_id, dim, block_bytes) if mirror
                          else (None, []))
        indexes = None if keyword is None else keyword_indexes(reader, etype, keyword)
        if fault:
            fault("snapshot_read")
        return Snapshot(seq, local, indexes, missing)
