"""The indexer: outbox -> embed (cached in DuckDB) -> vector index, exact mirror, keyword index.

Idempotent and resumable: an outbox row names an entity, and applying it reads the entity's
*current* state from DuckDB, so replaying a row, or applying rows out of order, converges to
the same index. A row is marked done only after the vector index accepted the change.

Entity IDs are unique per tenant, not across tenants, so the vector index stores each entity
under its *vector ID* (``ids.vector_id``: the entity ID in the default tenant, tenant-qualified
in any other) and everything here is keyed by (tenant, entity ID).

Besides the vector index (Chroma) the indexer keeps, per entity type and loaded on the first
search, an in-memory exact mirror of the vectors (:class:`LocalVectors`, which the planner
scores candidate sets against) and one BM25 :class:`KeywordIndex` per tenant (so a tenant's
scores never depend on another tenant's documents). Both mirror DuckDB (loaded from it, then
kept in step by the outbox), not the vector index; what is loaded stays within a memory budget
(:mod:`dmf_hybrid._internal.loaded_mirrors`).

A vector index other processes write too (a Chroma server the processes of one PostgreSQL store
share) is written by one of them at a time, the relay leader
(:mod:`dmf_hybrid._internal.search.relay`), from its relay thread, never in a write's path: every
process embeds its own writes (into the shared embedding cache) and brings its own mirrors forward,
and leaves the outbox rows to the relay."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from . import heap
from .claims import Claims
from .embeddings import Embedder
from .ids import split_vector_id, vector_id
from .loaded_mirrors import LoadedMirrors
from .mirror_load import (
    FaultHook,
    Item,
    Snapshot,
    items_of,
    keyword_indexes,
    read_snapshot,
    vector_mirror,
)
from .mirrors.keyword import KeywordIndex
from .mirrors.text import TypeAnalyzer, type_analysis
from .mirrors.vectors import Key, LocalVectors
from .models import ReconcileCounts, ReindexCounts
from .schema import EntityType
from .store import Store
from .store.changes import ChangeFeed
from .store.mirror_reads import LiveRow, embedded_count, live_rows
from .store.outbox import OutboxRow
from .vector.base import VectorIndex, collection_name

log = logging.getLogger(__name__)

#: Vectors per vector-index write.
UPSERT_CHUNK = 1000
#: New vectors per embedding-cache transaction.
CACHE_CHUNK = 2048
#: Entities per step of a drain: each step reads their rows, embeds, and writes the indexes, so
#: a large batch's drain never holds a read or a write for long.
DRAIN_PIECE = 256
DRAIN_ALL = 100_000  # rows one drain applies at most
#: Seconds between searches' tries at rows a failed application left pending, while it fails.
CATCH_UP_RETRY_S = 1.0
#: Seconds the relay leaves a write whose text is not cached yet to its writer (which embeds
#: it right after its commit) before it embeds the text itself (the writer died, or failed).
EMBED_GRACE = 5.0
#: Seconds a type's row count decides whether it is searched directly (:meth:`Indexer.direct`).
RECOUNT_SECONDS = 10.0


class Indexer:
    """Keeps the derived indexes in step with DuckDB."""

    def __init__(self, store: Store, embedder: Embedder, vectors: VectorIndex,
                 batch_size: int = 64, block_bytes: int = 0,
                 changes: ChangeFeed | None = None, budget_bytes: int = 0) -> None:
        self.store = store
        self.embedder = embedder
        self.vectors = vectors
        self.batch_size = batch_size
        self.block_bytes = block_bytes  # bound of each mirror's Blocks
        #: the loaded mirrors, within the budget (their lock is the indexer's)
        self.loaded = LoadedMirrors(budget_bytes)
        self._lock = self.loaded.lock
        self._building = threading.Lock()  # held by the one snapshot load at a time
        self.fault: FaultHook | None = None
        #: an application of outbox rows failed or was interrupted (:meth:`catch_up`)
        self.behind, self._retry_at = False, 0.0
        #: What commits changed, to bring a snapshot forward; None: mirrors load holding
        #: off writes
        self.changes = changes
        #: the entities drains are applying right now (one drain per entity at a time)
        self._claims = Claims()
        #: whether other processes write the store and the vector index too: then only the relay
        #: writes the index, from the outbox (:class:`~dmf_hybrid._internal.search.relay.Relay`)
        self.relayed = False
        #: relayed: when the relay first found an entity's text missing from the cache
        self._uncached: dict[Key, float] = {}
        #: whether this process writes the vector index and marks outbox rows done: always,
        #: unless relayed (then while it leads the relay)
        self.leading = True
        #: storage key -> (searched directly, when that was counted): see :meth:`direct`
        self._direct: dict[str, tuple[bool, float]] = {}

    # ------------------------------------------------------------------ names

    def collection(self, key: str) -> str:
        """The vector collection of a type (its storage key) under the current model."""
        return collection_name("dmf", key, self.embedder.model_id)

    def keyword_index(self, key: str, tenant: str) -> KeywordIndex | None:
        """The BM25 index of one tenant's entities of a type (by storage key; None: nothing
        indexed)."""
        return self.loaded.keyword.get((key, tenant))

    # ------------------------------------------------------------------ cache

    def cached_vectors(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached vectors of the current model for the given text hashes."""
        return self.store.embedding_cache.vectors(self.embedder.model_id, hashes)

    def embed_texts(self, texts: dict[str, str],
                    cached: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Vectors for {text_hash: text}: from the cache (or ``cached``, what the caller read
        of it already), embedding (and caching) the rest.

        The model sees ``batch_size`` texts per call; new vectors are cached every
        ``CACHE_CHUNK`` texts, one transaction each (a commit costs more than the rows).
        """
        vectors = (self.cached_vectors(list(texts)) if cached is None
                   else {h: cached[h] for h in texts if h in cached})
        missing = sorted(h for h in texts if h not in vectors)
        new: list[tuple[str, np.ndarray]] = []
        for i in range(0, len(missing), self.batch_size):
            part = missing[i:i + self.batch_size]
            matrix = np.asarray(self.embedder.embed([texts[h] for h in part]), dtype=np.float32)
            new.extend(zip(part, matrix, strict=True))
            if len(new) >= CACHE_CHUNK:
                self._cache(new)
                vectors.update(new)
                new = []
        self._cache(new)
        vectors.update(new)
        return vectors

    def _cache(self, items: list[tuple[str, np.ndarray]]) -> None:
        self.store.embedding_cache.put(self.embedder.model_id, items)

    # ------------------------------------------------------------------ state

    def _live_rows(self, etype: EntityType, keys: Sequence[Key] | None = None
                   ) -> list[LiveRow]:
        """(id, tenant, version, text_hash, data, hash(tenant, id)) of live rows (all, or of
        those (tenant, id) ``keys``), by ID then tenant."""
        return live_rows(self.store.db.reader(), etype, keys)

    def _items(self, etype: EntityType, keys: Sequence[Key] | None
               ) -> tuple[list[Item], list[Key]]:
        """(live items with their text, (tenant, id) keys that have no vector any more)."""
        live = self._live_rows(etype, keys)
        gone = sorted(set(keys or ()) - {(r[1], r[0]) for r in live})
        return items_of(etype, live, gone, _differs), gone

    def _apply_type(self, etype: EntityType, keys: Sequence[Key], force: bool = False
                    ) -> set[Key]:
        """Bring every index in step with DuckDB for these (tenant, id) of one type (relayed:
        the vector index alone); unless ``force`` (a repair), a vector of a newer version than
        the row read here (another process's later write) is kept. What it left for a later
        turn: relayed, entities whose writer may still be embedding their text."""
        items, gone = self._items(etype, keys)
        texts = {p[3]: p[4] for p in items}
        cached = None if force or not self.relayed else self.cached_vectors(list(texts))
        deferred = set() if cached is None else self._writer_embeds(items, cached)
        if deferred:
            items = [p for p in items if (p[1], p[0]) not in deferred]
            texts = {p[3]: p[4] for p in items}
        vectors = self.embed_texts(texts, cached)
        if not self.relayed:  # the mirrors first (they mirror the store, whatever the index
            # does); relayed, the writes' own paths keep them
            with self._lock:
                self.loaded.update(etype.key, items, vectors, gone)
        if not items and not gone:  # (relayed: every one left to its writer for now)
            return deferred
        name = self.collection(etype.key)
        if self.fault:
            self.fault("before_vector_upsert")
        self.vectors.ensure_collection(name, self.embedder.dim)
        if gone:
            self.vectors.delete(name, [vector_id(t, e) for t, e in gone])
            for key in gone:
                self._uncached.pop(key, None)
        for i in range(0, len(items), UPSERT_CHUNK):
            part = items[i:i + UPSERT_CHUNK]
            self.vectors.upsert(
                name, [vector_id(p[1], p[0]) for p in part],
                np.stack([vectors[p[3]] for p in part]),
                [{"type": etype.name, "tenant": p[1], "version": p[2], "text_hash": p[3]}
                 for p in part], keep_newer=None if force else "version")
        if self.fault:
            self.fault("after_vector_upsert")
        heap.handled(sum(len(p[4]) for p in items))
        return deferred

    def _writer_embeds(self, items: list[Item], cached: Mapping[str, np.ndarray]) -> set[Key]:
        """The entities among ``items`` whose text is not in the embedding cache yet and whose
        writer has had less than :data:`EMBED_GRACE` seconds (since the relay first saw it) to
        put it there: the relay waits for the writer rather than embed the text a second time."""
        now = time.monotonic()
        waiting: set[Key] = set()
        for p in items:
            key = (p[1], p[0])
            if p[3] in cached:
                self._uncached.pop(key, None)
                continue
            first = self._uncached.setdefault(key, now)
            if now - first < EMBED_GRACE:
                waiting.add(key)
            else:
                del self._uncached[key]
        return waiting

    def ensure_local(self, etype: EntityType, keyword: bool = True) -> None:
        """Load the exact mirror (and, with ``keyword``, the BM25 indexes) of a type, once.

        Writes go on while it loads: the mirrors are read from one DuckDB snapshot with no lock
        held, then installed and brought forward to the commits made meanwhile under the locks
        (:mod:`dmf_hybrid._internal.mirror_load`). Inside a write transaction the load runs on a
        helper thread, so the mirrors see only committed state, never the open transaction's writes.
        """
        analysis = type_analysis(etype)
        if self.loaded.has(etype.key, keyword, analysis):
            return
        if self.store.db.in_transaction:
            errors: list[BaseException] = []

            def load() -> None:
                try:
                    self._load(etype, keyword, analysis)
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    errors.append(exc)

            worker = threading.Thread(target=load, name="dmf-load-mirror")
            worker.start()
            worker.join()
            if errors:
                raise errors[0]
            with self._lock:
                self.loaded.loaded(etype.key)
            return
        with self._building:  # one load at a time: a second caller finds the first's mirrors
            if self.loaded.has(etype.key, keyword, analysis):
                return
            snapshot = None if self.changes is None else read_snapshot(
                self.store, etype, model_id=self.embedder.model_id, dim=self.embedder.dim,
                block_bytes=self.block_bytes, mirror=etype.key not in self.loaded.vectors,
                keyword=analysis if keyword and not self.loaded.keyword_loaded(
                    etype.key, analysis) else None, fault=self.fault)
            # the database's lock, then the indexer's (a drain takes the indexer's alone, and
            # the database's only while holding neither): the load may write the embedding
            # cache, which takes the database's lock again
            with self.store.db.no_writes(), self._lock:
                if snapshot is None or not self._install(etype, analysis, snapshot) or (
                        not self.loaded.has(etype.key, keyword, analysis)):  # forgotten meanwhile
                    self._load(etype, keyword, analysis)  # reads only what is missing
                self.loaded.loaded(etype.key)

    def _install(self, etype: EntityType, analysis: TypeAnalyzer, snapshot: Snapshot) -> bool:
        """Install a snapshot's mirrors and bring them to the current state; False if what
        the commits since its seq changed is not known (both locks held)."""
        assert self.changes is not None
        changed = self.changes.between(self.store.db.reader(), snapshot.seq,
                                       self.store.db.visible_pos)
        if changed is None:  # a type defined, a reindex, too many events...
            return False
        name = etype.key
        own = (etype.name, etype.tenant)
        if snapshot.mirror is not None and name not in self.loaded.vectors:
            self.loaded.vectors[name] = snapshot.mirror
        if snapshot.keyword is not None and not self.loaded.keyword_loaded(name, analysis):
            self.loaded.set_keyword(name, analysis, snapshot.keyword)
        keys = set(snapshot.missing)  # vectors evicted from the cache (or never made)
        keys.update((etype.tenant, eid) for eid in changed.ids.get(own, ()))
        if keys:
            self._refresh_local(etype, sorted(keys))
        return True

    def _refresh_local(self, etype: EntityType, keys: Sequence[Key]) -> None:
        """Bring the loaded mirrors of a type to DuckDB's current rows of these keys (their
        vectors from the cache, or embedded now and cached); the vector index is not touched."""
        items, gone = self._items(etype, keys)
        vectors = self.embed_texts({p[3]: p[4] for p in items})
        with self._lock:
            self.loaded.update(etype.key, items, vectors, gone)

    def _load(self, etype: EntityType, keyword: bool, analysis: TypeAnalyzer) -> None:
        """Read the mirrors at the current state (the caller orders the locks)."""
        with self._lock:
            reader = self.store.db.reader()
            if etype.key not in self.loaded.vectors:
                local, missing = vector_mirror(reader, etype, self.embedder.model_id,
                                               self.embedder.dim, self.block_bytes)
                self.loaded.vectors[etype.key] = local
                if missing:  # vectors evicted from the cache (or never made): embed them
                    self._refresh_local(etype, missing)
            if keyword and not self.loaded.keyword_loaded(etype.key, analysis):
                self.loaded.set_keyword(etype.key, analysis,
                                        keyword_indexes(reader, etype, analysis))

    def bring_forward(self, entities: Mapping[tuple[str, str], set[str]]) -> None:
        """Other processes created, changed or removed these entities (by (type, tenant)):
        bring this process's loaded mirrors, and its own vector index, to their current rows
        (a shared vector index is the relay leader's to write, from the outbox). The
        database's lock is held; nothing here waits for a drain."""
        for (type_name, tenant), ids in sorted(entities.items()):
            etype = self.store.registry.get(type_name, tenant)
            if etype is None or etype.typedef.embed is None:
                continue
            keys = [(tenant, eid) for eid in sorted(ids)]
            if self.relayed:
                if self.loaded.holds(etype.key):
                    self._refresh_local(etype, keys)
                continue
            for i in range(0, len(keys), DRAIN_PIECE):
                self._apply_type(etype, keys[i:i + DRAIN_PIECE])

    def direct(self, etype: EntityType) -> bool:
        """Whether a type's searches read the store directly instead of mirrors: its vectors
        would not fit the memory budget (and nothing of it is loaded). Counted again after
        :data:`RECOUNT_SECONDS`."""
        if etype.typedef.embed is None or not self.loaded.budget_bytes:
            return False
        with self._lock:
            if self.loaded.holds(etype.key):
                return False
            known = self._direct.get(etype.key)
        now = time.monotonic()
        if known is None or now - known[1] > RECOUNT_SECONDS:
            rows = embedded_count(self.store.db.reader(), etype)
            known = (not self.loaded.fits(rows, self.embedder.dim), now)
            self._direct[etype.key] = known
        return known[0]

    def local(self, key: str) -> LocalVectors | None:
        """The loaded exact mirror of a type, by storage key (None until its first search)."""
        return self.loaded.vectors.get(key)

    def forget_local(self) -> None:
        """Drop the in-memory mirrors (they reload lazily)."""
        with self._lock:
            self.loaded.forget()

    def mirrors(self, etype: EntityType, tenant: str, keyword: bool = True, load: bool = True
                ) -> tuple[LocalVectors | None, KeywordIndex | None]:
        """A type's mirrors for a search of one tenant (the exact vectors, and its BM25 index or
        None if it has no document), as just used; with ``load``, loaded first if they are not
        (or were dropped to stay within the budget)."""
        analysis = type_analysis(etype)
        db = self.store.db
        while True:
            if load and db.holds_lock and not db.in_transaction:
                # writes are held off by this thread (a search's locked pass): read the current
                # state here; waiting for another thread's load would wait for this lock
                with self._lock:
                    if not self.loaded.has(etype.key, keyword, analysis):
                        self._load(etype, keyword, analysis)
                        self.loaded.loaded(etype.key)
            elif load:
                self.ensure_local(etype, keyword)
            with self._lock:
                if not load or self.loaded.has(etype.key, keyword, analysis):
                    return self.loaded.take(etype.key, tenant)

    # ------------------------------------------------------------------ outbox

    def drain(self, limit: int = DRAIN_ALL) -> int:
        """Apply pending outbox rows (oldest first); returns how many were applied.

        No store lock is held while it embeds or writes the vector index: it claims the
        entities of the rows it applies (waiting for a drain applying any of them to finish),
        reads their current state, embeds, and writes the indexes; only the embedding cache
        and the outbox's done flags are written in short transactions of their own.
        Called holding the write lock (inside a transaction), it applies only the rows no
        other drain is applying: a drain it waited for could be waiting for that lock.
        A process that shares its vector index and does not lead the relay applies nothing.
        """
        if not self.leading:
            return 0
        rows = self.store.outbox.pending(limit)
        if not rows:
            return 0
        keys = {(type_name, tenant, eid) for _seq, type_name, tenant, eid in rows}
        with self._claims.hold(keys, wait=not self.store.db.holds_lock) as held:
            return self._apply_rows(self._still_pending(
                [r for r in rows if (r[1], r[2], r[3]) in held]))

    def _still_pending(self, rows: list[OutboxRow]) -> list[OutboxRow]:
        """Those of ``rows`` another drain has not applied meanwhile."""
        return self.store.outbox.still_pending(rows)

    def _apply_rows(self, rows: list[OutboxRow], relay: bool = True) -> int:
        """Bring the indexes in step for these outbox rows' entities (claimed by the caller)
        and mark the rows done; with ``relay`` False, or not leading, only this process's
        mirrors, with the texts embedded into the cache (the relay finds them there), and the
        rows stay pending."""
        if not rows:
            return 0
        leading = relay and self.leading
        deferred: set[tuple[str, str, str]] = set()  # (type, tenant, id) left for the next turn
        by_type: dict[tuple[str, str], list[Key]] = {}
        for _seq, type_name, tenant, eid in rows:
            by_type.setdefault((tenant, type_name), []).append((tenant, eid))
        for tenant, type_name in sorted(by_type):
            etype = self.store.registry.get(type_name, tenant)
            if etype is None:  # another process may have defined it since this one followed
                self.store.db.sync()  # the log (outside a transaction; inside, the lock's
                etype = self.store.registry.get(type_name, tenant)  # holder has followed)
            if etype is None:  # a type gone from the registry
                continue
            keys = sorted(set(by_type[(tenant, type_name)]))
            for i in range(0, len(keys), DRAIN_PIECE):
                if leading:
                    deferred.update((type_name, *key) for key in self._apply_type(
                        etype, keys[i:i + DRAIN_PIECE]))
                else:
                    self._refresh_local(etype, keys[i:i + DRAIN_PIECE])
        if not leading:
            return 0
        done = [r[0] for r in rows if (r[1], r[2], r[3]) not in deferred]
        self.store.outbox.mark_done(done)
        return len(done)

    def pending(self) -> int:
        """How many outbox rows wait to be applied."""
        return self.store.outbox.count()

    def on_commit(self, batch: Iterable[tuple[int, str, str, str, str]]) -> None:
        """Transaction hook, run once the commit has let the write lock go: apply the rows the
        commit queued (waiting only for a drain of the same entities), and any other pending
        row nobody is applying (errors leave rows pending and will be replayed); relayed,
        only to this process's mirrors (the relay writes the index)."""
        own = {seq: (seq, type_name, tenant, eid) for seq, tenant, eid, type_name, _op in batch}
        applied = False
        try:
            with self._claims.hold({(t, tn, e) for _s, t, tn, e in own.values()},
                                   wait=not self.store.db.holds_lock) as held:
                mine = [r for r in sorted(own.values()) if (r[1], r[2], r[3]) in held]
                # (relayed: the mirrors take them even if the relay has applied them)
                self._apply_rows(mine if self.relayed else self._still_pending(mine),
                                 relay=not self.relayed)
            if self.relayed:  # their texts are in the shared cache now: wake the relay
                self.store.db.announce_outbox()
            others = [] if self.relayed else [
                r for r in self.store.outbox.pending(DRAIN_PIECE) if r[0] not in own]
            if others:
                with self._claims.hold({(t, tn, e) for _s, t, tn, e in others},
                                       wait=False) as held:
                    self._apply_rows(self._still_pending(
                        [r for r in others if (r[1], r[2], r[3]) in held]))
            applied = True
        except Exception:
            log.exception("indexing failed; outbox rows stay pending and will be replayed")
        finally:
            if not applied:  # (an interruption too: Ctrl-C while it embedded)
                self.behind = True

    def catch_up(self) -> None:
        """Apply the outbox rows a failed application left pending (else only a later
        commit would), before a search reads the mirrors; while it keeps failing, at most
        once per :data:`CATCH_UP_RETRY_S`; never holding the write lock."""
        if not self.behind or self.store.db.holds_lock or time.monotonic() < self._retry_at:
            return
        self.behind, done = False, False
        try:
            done = self.drain() < DRAIN_ALL
        except Exception:
            log.exception("applying pending outbox rows failed; they stay pending")
            self._retry_at = time.monotonic() + CATCH_UP_RETRY_S
        finally:
            if not done:
                self.behind = True

    # ------------------------------------------------------------------ repair

    def reconcile(self) -> ReconcileCounts:
        """Compare the vector index with DuckDB; repair missing, stale and orphan vectors."""
        with self._claims.exclusive(), self.store.db.no_writes(), self._lock:
            self.drain()
            counts = ReconcileCounts()
            for etype in self.store.types():
                if etype.typedef.embed is None:
                    continue
                name = self.collection(etype.key)
                self.vectors.ensure_collection(name, self.embedder.dim)
                stored = self.vectors.records(name)
                live = {vector_id(r[1], r[0]): r for r in self._live_rows(etype)}
                counts.checked += len(live)
                repair: list[Key] = []
                for vid, (eid, tenant, version, text_hash, _data, _key) in live.items():
                    meta = stored.get(vid)
                    if meta is None:
                        counts.missing += 1
                        repair.append((tenant, eid))
                    elif (meta.get("version") != version or meta.get("text_hash") != text_hash
                          or meta.get("tenant") != tenant):
                        counts.stale += 1
                        repair.append((tenant, eid))
                orphans = sorted(set(stored) - set(live))
                counts.orphan += len(orphans)
                if orphans:
                    self.vectors.delete(name, orphans)
                if repair:
                    self._apply_type(etype, repair, force=True)
            self.store.reconciled()
            return counts

    def reindex(self) -> ReindexCounts:
        """Rebuild every collection from DuckDB and the embedding cache."""
        with self._claims.exclusive(), self.store.db.no_writes(), self._lock:
            self.drain()
            counts = ReindexCounts()
            for etype in self.store.types():
                if etype.typedef.embed is None:
                    continue
                self.vectors.drop(self.collection(etype.key))
                live = self._live_rows(etype)
                self._apply_type(etype, [(r[1], r[0]) for r in live], force=True)
                counts.types += 1
                counts.entities += len(live)
            self.forget_local()
            return counts


def own_ids(hits: Iterable[tuple[str, float]], tenant: str) -> list[tuple[str, float]]:
    """``tenant``'s (entity ID, score) among vector-index hits (by vector ID), in order."""
    out = []
    for vid, score in hits:
        hit_tenant, eid = split_vector_id(vid)
        if hit_tenant == tenant:
            out.append((eid, score))
    return out


def _differs(eid: str) -> None:
    log.warning("text hash of %s differs from the stored one; using the current text", eid)
