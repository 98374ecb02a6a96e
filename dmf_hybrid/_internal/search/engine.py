"""The search planner: filter in DuckDB, score exactly or via ANN, fuse, resolve from DuckDB.

Flow of one search (every DuckDB read at one audit seq, see :class:`.scope.Scope`), each step
in a module of its own:

1. validate the request (:mod:`.request`); compile ``where`` (and
   ``conversation``) / ``related_to`` to SQL;
2. count the candidates in DuckDB (:mod:`.filter_cache`: counts are cached per audit seq; a
   filtered count brings the candidates' 64-bit ``hash(tenant, id)`` list along when the
   exact plan is likely, and always for a search with a keyword leg);
3. vector leg (:mod:`.vector_leg`): candidate sets up to ``exact_threshold`` are scored
   exactly against the in-memory mirror of the cached vectors (recall 1.0); larger ones ask
   the vector index (ANN) for about ``2 k / selectivity`` proposals, keep those in the
   candidate list (or, without one, those DuckDB confirms), and widen until enough survive —
   or score every candidate exactly when the index cannot surface enough;
   keyword leg (:mod:`.keyword_leg`): BM25 of the tenant's documents restricted to the same
   candidates;
4. fuse (RRF, :mod:`.fusion`) and resolve (:mod:`.resolution`) every proposed ID in DuckDB by
   primary key: a hit that is deleted, stale, in another tenant or failing the filter is
   dropped (fail closed); the returned entities are DuckDB's rows.

Scores are deterministic: candidates are ranked roughly in float32, then every candidate that
could reach the top is re-scored in float64 on its own (a BLAS product's last bits depend on
a row's position in the batch), and rankings are ordered by score descending, then entity ID.
``as_of`` searches (:mod:`.replay`) rebuild candidates and texts from the audit log and take
vectors from the cache, scored the same way, so a receipt replays to the same hits (unless the
ANN plan, which is approximate, answered it, or an entity was erased since).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np

from ..checks import check_reference_time, check_related_to
from ..config import Settings
from ..conversations import scope_to_conversation
from ..embeddings import Embedder, embed_queries
from ..embeddings.batching import make_query_batcher
from ..filters import parse_filter
from ..indexer import Indexer
from ..mirrors.keyword import KeywordIndex, exact_leg
from ..mirrors.vectors import LocalVectors
from ..models import Receipt, ReconcileCounts, ReindexCounts, SearchResult
from ..schema import EntityType
from ..store import Store
from ..store.changes import ChangeFeed
from ..store.mirror_reads import embedded_count
from ..store.state import Followed
from ..vector.base import VectorIndex, collection_name
from .direct import direct_legs
from .filter_cache import FilterCache
from .fusion import fuse
from .keyword_leg import keyword_leg
from .places import WholePlaces
from .profiles import effective, neighbour_support, strip_query
from .ranking import Ranking
from .relay import Relay
from .replay import ReplayCache, ReplayState, replay_legs, state_at
from .request import check_request, related_ids
from .rerank import read_query_time, rerank
from .resolution import resolve_hits
from .row_cache import RowCache
from .scope import Moved, Scope
from .vector_leg import WIDEN, vector_leg

log = logging.getLogger(__name__)

QUERY_CACHE_SIZE = 1024
#: Passes of a search that hold off writes, after the optimistic one found a commit.
LOCKED_PASSES = 3
#: Entities a shared vector index may be behind on that an ANN search scores from the mirror
#: beside the index's proposals; more than that, it scores every candidate exactly.
UNRELAYED_MAX = 2000
#: How deep each leg ranks before reciprocal rank fusion.
FUSION_DEPTH = 100
#: How many of the fused proposals the profile's steps after fusion re-score (at least k).
RERANK_DEPTH = FUSION_DEPTH


def mirror_budget(settings: Settings) -> int:
    """Bytes the mirrors may hold: ``mirror_budget_mb``, or a quarter of physical memory."""
    if settings.mirror_budget_mb:
        return int(settings.mirror_budget_mb * 2**20)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4


class SearchEngine:
    """Indexer plus planner for one store."""

    def __init__(self, store: Store, settings: Settings, embedder: Embedder,
                 vectors: VectorIndex) -> None:
        self.store = store
        self.settings = settings
        self.embedder = embedder
        self.vectors = vectors
        # what commits changed: for both search caches, and for mirrors loaded while writes go on
        self.changes = ChangeFeed(store.journal)
        self.indexer = Indexer(store, embedder, vectors, batch_size=settings.embed_batch_size,
                               block_bytes=settings.block_cache_mb * 2**20, changes=self.changes,
                               budget_bytes=mirror_budget(settings))
        self.filters = FilterCache(settings.exact_threshold, self.changes)
        self.places = WholePlaces(self.changes)
        self.rows = RowCache(settings.row_cache_size, self.changes)
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.query_batcher = make_query_batcher(embedder, settings)
        self._cache_lock = threading.Lock()
        #: relayed: (type, tenant) -> (log position, IDs with outbox rows pending then)
        self._pending: OrderedDict[tuple[str, str], tuple[int, list[str] | None]] = (
            OrderedDict())
        self._previous_model: str | None = None  # a model change not yet caught up with
        #: states ``as_of`` searches rebuilt from the log (an erase rewrites history: empty it)
        self.replayed = ReplayCache()
        #: with a vector index other processes share: which of them writes it
        self.relay: Relay | None = None

    def _on_write(self, _con: Any, _tenant: str, op: str, _type_name: str,
                  _entity_id: str, _principal: str | None) -> None:
        """Write hook: an erase rewrites the past states of its entity, so the replayed
        states go (now, and again once the erase commits)."""
        if op == "erase":
            self.replayed.clear()
            self.store.db.after_commit(self.replayed.clear)

    def _on_foreign(self, followed: Followed) -> None:
        """Another process's commits: bring the mirrors forward; an erase among them
        rewrites past states, so the replayed ones go."""
        if "erase" in followed.ops:
            self.replayed.clear()
        self.indexer.bring_forward(followed.entities)

    @classmethod
    def open(cls, store: Store, settings: Settings, embedder: Embedder, vectors: VectorIndex,
             *, replay: bool = True) -> SearchEngine:
        """An engine over ``store``; ``replay``: also :meth:`catch_up` now (else call it later).

        A model other than the one recorded in the store is an audited reindex: an event
        with op "reindex" is appended at once; catching up drops the old model's collections
        and embeds every entity with the new model (from the cache where it has vectors).
        """
        engine = cls(store, settings, embedder, vectors)
        store.listeners.append(engine.indexer.on_commit)
        store.hooks.add(engine._on_write)
        store.foreign_hooks.append(engine._on_foreign)
        engine._previous_model = engine._record_model(settings.tenant)
        if vectors.shared and store.db.shared:  # other processes write both
            engine.indexer.relayed = True
            engine.indexer.leading = store.db.lead()
            engine.relay = Relay(engine.indexer, store.db, engine.catch_up)
        if replay:
            engine.catch_up()
        if engine.relay is not None:
            engine.relay.start()
        return engine

    def catch_up(self) -> None:
        """Replay pending outbox rows and repair drift (after a model change: re-embed).

        Until it has run, searches are still correct (a vector that is missing or behind
        DuckDB is never returned) but may miss entities whose vectors are not indexed yet.
        A process that shares its vector index catches up when it takes the relay's lead.
        """
        if not self.indexer.leading:
            return
        self.indexer.drain()
        previous, self._previous_model = self._previous_model, None
        if previous is not None:
            for etype in self.store.types():
                self.vectors.drop(collection_name("dmf", etype.key, previous))
            self.indexer.reconcile()
        elif self._counts_differ() or self.store.reconcile_pending:
            self.indexer.reconcile()

    def _record_model(self, tenant: str) -> str | None:
        """The previous model's ID if the embedding model changed (recorded as an event)."""
        previous = self.store.record_embedding_model(self.embedder.model_id, self.embedder.dim,
                                                     tenant=tenant)
        if previous is not None:
            log.info("embedding model changed from %s to %s: re-embedding", previous,
                     self.embedder.model_id)
        return previous

    def _counts_differ(self) -> bool:
        for etype in self.store.types():
            if etype.typedef.embed is None:
                continue
            live = embedded_count(self.store.db.reader(), etype)
            name = self.indexer.collection(etype.key)
            have = self.vectors.count(name) if name in self.vectors.collections() else 0
            if live != have:
                return True
        return False

    def drain(self) -> int:
        """Apply pending outbox rows now."""
        return self.indexer.drain()

    def reconcile(self) -> ReconcileCounts:
        """Repair drift between DuckDB and the vector index."""
        return self.indexer.reconcile()

    def ensure_loaded(self, etype: EntityType) -> None:
        """Load a type's in-memory mirrors now (outside a write transaction, before a plan);
        a type searched directly has none."""
        if not self.indexer.direct(etype):
            self.indexer.ensure_local(etype)

    def warm(self) -> None:
        """Load every embedded type's mirrors now (the service does it before ``/readyz``, so
        its first search does not build them: 15-20 s at 100,000 entities)."""
        for etype in self.store.types():
            if etype.typedef.embed is not None and not self.indexer.direct(etype):
                self.indexer.ensure_local(etype)

    def reindex(self) -> ReindexCounts:
        """Rebuild the vector index from the cache."""
        return self.indexer.reindex()

    def close(self) -> None:
        """Apply what is pending and release the vector index client."""
        if self.query_batcher is not None:
            self.query_batcher.close()
        if self.relay is not None:
            self.relay.stop()
        try:
            self.indexer.drain()
        except Exception:  # noqa: BLE001 - pending rows are replayed on the next open
            log.exception("could not apply pending outbox rows on close")
        close = getattr(self.vectors, "close", None)
        if callable(close):
            close()

    def embed_query(self, text: str) -> np.ndarray:
        """The query vector of a text (cached by text)."""
        with self._cache_lock:
            vec = self._query_cache.get(text)
            if vec is not None:
                self._query_cache.move_to_end(text)
                return vec
        vec = (self.query_batcher.embed(text) if self.query_batcher is not None
               else embed_queries(self.embedder, [text])[0])
        with self._cache_lock:
            self._query_cache[text] = vec
            while len(self._query_cache) > QUERY_CACHE_SIZE:
                self._query_cache.popitem(last=False)
        return vec

    def search(self, tenant: str, type_name: Any, text: Any, *, where: Any = None,
               k: Any = 10, mode: Any = "hybrid", related_to: Any = None, as_of: Any = None,
               weights: Mapping[str, float] | None = None, fusion: str | None = None,
               rrf_k: int | None = None, query_terms: str | None = None,
               neighbour_weight: float | None = None, profile: bool = True,
               conversation: Any = None, reference_time: Any = None) -> SearchResult:
        """Top-k hits for a text under filters, resolved from DuckDB; see the module doc.

        The caller checked the arguments with the search's request model
        (:class:`~dmf_hybrid._internal.requests.SearchRequest`); here only what needs the store is.

        ``conversation``: only rows whose ``conversation`` field is that ID (ANDed with
        ``where``, so it is one more exact filter term).

        ``weights``, ``fusion``, ``rrf_k``, ``query_terms`` and ``neighbour_weight`` override
        the type's search profile, which overrides the settings (:mod:`.profiles`);
        ``profile=False`` leaves the profile out.

        ``reference_time`` (None: now): what the query's time phrases are read against
        (:mod:`.rerank`); the receipt names the windows.
        """
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round(timings.get(name, 0.0) + (now - clock) * 1000, 3)
            clock = now

        etype = check_request(self.store, tenant, self.settings.max_k, type_name, k)
        rel = check_related_to(related_to)
        query_time = read_query_time(text, check_reference_time(reference_time))
        opts = effective(etype.typedef.search if profile else None, self.settings,
                         fusion=fusion, rrf_k=rrf_k, weights=weights, query_terms=query_terms,
                         neighbour_weight=neighbour_weight)
        if opts.query_terms == "drop_stopwords":
            text = strip_query(text)
        node = scope_to_conversation(etype, parse_filter(etype, where), conversation)
        seq = self.store.timetravel.resolve_as_of(tenant, as_of)
        related = None if rel is None else related_ids(self.store, tenant, etype, rel, seq)
        if seq is None and not self.store.db.in_transaction:
            self.indexer.catch_up()  # rows an indexing that failed left pending
        # a type whose mirrors would not fit the memory budget is read from the store
        direct = seq is None and self.indexer.direct(etype)
        if seq is None and not direct:
            self.indexer.ensure_local(etype, keyword=mode != "vector")
        qvec = self.embed_query(text) if mode != "keyword" else None
        lap("embed_ms")
        db = self.store.db
        # first optimistically, then (if a commit got in) holding off writes; a pass that holds
        # them off can still find the state brought forward (this process following commits
        # it had not finished following), so it may run again, a bounded number of times
        passes = (False,) + (True,) * LOCKED_PASSES
        for attempt, locked in enumerate(passes):
            try:
                with db.no_writes() if locked else nullcontext():
                    stamp = db.stable()
                    if stamp is None:  # a commit is becoming visible right now
                        raise Moved
                    reads = db.reads()
                    generation, visible = stamp
                    log = self.store.log
                    at = ((log.position(tenant, seq), seq) if seq is not None
                          else (log.pos, log.head(tenant)) if db.in_transaction
                          else (visible, log.committed_head(tenant)))
                    scope = Scope(self.store, etype, tenant, seq, at, node, related)
                    if seq is None and not db.in_transaction:
                        self.rows.attach(scope, generation, visible)
                    # this pass's mirrors (a type evicted since is loaded again; one evicted
                    # later stays as it is, which the pass's stamp vouches for)
                    local, kw = (None, None) if direct else self.indexer.mirrors(
                        etype, tenant, keyword=mode != "vector", load=seq is None)
                    # candidates are listed by 64-bit hash(tenant, id), not as strings, while
                    # the legs can map hashes (no collision in the mirror or the BM25 index)
                    scope.by_key = not direct and (mode == "keyword" or (
                        local is not None and not local.collided)) and (
                        mode == "vector" or kw is None or not kw.collided)
                    # the keyword leg filters exactly by the list, so it wants one at any size
                    scope.list_large = mode != "vector" and not direct
                    state = None if seq is None else state_at(scope, self.replayed)
                    if state is None or scope.filtered:
                        scope.count = self.filters.count(scope, cacheable=seq is None
                                                         and not db.in_transaction)
                    lap("candidates_ms")
                    depth = k if mode != "hybrid" else max(k, FUSION_DEPTH)
                    while True:
                        rankings, plan = self._legs(scope, mode, text, qvec, depth, lap, state,
                                                    local, kw, direct)
                        fused = (fuse(rankings, opts.fusion, k=opts.rrf_k,
                                      weights=opts.weights, depth=depth)
                                 if mode == "hybrid" else rankings[mode])
                        if opts.neighbours is not None:
                            fused = neighbour_support(
                                scope, fused, opts.neighbours,
                                floor=_floor(fused, mode, opts.fusion),
                                whole=self.places if seq is None and not db.in_transaction
                                else None)
                        lap("fuse_ms")
                        fused = rerank(scope, fused, time=opts.time, sessions=opts.sessions,
                                       named=opts.named, dates=etype.typedef.dates,
                                       query_time=query_time, depth=max(k, RERANK_DEPTH))
                        lap("rerank_ms")
                        hits, dropped = resolve_hits(
                            scope, self.store, None if seq is not None else local, fused,
                            rankings, k, direct=direct)
                        lap("resolve_ms")
                        truncated = any(len(r) >= depth for r in rankings.values())
                        if len(hits) >= k or not truncated or depth >= scope.count:
                            break
                        depth *= WIDEN  # resolution dropped stale proposals: look deeper
                    if seq is None and not db.unchanged(generation, reads):
                        raise Moved
                    for remember in scope.on_valid:
                        remember()
                break
            except Moved:
                if attempt == len(passes) - 1:  # pragma: no cover - the state keeps moving
                    raise
                lap("retry_ms")
        timings["total_ms"] = round(sum(timings.values()), 3)
        receipt = Receipt(
            resolved_at_seq=scope.tenant_seq, mode=mode, plan=plan, candidates=scope.count,
            model_id=self.embedder.model_id, k=k,
            rrf_k=opts.rrf_k if mode == "hybrid" else None, dropped=dropped,
            index_unavailable=scope.index_unavailable, direct=direct,
            fusion=opts.fusion if mode == "hybrid" else None,
            reference_time=query_time.reference if query_time.windows or
            reference_time is not None else None,
            time_windows=[w.as_json() for w in query_time.windows],
            asks_when=query_time.asks_when, timings_ms=timings,
        )
        return SearchResult(hits=hits, receipt=receipt)

    def _legs(self, scope: Scope, mode: str, text: str, qvec: np.ndarray | None, depth: int,
              lap: Callable[[str], None], state: ReplayState | None,
              local: LocalVectors | None, kw: KeywordIndex | None, direct: bool
              ) -> tuple[dict[str, Ranking], str]:
        if state is not None:
            replay = replay_legs(scope, self.indexer, mode, text, qvec, depth, state)
            lap("legs_ms")
            return replay, "exact"
        if direct:
            legs = direct_legs(scope, self.indexer, self.vectors,
                               self.indexer.collection(scope.etype.key), mode, text, qvec,
                               depth, self.settings.exact_threshold, self._unrelayed(scope))
            lap("legs_ms")
            return legs
        rankings: dict[str, Ranking] = {}
        plan = "exact"
        if mode != "keyword":
            assert qvec is not None
            rankings["vector"], plan = vector_leg(
                scope, local, self.vectors,
                self.indexer.collection(scope.etype.key), qvec, depth,
                self.settings.exact_threshold, self._unrelayed(scope))
            lap("vector_ms")
        if mode != "vector":
            rankings["keyword"] = keyword_leg(scope, kw, text, depth,
                                              self.settings.exact_threshold)
            if mode == "hybrid":
                rankings["exact"] = exact_leg(kw, text, rankings["keyword"])
            lap("keyword_ms")
        return rankings, plan

    def _unrelayed(self, scope: Scope) -> Callable[[], list[str] | None] | None:
        """What the vector index may not have yet when other processes write it (the relay
        leader): the entities of the scope's type and tenant with outbox rows pending."""
        if not self.indexer.relayed:
            return None
        name, tenant = scope.etype.name, scope.tenant
        if self.store.db.in_transaction or scope.seq is not None:
            return lambda: self.store.outbox.pending_ids(name, tenant, UNRELAYED_MAX)
        key, pos = (name, tenant), scope.pos

        def pending() -> list[str] | None:
            # kept per log position: rows are added to the outbox only by commits, which
            # move it; the relay marking rows done makes the kept list a superset, whose
            # extra entities the mirror scores as the index would (no round trip, and a
            # search with nothing else to read from the database reads nothing)
            with self._cache_lock:
                held = self._pending.get(key)
            if held is not None and held[0] == pos:
                return held[1]
            ids = self.store.outbox.pending_ids(name, tenant, UNRELAYED_MAX)
            with self._cache_lock:
                self._pending[key] = (pos, ids)
                self._pending.move_to_end(key)
                while len(self._pending) > QUERY_CACHE_SIZE:
                    self._pending.popitem(last=False)
            return ids

        return pending

    def forget_candidates(self) -> None:
        """Drop the cached candidate counts, lists and rows (they are rebuilt on demand)."""
        self.filters.forget()
        self.rows.forget()
        self.places.forget()


def _floor(fused: Ranking, mode: str, fusion: str) -> float:
    """The own score of a neighbour no leg proposed: 0 where a missing row scores 0 (RRF,
    BM25), else the lowest proposed score (it ranked below all of them)."""
    if not fused or mode == "keyword" or (mode == "hybrid" and fusion == "rrf"):
        return 0.0
    return min(float(s) for _, s in fused)
