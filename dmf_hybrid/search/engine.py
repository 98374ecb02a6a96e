"""The search planner: filter in DuckDB, score exactly or via ANN, fuse, resolve from DuckDB.

Flow of one search (every DuckDB read at one audit seq, see :class:`_Scope`):

1. validate the request against the schema; compile ``where`` / ``related_to`` to SQL;
2. count the candidates in DuckDB (unfiltered counts are cached per audit seq; a filtered
   count brings the candidates' 64-bit ``hash(tenant, id)`` list along when the exact plan
   is likely, and always for a search with a keyword leg);
3. vector leg: candidate sets up to ``exact_threshold`` are scored exactly against the
   in-memory mirror of the cached vectors (recall 1.0); larger ones ask the vector index (ANN)
   for about ``2 k / selectivity`` proposals, keep those in the candidate list (or, without
   one, those DuckDB confirms), and widen until enough survive — or score every candidate
   exactly when the index cannot surface enough;
   keyword leg: BM25 of the tenant's documents restricted to the same candidates;
4. fuse (RRF) and resolve every proposed ID in DuckDB by primary key: a hit that is deleted,
   stale, in another tenant or failing the filter is dropped (fail closed); the returned
   entities are DuckDB's rows.

Scores are deterministic: candidates are ranked roughly in float32, then every candidate that
could reach the top is re-scored in float64 on its own (a BLAS product's last bits depend on
a row's position in the batch), and rankings are ordered by score descending, then entity ID.
``as_of`` searches rebuild candidates and texts from the audit log and take vectors from the
cache, scored the same way, so a receipt replays to the same hits (unless the ANN plan, which
is approximate, answered it, or an entity was erased since).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt

from ..config import Settings
from ..embeddings import Embedder, HashEmbedder, SentenceTransformerEmbedder
from ..errors import FilterError, NotFound, SchemaError, ValidationError
from ..indexer import SCORE_EPS, Indexer, LocalVectors, key_sql, own_ids
from ..models import Entity
from ..onnx_embedder import ONNX_EMBEDDER, OnnxEmbedder
from ..query_batcher import make_query_batcher
from ..schema import EntityType, FilterNode, parse_filter
from ..store import Store
from ..store.sql import compile_filter, q
from ..store.tables import SYSTEM_COLUMNS, table_name
from ..vector.base import VectorIndex, collection_name
from ..vector.exact import ExactIndex, normalise_rows
from .fusion import rrf
from .keys import locate
from .keyword import KeywordIndex
from .results import Hit, LegScore, Receipt, SearchResult

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword")
MAX_QUERY_CHARS = 10_000
QUERY_CACHE_SIZE = 1024
COUNT_CACHE_SIZE = 256
#: Candidate lists kept (each at most ``exact_threshold`` keys or IDs).
LIST_CACHE_SIZE = 32
#: How deep each leg ranks before reciprocal rank fusion.
FUSION_DEPTH = 100
#: ANN proposals asked per wanted survivor, on top of 1 / selectivity.
ANN_OVERFETCH = 2.0
#: Factor by which the ANN (and filtered keyword) fetch grows when too few survive.
WIDEN = 4
SCORE_DIGITS = 6
#: Up to this many IDs are looked up through the primary-key index, more by a hash join
#: (measured on 100k rows: 0.1-0.25 ms per ID by index, 35-50 ms for a scan).
INDEX_LOOKUP_MAX = 256
#: IDs resolved beyond the ones still needed (a few proposals may fail resolution).
RESOLVE_SLACK = 0
_TEXT_HASH = SYSTEM_COLUMNS.index("text_hash")
_TENANT = SYSTEM_COLUMNS.index("tenant")
_DELETED = SYSTEM_COLUMNS.index("deleted_at")

Ranking = list[tuple[str, float]]
Row = tuple[Any, ...]


def make_embedder(settings: Settings) -> Embedder:
    """The embedder a Settings names: the bundled model (torch or ONNX), the hash embedder or
    a model path."""
    if settings.embedder == "hash":
        return HashEmbedder()
    if settings.embedder == ONNX_EMBEDDER:
        return OnnxEmbedder(settings.model_path, cache_dir=settings.onnx_cache_dir,
                            num_threads=settings.onnx_threads or None)
    threads = settings.torch_threads or None
    if settings.embedder == "minilm":
        return SentenceTransformerEmbedder(settings.model_path, num_threads=threads)
    return SentenceTransformerEmbedder(settings.embedder, num_threads=threads)


def make_vector_index(settings: Settings, directory: Path | None) -> VectorIndex:
    """Chroma on disk under the memory directory, a Chroma server, or in-memory exact."""
    from ..vector.chroma import ChromaIndex

    if settings.chroma_url:
        from urllib.parse import urlparse

        url = urlparse(settings.chroma_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValidationError("chroma_url must look like http://host:port",
                                  field="chroma_url")
        return ChromaIndex.http(url.hostname, url.port or 8000, ssl=url.scheme == "https")
    if directory is None:
        return ExactIndex()
    return ChromaIndex.persistent(str(directory / "chroma"))


def precise_scores(unit_rows: npt.NDArray[np.float32], query: npt.NDArray[np.float64]
                   ) -> npt.NDArray[np.float64]:
    """Cosine of each unit row with a unit query in float64, independent of the row's batch."""
    if not len(unit_rows):
        return np.zeros(0, dtype=np.float64)
    scores: npt.NDArray[np.float64] = (unit_rows.astype(np.float64) * query).sum(axis=1)
    return scores


def ranked(ids: Sequence[str], scores: npt.ArrayLike, depth: int) -> Ranking:
    """The best ``depth`` (id, score): score descending, then entity ID ascending."""
    values = np.asarray(scores, dtype=np.float64)
    if len(values) > depth > 0:
        kth = np.partition(values, len(values) - depth)[len(values) - depth]
        keep = np.flatnonzero(values >= kth).tolist()  # ties at the cut stay, decided by ID
    else:
        keep = list(range(len(values)))
    pairs = sorted(((ids[i], float(values[i])) for i in keep),
                   key=lambda item: (-item[1], item[0]))
    return pairs[:depth]


class _Moved(Exception):
    """A commit happened during an optimistic search: redo it holding off writes."""


class _Scope:
    """The candidate set of one search and the reads it makes, all at one audit seq.

    Reads run optimistically at the last committed seq (or, in the writer's own transaction,
    at its seq): the database's commit seqlock (:meth:`Database.stable`) tells afterwards
    whether a commit happened in between, and if one did, the search is redone holding off
    writes (:class:`_Moved`). Every entity change is a commit, so an unchanged commit
    generation means an unchanged state.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Store, etype: EntityType,
                 tenant: str, seq: int | None, at_seq: int, node: FilterNode | None,
                 related: list[str] | None) -> None:
        self.con, self.etype, self.tenant, self.seq = con, etype, tenant, seq
        self.source_params: list[Any] = []
        self.source = store.source_sql(etype, tenant, seq, self.source_params)
        self.filter_params: list[Any] = []
        self.filt = compile_filter(node, self.filter_params)
        if related is not None:
            self.filt += " AND id IN (SELECT unnest(CAST(? AS VARCHAR[])))"
            self.filter_params.append(related)
        self.params = self.source_params + self.filter_params
        self.filtered = node is not None or related is not None
        self.table = table_name(etype.name)
        self.count = 0
        self.seen_seq = at_seq
        self.columns = ", ".join(list(SYSTEM_COLUMNS) + [q(n) for n in etype.fields])
        self.by_key = False  # list candidates by DuckDB hash(tenant, id), not ID
        self.list_large = False  # list the candidates even when the ANN plan is likely
        self._ids: list[str] | None = None
        self._keys: npt.NDArray[np.uint64] | None = None
        # the mirror rows of the candidate list, kept with a cached list (LocalVectors.top)
        self.row_memo: dict[str, Any] | None = None
        self.rows: dict[str, Row] = {}
        self._checked: set[str] = set()
        # IDs drawn from this scope's own candidate list: live, in the tenant and passing the
        # filter at this very state, so fetching their rows needs no filter
        self.proven: set[str] = set()
        # cache writes made only once the search is known to have read one state
        self.on_valid: list[Callable[[], None]] = []

    def count_candidates(self, with_list: bool = False) -> int:
        """How many candidates there are; ``with_list``: also the candidates, in one scan."""
        listed = f", list({self._key_sql}) AS ids" if with_list else ""
        table = self.con.execute(
            f"SELECT count(*) AS n{listed} FROM {self.source} WHERE {self.filt}",
            self.params).fetch_arrow_table()
        if with_list:
            self._keep_list(table.column("ids")[0])
        return int(table.column("n")[0].as_py())

    def listed(self) -> npt.NDArray[np.uint64] | list[str] | None:
        """The candidate list fetched so far (keys or IDs, as ``by_key`` says), if any."""
        return self._keys if self.by_key else self._ids

    def adopt(self, listed: npt.NDArray[np.uint64] | list[str], memo: dict[str, Any]) -> None:
        """Take a candidate list read earlier at this very state (see SearchEngine._count)."""
        self.row_memo = memo
        if self.by_key:
            self._keys = listed  # type: ignore[assignment]
        else:
            self._ids = listed  # type: ignore[assignment]

    @property
    def _key_sql(self) -> str:
        return key_sql() if self.by_key else "id"

    def _keep_list(self, scalar: Any) -> None:
        values = scalar.values
        if self.by_key:
            self._keys = (np.zeros(0, dtype=np.uint64) if values is None
                          else values.to_numpy(zero_copy_only=False).astype(np.uint64))
        else:
            self._ids = [] if values is None else [str(i) for i in values.to_pylist()]

    def candidate_keys(self) -> npt.NDArray[np.uint64]:
        """Every candidate's DuckDB ``hash(tenant, id)`` (needs ``by_key``; fetched once)."""
        assert self.by_key
        if self._keys is None:
            self._fetch_list()
        assert self._keys is not None
        return self._keys

    def candidate_ids(self) -> list[str]:
        """Every candidate ID (fetched once; in no particular order)."""
        if self._ids is None:
            self.by_key = False
            self._fetch_list()
        assert self._ids is not None
        return self._ids

    def _fetch_list(self) -> None:
        table = self.con.execute(
            f"SELECT list({self._key_sql}) AS ids FROM {self.source} WHERE {self.filt}",
            self.params).fetch_arrow_table()
        self._keep_list(table.column("ids")[0])

    def membership(self, local: LocalVectors) -> Callable[[list[str]], set[str]]:
        """A test of which of some IDs are candidates, by the candidate list (fetched)."""
        if self.by_key:
            memo = self.row_memo if self.row_memo is not None else {}
            ordered = memo.get("sorted_keys")
            if ordered is None:
                ordered = memo["sorted_keys"] = np.sort(self.candidate_keys())

            def by_key(ids: list[str]) -> set[str]:
                keys = local.keys_of(self.tenant, ids)  # 0: not in the mirror
                _, hit = locate(ordered, keys)
                return {eid for eid, ok in zip(ids, (hit & (keys != 0)).tolist(), strict=True)
                        if ok}
            return by_key
        listed = set(self.candidate_ids())
        return lambda ids: {eid for eid in ids if eid in listed}

    def fingerprint(self) -> str:
        """A short hash of this candidate set's definition (not of its contents)."""
        text = repr((self.etype.name, self.tenant, self.filt, self.filter_params))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def fetch_rows(self, ids: Sequence[str]) -> dict[str, Row]:
        """The full rows of those ``ids`` that are candidates (live, in tenant, filter holds)."""
        wanted = [i for i in dict.fromkeys(ids) if i not in self._checked]
        if wanted:
            for row in self._select_rows(wanted):
                self.rows[row[0]] = row
            self._checked.update(wanted)
        return {i: self.rows[i] for i in ids if i in self.rows}

    def _select_rows(self, ids: list[str]) -> list[Row]:
        if self.seq is not None:
            return self.con.execute(
                f"SELECT {self.columns} FROM {self.source} WHERE {self.filt} AND id IN "
                "(SELECT unnest(CAST(? AS VARCHAR[])))", [*self.params, ids]).fetchall()
        if len(ids) <= INDEX_LOOKUP_MAX:
            # a constant ID list alone on the table is answered from the ID index; the
            # other conditions go outside the (materialised) lookup, or DuckDB scans
            lookup = f"id IN ({', '.join('?' * len(ids))})"
            if not self.filtered or self.proven.issuperset(ids):
                # no filter to apply: tenant and liveness are plain columns, checked here
                rows = self.con.execute(f"SELECT {self.columns} FROM {self.table} "
                                        f"WHERE {lookup}", ids).fetchall()
                return [r for r in rows if r[_TENANT] == self.tenant and r[_DELETED] is None]
            params: list[Any] = [*ids, self.tenant, *self.filter_params]
        else:
            lookup = "id IN (SELECT unnest(CAST(? AS VARCHAR[])))"
            params = [ids, self.tenant, *self.filter_params]
        return self.con.execute(
            f"WITH hit AS MATERIALIZED (SELECT {self.columns} FROM {self.table} "
            f"WHERE {lookup}) SELECT * FROM hit WHERE tenant = ? AND deleted_at IS NULL "
            f"AND {self.filt}", params).fetchall()


class SearchEngine:
    """Indexer plus planner for one store."""

    def __init__(self, store: Store, settings: Settings, embedder: Embedder,
                 vectors: VectorIndex) -> None:
        self.store = store
        self.settings = settings
        self.embedder = embedder
        self.vectors = vectors
        self.indexer = Indexer(store, embedder, vectors, batch_size=settings.embed_batch_size)
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.query_batcher = make_query_batcher(embedder, settings)
        self._count_cache: OrderedDict[tuple[str, str, int], int] = OrderedDict()
        self._guesses: OrderedDict[str, int] = OrderedDict()  # last count of each filter
        # (fingerprint, seq, by_key) -> (count, candidate list or None, its row memo)
        self._lists: OrderedDict[tuple[str, int, bool], tuple[int, Any, dict[str, Any]]] = (
            OrderedDict())
        self._cache_lock = threading.Lock()
        self._previous_model: str | None = None  # a model change not yet caught up with

    @classmethod
    def open(cls, store: Store, settings: Settings, directory: Path | None, *,
             embedder: Embedder | None = None, vector_index: VectorIndex | None = None,
             replay: bool = True) -> SearchEngine:
        """An engine over ``store``; ``replay``: also :meth:`catch_up` now (else call it later).

        A model other than the one recorded in the store is an audited reindex: an event
        with op "reindex" is appended at once; catching up drops the old model's collections
        and embeds every entity with the new model (from the cache where it has vectors).
        """
        engine = cls(store, settings, embedder or make_embedder(settings),
                     vector_index or make_vector_index(settings, directory))
        store.listeners.append(engine.indexer.on_commit)
        engine._previous_model = engine._record_model(settings.tenant)
        if replay:
            engine.catch_up()
        return engine

    def catch_up(self) -> None:
        """Replay pending outbox rows and repair drift (after a model change: re-embed).

        Until it has run, searches are still correct (a vector that is missing or behind
        DuckDB is never returned) but may miss entities whose vectors are not indexed yet.
        """
        self.indexer.drain()
        previous, self._previous_model = self._previous_model, None
        if previous is not None:
            for etype in self.store.types():
                self.vectors.drop(collection_name("dmf", etype.name, previous))
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
            row = self.store.db.fetchone(
                f'SELECT count(*) FROM "ent_{etype.name}" WHERE deleted_at IS NULL '
                "AND text_hash IS NOT NULL")
            live = int(row[0]) if row else 0
            name = self.indexer.collection(etype.name)
            have = self.vectors.count(name) if name in self.vectors.collections() else 0
            if live != have:
                return True
        return False

    def drain(self) -> int:
        """Apply pending outbox rows now."""
        return self.indexer.drain()

    def reconcile(self) -> dict[str, int]:
        """Repair drift between DuckDB and the vector index."""
        return self.indexer.reconcile()

    def reindex(self) -> dict[str, int]:
        """Rebuild the vector index from the cache."""
        return self.indexer.reindex()

    def close(self) -> None:
        """Apply what is pending and release the vector index client."""
        if self.query_batcher is not None:
            self.query_batcher.close()
        try:
            self.indexer.drain()
        except Exception:  # noqa: BLE001 - pending rows are replayed on the next open
            log.exception("could not apply pending outbox rows on close")
        close = getattr(self.vectors, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------ helpers

    def embed_query(self, text: str) -> np.ndarray:
        """The query vector of a text (cached by text)."""
        with self._cache_lock:
            vec = self._query_cache.get(text)
            if vec is not None:
                self._query_cache.move_to_end(text)
                return vec
        vec = self.query_batcher.embed(text) if self.query_batcher is not None else (
            np.asarray(self.embedder.embed([text]), dtype=np.float32)[0])
        with self._cache_lock:
            self._query_cache[text] = vec
            while len(self._query_cache) > QUERY_CACHE_SIZE:
                self._query_cache.popitem(last=False)
        return vec

    def _check(self, type_name: Any, text: Any, k: Any, mode: Any,
               related_to: Any) -> tuple[EntityType, str, int, str, dict[str, str] | None]:
        etype = self.store.type_of(type_name)
        if etype.typedef.embed is None:
            raise SchemaError(f"{etype.name} has no embed template, so it is not searchable",
                              field="type")
        if mode not in MODES:
            raise ValidationError(f"mode must be one of {', '.join(MODES)}", field="mode")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.settings.max_k:
            raise ValidationError(f"k must be an integer from 1 to {self.settings.max_k}",
                                  field="k")
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("text must be a non-empty string", field="text")
        if len(text) > MAX_QUERY_CHARS:
            raise ValidationError(f"text is longer than {MAX_QUERY_CHARS} characters",
                                  field="text")
        rel = None
        if related_to is not None:
            if not isinstance(related_to, Mapping) or not {"relation", "from"} <= set(
                    related_to) or set(related_to) - {"relation", "from", "direction"}:
                raise FilterError('related_to takes {"relation": name, "from": entity_id, '
                                  '"direction": "out"|"in"}', field="related_to")
            direction = related_to.get("direction", "out")
            if direction not in ("out", "in"):
                raise FilterError("related_to.direction must be 'out' or 'in'",
                                  field="related_to.direction")
            if not isinstance(related_to["relation"], str) or not isinstance(
                    related_to["from"], str):
                raise FilterError("related_to.relation and .from must be strings",
                                  field="related_to")
            rel = {"relation": related_to["relation"], "from": related_to["from"],
                   "direction": direction}
        return etype, text, k, mode, rel

    def _related(self, tenant: str, etype: EntityType, rel: dict[str, str],
                 seq: int | None) -> list[str]:
        """The IDs linked to ``rel["from"]`` (NotFound / FilterError when it makes no sense)."""
        try:
            source = self.store.get(tenant, rel["from"], as_of=seq)
        except NotFound as exc:
            raise NotFound(f"related_to.from: {exc.message}", field="related_to.from",
                           entity_id=rel["from"]) from None
        declaring = self.store.type_of(source.type) if rel["direction"] == "out" else etype
        if rel["relation"] not in declaring.typedef.relations:
            known = ", ".join(sorted(declaring.typedef.relations)) or "none"
            raise FilterError(f"{declaring.name} has no relation {rel['relation']!r} "
                              f"(known: {known})", field="related_to.relation")
        return self.store.related_ids(tenant, rel["from"], rel["relation"], rel["direction"],
                                      seq)

    # ------------------------------------------------------------------ search

    def search(self, tenant: str, type_name: Any, text: Any, *, where: Any = None,
               k: Any = 10, mode: Any = "hybrid", related_to: Any = None, as_of: Any = None,
               weights: Mapping[str, float] | None = None) -> SearchResult:
        """Top-k hits for a text under filters, resolved from DuckDB; see the module doc."""
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round(timings.get(name, 0.0) + (now - clock) * 1000, 3)
            clock = now

        etype, text, k, mode, rel = self._check(type_name, text, k, mode, related_to)
        node = parse_filter(etype, where)
        seq = self.store.resolve_as_of(as_of)
        related = None if rel is None else self._related(tenant, etype, rel, seq)
        if seq is None:
            self.indexer.ensure_local(etype, keyword=mode != "vector")
        qvec = self.embed_query(text) if mode != "keyword" else None
        lap("embed_ms")
        db = self.store.db
        # first optimistically, then (if a commit got in) holding off writes
        for locked in (False, True):
            try:
                with db.no_writes() if locked else nullcontext():
                    stamp = db.stable()
                    if stamp is None:  # a commit is becoming visible right now
                        raise _Moved
                    generation, visible = stamp
                    at_seq = seq if seq is not None else (
                        self.store.last_seq if db.in_transaction else visible)
                    scope = _Scope(db.reader(), self.store, etype, tenant, seq, at_seq, node,
                                   related)
                    local = self.indexer.local(etype.name)
                    kw = self.indexer.keyword_index(etype.name, tenant)
                    # candidates are listed by 64-bit hash(tenant, id), not as strings, while
                    # the legs can map hashes (no collision in the mirror or the BM25 index)
                    scope.by_key = (mode == "keyword" or (
                        local is not None and not local.collided)) and (
                        mode == "vector" or kw is None or not kw.collided)
                    # the keyword leg filters exactly by the list, so it wants one at any size
                    scope.list_large = mode != "vector"
                    scope.count = self._count(scope, cacheable=seq is None
                                              and not db.in_transaction)
                    lap("candidates_ms")
                    depth = k if mode != "hybrid" else max(k, FUSION_DEPTH)
                    while True:
                        rankings, plan = self._legs(scope, mode, text, qvec, depth, lap)
                        fused = (rrf(rankings, k=self.settings.rrf_k, weights=weights)
                                 if mode == "hybrid" else rankings[mode])
                        hits, dropped = self._resolve(scope, fused, rankings, k)
                        lap("resolve_ms")
                        truncated = any(len(r) >= depth for r in rankings.values())
                        if len(hits) >= k or not truncated or depth >= scope.count:
                            break
                        depth *= WIDEN  # resolution dropped stale proposals: look deeper
                    if seq is None and not db.unchanged(generation):
                        raise _Moved
                    for remember in scope.on_valid:
                        remember()
                break
            except _Moved:
                if locked:  # pragma: no cover - nothing commits while writes are held off
                    raise
                lap("retry_ms")
        timings["total_ms"] = round(sum(timings.values()), 3)
        receipt = Receipt(
            resolved_at_seq=scope.seen_seq, mode=mode, plan=plan, candidates=scope.count,
            model_id=self.embedder.model_id, k=k,
            rrf_k=self.settings.rrf_k if mode == "hybrid" else None, dropped=dropped,
            timings_ms=timings,
        )
        return SearchResult(hits=hits, receipt=receipt)

    def _count(self, scope: _Scope, cacheable: bool) -> int:
        """Candidates at the search's seq (with their list when the exact plan is likely).

        Counts and candidate lists of committed states are cached by audit seq (a filter
        cache: the same filter at the same seq has the same candidates; every entity change
        appends an event, so a new seq is a new key). They are stored only once the search
        has checked that it read exactly that state (``on_valid``), and never inside a write
        transaction, whose seq is not committed yet. A filtered count comes with the
        candidate list in the same scan when the last count of that filter was small enough.
        """
        if scope.seq is not None:
            return scope.count_candidates()
        threshold = self.settings.exact_threshold
        if scope.filtered:
            shape = scope.fingerprint()
            key = (shape, scope.seen_seq, scope.by_key)
            with self._cache_lock:
                cached = self._lists.get(key) if cacheable else None
                guess = self._guesses.get(shape)
            if cached is not None:
                count, listed, memo = cached
                if listed is not None:
                    scope.adopt(listed, memo)
                    return count
                if count > threshold and not scope.list_large:  # the count is enough for ANN
                    return count
            count = scope.count_candidates(
                with_list=guess is None or guess <= threshold or scope.list_large)
            with self._cache_lock:  # only a planning hint: safe to keep whatever happens
                _remember(self._guesses, shape, count)
            found = scope.listed() if count <= threshold or scope.list_large else None
            if cacheable:
                fresh: dict[str, Any] = {}
                scope.row_memo = fresh
                scope.on_valid.append(lambda: self._keep(self._lists, key,
                                                         (count, found, fresh)))
            return count
        count_key = (scope.etype.name, scope.tenant, scope.seen_seq)
        with self._cache_lock:
            known = self._count_cache.get(count_key) if cacheable else None
        if known is not None:
            return known
        count = scope.count_candidates()
        if cacheable:
            scope.on_valid.append(lambda: self._keep(self._count_cache, count_key, count))
        return count

    def _keep(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        with self._cache_lock:
            _remember(cache, key, value,
                      LIST_CACHE_SIZE if cache is self._lists else COUNT_CACHE_SIZE)

    def forget_candidates(self) -> None:
        """Drop the cached candidate counts and lists (they are rebuilt on demand)."""
        with self._cache_lock:
            self._count_cache.clear()
            self._lists.clear()

    def _legs(self, scope: _Scope, mode: str, text: str, qvec: np.ndarray | None, depth: int,
              lap: Callable[[str], None]) -> tuple[dict[str, Ranking], str]:
        if scope.seq is not None:
            replay = self._legs_as_of(scope, mode, text, qvec, depth)
            lap("legs_ms")
            return replay, "exact"
        rankings: dict[str, Ranking] = {}
        plan = "exact"
        if mode != "keyword":
            assert qvec is not None
            rankings["vector"], plan = self._vector_leg(scope, qvec, depth)
            lap("vector_ms")
        if mode != "vector":
            rankings["keyword"] = self._keyword_leg(scope, text, depth)
            lap("keyword_ms")
        return rankings, plan

    # ------------------------------------------------------------------ vector leg

    def _vector_leg(self, scope: _Scope, qvec: np.ndarray, depth: int) -> tuple[Ranking, str]:
        local = self.indexer.local(scope.etype.name)
        if scope.count == 0 or local is None or not len(local):
            return [], "exact"
        query = _unit64(qvec)
        if scope.count <= self.settings.exact_threshold:
            return self._exact(scope, local, query, depth), "exact"
        name = self.indexer.collection(scope.etype.name)
        total = len(local)
        selectivity = min(1.0, scope.count / total)
        n = min(total, max(depth + 1, math.ceil(depth / selectivity * ANN_OVERFETCH)))
        keep: dict[str, float] = {}  # confirmed proposals and their similarity
        decided: set[str] = set()
        # with the candidate list at hand, a proposal is confirmed by membership, not by DuckDB
        member = scope.membership(local) if scope.listed() is not None else None
        while True:
            pending = [hit for hit in own_ids(self.vectors.query(name, qvec, n), scope.tenant)
                       if hit[0] not in decided]
            # confirm proposals best first, a few at a time, until ``depth`` survive and no
            # unchecked proposal can still beat the last of them (a primary-key lookup per ID
            # costs more than the arithmetic, so stop early)
            at = 0
            while at < len(pending):
                if len(keep) >= depth and pending[at][1] < sorted(
                        keep.values(), reverse=True)[depth - 1] - SCORE_EPS:
                    break
                need = max(1, depth - len(keep))
                chunk = pending[at:at + math.ceil(need / selectivity * 1.25) + 2]
                at += len(chunk)
                decided.update(eid for eid, _ in chunk)
                if scope.filtered and member is not None:
                    members = member([eid for eid, _ in chunk])
                    scope.proven.update(members)
                    keep.update(hit for hit in chunk if hit[0] in members)
                elif scope.filtered:
                    passing = scope.fetch_rows([eid for eid, _ in chunk])
                    keep.update(hit for hit in chunk if hit[0] in passing)
                else:
                    keep.update(hit for hit in chunk if local.has(scope.tenant, hit[0]))
            if len(keep) >= depth or n >= total:
                break
            n = min(total, n * WIDEN)
        if len(keep) < min(depth, scope.count):
            # the index could not surface enough candidates (HNSW is approximate, or it is
            # behind DuckDB): score every candidate exactly instead
            return self._exact(scope, local, query, depth), "exact"
        found = local.top(query, depth, lambda: local.rows_of_ids(scope.tenant, keep))
        assert found is not None  # mapping by ID always succeeds
        return ranked(*found, depth), "ann"

    def _exact(self, scope: _Scope, local: LocalVectors, query: npt.NDArray[np.float64],
               depth: int) -> Ranking:
        """The exact top ``depth`` candidates, scored against the mirror."""
        memo = scope.row_memo
        found = None
        if not scope.filtered:
            found = local.top(query, depth, lambda: local.rows_of_tenant(scope.tenant), memo)
        elif scope.by_key:
            found = local.top(query, depth, lambda: local.rows_of_keys(scope.candidate_keys()),
                              memo)
        if found is None:  # listed by ID (or the keys collided)
            found = local.top(query, depth,
                              lambda: local.rows_of_ids(scope.tenant, scope.candidate_ids()),
                              memo)
            assert found is not None  # mapping by ID always succeeds
        ids, scores = found
        if scope.filtered:
            scope.proven.update(ids)
        return ranked(ids, scores, depth)

    # ------------------------------------------------------------------ keyword leg

    def _keyword_leg(self, scope: _Scope, text: str, depth: int) -> Ranking:
        kw = self.indexer.keyword_index(scope.etype.name, scope.tenant)
        if kw is None or scope.count == 0:
            return []
        if not scope.filtered:
            return kw.search(text, depth)
        if scope.count <= self.settings.exact_threshold or scope.listed() is not None:
            found = (kw.search_keys(text, depth, scope.candidate_keys(), scope.row_memo)
                     if scope.by_key else None)
            if found is None:  # listed by ID (or the keys collided)
                found = kw.search(text, depth, candidates=scope.candidate_ids())
            scope.proven.update(eid for eid, _ in found)
            return found
        fetch = max(depth, math.ceil(depth * len(kw) / scope.count * ANN_OVERFETCH))
        while True:
            found = kw.search(text, fetch)
            passing = scope.fetch_rows([eid for eid, _ in found])
            keep = [(eid, s) for eid, s in found if eid in passing]
            if len(keep) >= depth or len(found) < fetch:
                return keep[:depth]
            fetch *= WIDEN

    # ------------------------------------------------------------------ as_of

    def _legs_as_of(self, scope: _Scope, mode: str, text: str, qvec: np.ndarray | None,
                    depth: int) -> dict[str, Ranking]:
        """Both legs over the state at ``scope.seq``, rebuilt from the log and the cache."""
        rankings: dict[str, Ranking] = {}
        etype = scope.etype
        cols = ", ".join(f'"{n}"' for n in etype.fields)
        rows = scope.con.execute(
            f"SELECT id, text_hash, {cols} FROM {scope.source} WHERE {scope.filt} ORDER BY id",
            scope.params).fetchall()
        if mode != "keyword":
            assert qvec is not None
            hashes = {r[1] for r in rows if r[1]}
            vectors = self.indexer.cached_vectors(sorted(hashes))
            missing = {r[1]: self._text(etype, r) for r in rows if r[1] and r[1] not in vectors}
            if missing:
                vectors.update(self.indexer.embed_texts(
                    {h: t for h, t in missing.items() if t is not None}))
            scored = [(r[0], r[1]) for r in rows if r[1] in vectors]
            if scored:
                matrix = normalise_rows(np.stack([vectors[h] for _, h in scored]))
                rankings["vector"] = ranked([e for e, _ in scored],
                                            precise_scores(matrix, _unit64(qvec)), depth)
            else:
                rankings["vector"] = []
        if mode != "vector":
            # BM25 statistics come from all of the tenant's documents at that seq, as the
            # live per-tenant index had them, so a replay scores the same
            params: list[Any] = []
            source = self.store.source_sql(etype, scope.tenant, scope.seq, params)
            every = scope.con.execute(f"SELECT id, text_hash, {cols} FROM {source} ORDER BY id",
                                      params).fetchall()
            kw = KeywordIndex()
            kw.upsert([(r[0], t) for r in every if (t := self._text(etype, r)) is not None])
            rankings["keyword"] = (kw.search(text, depth, candidates=[r[0] for r in rows])
                                   if rows else [])
        return rankings

    @staticmethod
    def _text(etype: EntityType, row: Row) -> str | None:
        return etype.embed_text(dict(zip(etype.fields, row[2:], strict=True)))

    # ------------------------------------------------------------------ resolution

    def _resolve(self, scope: _Scope, fused: Ranking, rankings: dict[str, Ranking], k: int
                 ) -> tuple[list[Hit], int]:
        """Hits for the fused ranking, each re-read from DuckDB; failing ones are dropped."""
        positions = {leg: {eid: (rank, score) for rank, (eid, score) in enumerate(r, 1)}
                     for leg, r in rankings.items()}
        local = self.indexer.local(scope.etype.name) if scope.seq is None else None
        hits: list[Hit] = []
        dropped = 0
        start = 0
        while len(hits) < k and start < len(fused):
            batch = fused[start:start + k - len(hits) + RESOLVE_SLACK]
            start += len(batch)
            found = scope.fetch_rows([eid for eid, _ in batch])
            for eid, score in batch:
                row = found.get(eid)
                if row is None:
                    dropped += 1
                    continue
                if scope.seq is None and (
                        local is None or local.text_hash_of(scope.tenant, eid)
                        != row[_TEXT_HASH]):
                    dropped += 1  # the index has not caught up with this entity: stale
                    continue
                legs = {leg: LegScore(rank=pos[eid][0],
                                      score=round(float(pos[eid][1]), SCORE_DIGITS))
                        for leg, pos in positions.items() if eid in pos}
                hits.append(Hit(entity=self._row_entity(scope.etype, row),
                                score=round(float(score), SCORE_DIGITS), legs=legs))
                if len(hits) == k:
                    break
        return hits, dropped

    def _row_entity(self, etype: EntityType, row: Row) -> Entity:
        return self.store._row_to_entity(etype, row)  # noqa: SLF001 - same package


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any,
              size: int = COUNT_CACHE_SIZE) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def _unit64(vector: np.ndarray) -> npt.NDArray[np.float64]:
    query = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(query))
    return query if norm == 0.0 else query / norm
