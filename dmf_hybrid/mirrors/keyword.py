"""The keyword leg: an incremental in-memory BM25 index over the entity texts of one collection.

Why this design. ``evaluation/bench_keyword.py`` (on SciFact, docs/retrieval.md) compared it
with DuckDB's ``fts`` extension and ``bm25s`` (k1 0.9, b 0.4, Lucene stopwords, Snowball English
stemmer for all; SciFact train qrels, 809 queries; 2 shared cores, so +-50 % noise)::

    system        docs  nDCG@10  build      query p50    filter 50% p50  one write
    KeywordIndex  5183  0.6945   1.1-1.7 s  0.15-0.3 ms  0.4-1 ms        0.2-0.3 ms
    bm25s         5183  0.6945   1.0-1.2 s  0.5-0.7 ms   0.8-1.3 ms      1-2 s (rebuild)
    duckdb-fts    5183  0.6863   1.9-3.6 s  50-100 ms    50-90 ms        2.7-3.7 s (rebuild)
    KeywordIndex  100k  -        2.9-4 s    0.26-0.5 ms  27-45 ms        0.03 ms
    bm25s         100k  -        3-4.8 s    1.1-1.4 ms   27-34 ms        3.7 s (rebuild)

(100k = synthetic 5-20 word documents; duckdb-fts on duckdb 1.4.4, the only release its
extension wheel exists for; without stemming KeywordIndex gives 0.6633 on SciFact.
All three were exact under a candidate filter: 50/50 queries equal to the unfiltered ranking
restricted to the candidates.) DuckDB's index does not follow writes (``PRAGMA
create_fts_index`` must re-run over the whole table) and each query costs tens of milliseconds;
bm25s precomputes per-posting scores that depend on the corpus-wide average length, so every
insert, update or delete means a full rebuild. An agent memory writes as often as it searches,
so neither fits. This module keeps postings (term -> {slot: term frequency}) and document
lengths itself and computes BM25 at query time with numpy from the *current* statistics: a write
costs a few dictionary operations, scores always equal a from-scratch BM25 of the current
documents (bit for bit), quality equals bm25s (same formula, same analyzer), and a candidate
filter is exact (every matching document is scored, then restricted; nothing is over-fetched).
Costs: about 100 bytes of memory per (document, distinct term) posting (77 MiB for the 830k
postings of the 100k synthetic documents), and about 240 bytes per distinct term of the index
(its string, its entry; the posting of a term of one document is one packed int, not a dict):
high-entropy text, where every word is new, costs ~240 bytes per word up to MAX_DOC_TERMS
distinct terms per document (docs/benchmarks.md, "Memory against text entropy"); a filter
costs O(len(candidates)) dictionary look-ups (~0.5 us each, so a 50k-ID filter is dominated by
them).

Scoring is Lucene's BM25 (as in Lucene >= 8 and bm25s ``method="lucene"``)::

    idf(t)     = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d,q) = sum over distinct query terms t of
                 qtf(t) * idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * len(d) / avglen))

where ``qtf`` is the number of times ``t`` occurs in the query (Lucene sums one clause per
occurrence), ``len(d)`` counts a document's terms after stopword removal, and ``N`` counts every
document, including those with no terms. Defaults k1 = 0.9, b = 0.4 (Anserini's BEIR settings).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from dmf_hybrid.errors import ValidationError
from dmf_hybrid.mirrors.keys import KeyIndex, key_index, positions_of
from dmf_hybrid.mirrors.text import (
    Analyzer,
    FieldedDocument,
    KeywordDocument,
    TypeAnalyzer,
    keyword_document,
)

if TYPE_CHECKING:
    from dmf_hybrid.schema import EntityType

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
#: A document's index terms are bounded, so memory follows the number of documents, not the
#: entropy of their text: at most MAX_DOC_TERMS distinct terms per document (its most frequent,
#: ties in order of first appearance), each at most MAX_TERM_CHARS characters (a SHA-256 in hex
#: fits; a run of letters without a break does not). Every term still counts in the document's
#: length, so BM25's length normalisation sees the whole text. Text of ordinary documents is
#: far below both (SciFact abstracts: at most a few hundred distinct terms).
MAX_DOC_TERMS = 2000
MAX_TERM_CHARS = 64

_FloatArray = npt.NDArray[np.float64]
_IntArray = npt.NDArray[np.int64]
_KeyArray = npt.NDArray[np.uint64]
_DocTerms = tuple[tuple[str, ...], tuple[int, ...]]
_NO_TERMS: _DocTerms = ((), ())
_Values = tuple[frozenset[str], ...]
#: Index generations: unique across indexes, so a rebuilt index never matches an old memo.
_GENERATIONS = itertools.count(1)


class TextAnalysis(Protocol):
    """What turns documents and queries into terms (an Analyzer, or a type's TypeAnalyzer)."""

    def document_terms(self, document: KeywordDocument) -> list[str]:
        """The index terms of a document."""
        ...

    def query_terms(self, text: str) -> list[str]:
        """The terms of a query."""
        ...


class KeywordIndex:
    """BM25 over entity texts of one collection; kept in step with writes; exact under filters.

    ``analyzer`` analyses documents and queries (default: an :class:`Analyzer` with
    ``stemmer`` and ``stopwords``); documents are texts or, for a type with field analyzers,
    the segments its analysis takes.
    """

    def __init__(
        self,
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        stemmer: str | None = "english",
        stopwords: str | None = "en",
        analyzer: TextAnalysis | None = None,
    ) -> None:
        if not (k1 >= 0.0 and math.isfinite(k1)):
            raise ValidationError(f"k1 must be a finite number >= 0, got {k1!r}", field="k1")
        if not 0.0 <= b <= 1.0:
            raise ValidationError(f"b must be between 0 and 1, got {b!r}", field="b")
        self.k1 = float(k1)
        self.b = float(b)
        self.analyzer: TextAnalysis = (analyzer if analyzer is not None
                                       else Analyzer(stemmer=stemmer, stopwords=stopwords))
        self._lock = threading.Lock()
        # A document lives in a slot (an index into the arrays below); freed slots are reused,
        # lowest first, so the layout depends only on the sequence of writes.
        self._slot_of: dict[str, int] = {}
        self._id_of_slot: list[str | None] = []
        # per slot: its distinct terms and their frequencies (two tuples, not one per posting)
        self._terms_of_slot: list[_DocTerms] = []
        # per slot: the term sets of its field values (see exact)
        self._values_of_slot: list[_Values] = []
        self._doc_len: _FloatArray = np.zeros(64, dtype=np.float64)
        self._free_slots: list[int] = []
        self._total_len = 0
        # a term of one document keeps its posting packed in one int (slot << 32 | tf): most
        # terms of high-entropy text occur once, and a dict per term cost ~230 bytes more
        self._postings: dict[str, int | dict[int, int]] = {}
        # numpy copies of postings, made on first use by a query, dropped when the term changes
        self._posting_arrays: dict[str, tuple[_IntArray, _FloatArray]] = {}
        # per slot: the caller's 64-bit key of the document (see upsert), and how many live
        # documents have none; (sorted keys, their slots), built on first use by search_keys
        self._key_of_slot: _KeyArray = np.zeros(64, dtype=np.uint64)
        self._unkeyed = 0
        self._by_key: KeyIndex | None = None
        self.collided = False
        #: changes whenever a document comes, goes or changes slot (see search_keys)
        self.generation = next(_GENERATIONS)

    # ------------------------------------------------------------------ writes

    def upsert(self, items: Sequence[tuple[str, KeywordDocument]],
               keys: Sequence[int] | None = None) -> None:
        """Index each ``(entity_id, text)``, replacing any earlier text of that ID (last wins).

        ``keys``: a 64-bit key per item (the engine passes DuckDB's ``hash(tenant, id)``), by
        which :meth:`search_keys` takes a candidate set without Python strings.
        """
        if keys is not None and len(keys) != len(items):
            raise ValidationError("keys must be as long as items", field="keys")
        analysed: list[tuple[str, _DocTerms, int, int | None, _Values]] = []
        value_terms = getattr(self.analyzer, "value_terms", None)
        for i, item in enumerate(items):
            entity_id, text = _check_item(item)
            terms = self.analyzer.document_terms(text)
            counts = _bounded_counts(terms)
            # a value with a term the postings leave out (longer than MAX_TERM_CHARS) could
            # never be named by a query that finds its document: not kept
            values: _Values = () if value_terms is None else tuple(
                v for v in value_terms(text) if all(len(t) <= MAX_TERM_CHARS for t in v))
            analysed.append((entity_id, counts, len(terms), None if keys is None else keys[i],
                             values))
        with self._lock:
            for entity_id, counts, length, key, values in analysed:
                slot = self._slot_of.get(entity_id)
                if slot is not None:
                    if self._terms_of_slot[slot] == counts and (
                            key or 0) == int(self._key_of_slot[slot]):
                        self._values_of_slot[slot] = values
                        continue  # same terms: nothing to do, keep the caches warm
                    self._remove_slot(slot)
                self._add(entity_id, counts, length, key)
                self._values_of_slot[self._slot_of[entity_id]] = values

    def delete(self, ids: Sequence[str]) -> None:
        """Remove these IDs from the index; unknown IDs are ignored."""
        if isinstance(ids, str):
            raise ValidationError("ids must be a sequence of IDs, not one string", field="ids")
        with self._lock:
            for entity_id in ids:
                slot = self._slot_of.get(entity_id)
                if slot is not None:
                    self._remove_slot(slot)

    def _add(self, entity_id: str, counts: _DocTerms, length: int, key: int | None) -> None:
        if self._free_slots:
            slot = heapq.heappop(self._free_slots)
            self._id_of_slot[slot] = entity_id
            self._terms_of_slot[slot] = counts
        else:
            slot = len(self._id_of_slot)
            self._id_of_slot.append(entity_id)
            self._terms_of_slot.append(counts)
            self._values_of_slot.append(())
            if slot >= len(self._doc_len):
                grown = np.zeros(2 * len(self._doc_len), dtype=np.float64)
                grown[: len(self._doc_len)] = self._doc_len
                self._doc_len = grown
                grown_keys = np.zeros(len(grown), dtype=np.uint64)
                grown_keys[: len(self._key_of_slot)] = self._key_of_slot
                self._key_of_slot = grown_keys
        self._slot_of[entity_id] = slot
        self._doc_len[slot] = float(length)
        if not key:
            self._unkeyed += 1
        self._key_of_slot[slot] = key or 0
        self._by_key = None
        self.generation = next(_GENERATIONS)
        self._total_len += length
        postings = self._postings
        for term, tf in zip(*counts, strict=True):
            posting = postings.get(term)
            if posting is None:
                postings[term] = _pack(slot, tf)
            elif isinstance(posting, int):
                postings[term] = {**_unpacked(posting), slot: tf}
            else:
                posting[slot] = tf
        arrays = self._posting_arrays
        if arrays:
            for term in counts[0]:
                arrays.pop(term, None)

    def _remove_slot(self, slot: int) -> None:
        entity_id = self._id_of_slot[slot]
        assert entity_id is not None
        postings, arrays = self._postings, self._posting_arrays
        for term in self._terms_of_slot[slot][0]:
            posting = postings[term]
            if isinstance(posting, int):
                del postings[term]
            else:
                del posting[slot]
                if len(posting) == 1:
                    postings[term] = _pack(*next(iter(posting.items())))
            arrays.pop(term, None)
        self._total_len -= int(self._doc_len[slot])
        self._doc_len[slot] = 0.0
        if self._key_of_slot[slot] == 0:
            self._unkeyed -= 1  # (a key of 0 counts as none: DuckDB's hash is 0 in 2^-64)
        self._key_of_slot[slot] = 0
        self._by_key = None
        self.generation = next(_GENERATIONS)
        self._id_of_slot[slot] = None
        self._terms_of_slot[slot] = _NO_TERMS
        self._values_of_slot[slot] = ()
        del self._slot_of[entity_id]
        heapq.heappush(self._free_slots, slot)

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        """The number of indexed documents."""
        with self._lock:
            return len(self._slot_of)

    def __contains__(self, entity_id: object) -> bool:
        """Whether ``entity_id`` is indexed."""
        with self._lock:
            return entity_id in self._slot_of

    def search(
        self, query: str, k: int, candidates: Collection[str] | None = None
    ) -> list[tuple[str, float]]:
        """The top ``k`` ``(entity_id, bm25 score)`` with score > 0, by score desc then ID asc.

        ``candidates`` restricts the answer to those IDs, exactly: scores are computed over the
        whole index (so statistics are global) and then restricted, never over-fetched. A query
        with no terms left after analysis (empty, punctuation, stopwords only) gives ``[]``.
        """
        if not isinstance(query, str):
            raise ValidationError("query must be a string", field="query")
        if isinstance(candidates, str):
            raise ValidationError("candidates must be a collection of IDs", field="candidates")
        found = self._search(query, k, None if candidates is None
                             else lambda: self._slots_of_ids(candidates))
        assert found is not None  # IDs always say which documents they are
        return found

    def exact(self, query: str, hits: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
        """The ``hits`` (e.g. this index's own ranking) that the query *names*: one of their
        field values has all of its terms among the query's terms.

        A query that holds a document's name, or one element of its list of dishes, names
        it, however many other words the query has ("我想吃驴杂汤这道菜" names every document
        whose dishes include 驴杂汤). Documents indexed without field values never match.
        """
        if isinstance(query, str):
            wanted = set(self.analyzer.query_terms(query))
        else:
            raise ValidationError("query must be a string", field="query")
        if not wanted:
            return []
        found = []
        with self._lock:
            for entity_id, score in hits:
                slot = self._slot_of.get(entity_id)
                if slot is not None and any(v <= wanted for v in self._values_of_slot[slot]):
                    found.append((entity_id, score))
        return found

    def _slots_of_ids(self, candidates: Collection[str]) -> _IntArray:
        slots = np.fromiter(map(self._slot_of.get, candidates, itertools.repeat(-1)),
                            dtype=np.int64, count=len(candidates))
        return slots[slots >= 0]

    def search_keys(self, query: str, k: int, keys: _KeyArray,
                    memo: dict[str, Any] | None = None) -> list[tuple[str, float]] | None:
        """:meth:`search` restricted to the documents whose key (see :meth:`upsert`) is in
        ``keys``; None when keys cannot say (a document without a key, or two with one key).

        ``memo`` belongs to one cached candidate list: while no document has come, gone or
        moved, the same keys select the same slots, so a repeated filter skips the mapping.
        """
        return self._search(query, k, lambda: self._slots_for_keys(keys, memo))

    def _slots_for_keys(self, keys: _KeyArray, memo: dict[str, Any] | None
                        ) -> _IntArray | None:
        known = memo.get("slots") if memo is not None else None
        if known is not None and known[0] == self.generation:
            return known[1]  # type: ignore[no-any-return]
        if self._unkeyed or self.collided:
            return None
        if self._by_key is None:
            live = np.fromiter(self._slot_of.values(), dtype=np.int64, count=len(self._slot_of))
            self._by_key = key_index(self._key_of_slot[live], live)
            if self._by_key is None:
                self.collided = True  # two documents share a key: the caller uses IDs
                return None
        found: _IntArray = positions_of(self._by_key, keys)
        if memo is not None:
            memo["slots"] = (self.generation, found)
        return found

    def _search(self, query: str, k: int,
                allowed_slots: Callable[[], _IntArray | None] | None
                ) -> list[tuple[str, float]] | None:
        """Top ``k`` over every document, or over ``allowed_slots()`` (None: it cannot say)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValidationError(f"k must be a positive integer, got {k!r}", field="k")
        query_counts = Counter(self.analyzer.query_terms(query))
        if not query_counts:
            return []
        with self._lock:
            n_docs = len(self._slot_of)
            if n_docs == 0:
                return []
            allowed: npt.NDArray[np.bool_] | None = None
            if allowed_slots is not None:
                slots = allowed_slots()
                if slots is None:
                    return None
                if not len(slots):
                    return []
                allowed = np.zeros(len(self._id_of_slot), dtype=np.bool_)
                allowed[slots] = True
            scores = self._scores(query_counts, n_docs)
            if scores is None:
                return []
            return self._top_k(scores, allowed, k)

    def _scores(self, query_counts: Counter[str], n_docs: int) -> _FloatArray | None:
        """BM25 of every slot for the query (0 where no term matches); None if nothing matches."""
        avg_len = self._total_len / n_docs
        k1, b = self.k1, self.b
        scores: _FloatArray | None = None
        for term, qtf in query_counts.items():
            posting = self._postings.get(term)
            if not posting:
                continue
            if scores is None:
                scores = np.zeros(len(self._id_of_slot), dtype=np.float64)
            slots, tfs = self._arrays_for(term, posting)
            df = len(slots)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * self._doc_len[slots] / avg_len)
            # slots in one posting are distinct, so fancy-index += adds once per document
            scores[slots] += (qtf * idf) * (tfs / (tfs + norm))
        return scores

    def _arrays_for(self, term: str, posting: int | dict[int, int]
                    ) -> tuple[_IntArray, _FloatArray]:
        if isinstance(posting, int):
            slot, tf = divmod(posting, _TF_SPAN)
            return np.array([slot], dtype=np.int64), np.array([tf], dtype=np.float64)
        cached = self._posting_arrays.get(term)
        if cached is None:
            n = len(posting)
            cached = (
                np.fromiter(posting.keys(), dtype=np.int64, count=n),
                np.fromiter(posting.values(), dtype=np.float64, count=n),
            )
            self._posting_arrays[term] = cached
        return cached

    def _top_k(
        self, scores: _FloatArray, allowed: npt.NDArray[np.bool_] | None, k: int
    ) -> list[tuple[str, float]]:
        selected = scores > 0.0
        if allowed is not None:
            selected &= allowed
        slots = np.flatnonzero(selected)
        values = scores[slots]
        if len(slots) > k:
            # keep everything tied with the k-th score, so the ID tie-break below is exact
            kth = np.partition(values, len(values) - k)[len(values) - k]
            keep = values >= kth
            slots, values = slots[keep], values[keep]
        id_of_slot = self._id_of_slot
        hits = [
            (str(id_of_slot[s]), float(v))
            for s, v in zip(slots.tolist(), values.tolist(), strict=True)
        ]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits[:k]


#: A packed posting is ``slot * _TF_SPAN + tf`` (a term frequency is below 2^32).
_TF_SPAN = 1 << 32


def _pack(slot: int, tf: int) -> int:
    return slot * _TF_SPAN + tf


def _unpacked(posting: int) -> dict[int, int]:
    slot, tf = divmod(posting, _TF_SPAN)
    return {slot: tf}


def _bounded_counts(terms: Sequence[str]) -> _DocTerms:
    """A document's (distinct terms, their frequencies) as indexed: terms of at most
    MAX_TERM_CHARS characters, the MAX_DOC_TERMS most frequent of them."""
    counter = Counter(t for t in terms if len(t) <= MAX_TERM_CHARS)
    if len(counter) > MAX_DOC_TERMS:
        counter = Counter(dict(counter.most_common(MAX_DOC_TERMS)))
    return tuple(counter), tuple(counter.values())


def _check_item(item: tuple[str, KeywordDocument]) -> tuple[str, KeywordDocument]:
    try:
        entity_id, text = item
    except (TypeError, ValueError):
        raise ValidationError(
            "each item must be an (entity_id, text) pair", field="items"
        ) from None
    if not isinstance(entity_id, str) or not entity_id:
        raise ValidationError(
            f"entity_id must be a non-empty string, got {entity_id!r}", field="entity_id"
        )
    if not isinstance(text, str | tuple | FieldedDocument):
        raise ValidationError(f"text of {entity_id!r} must be a string", field="text")
    return entity_id, text


def type_analysis(etype: EntityType) -> TypeAnalyzer:
    """The keyword analysis a type's definition declares (its analyzer, its fields')."""
    return TypeAnalyzer.of(etype.typedef)


def entity_document(analysis: TypeAnalyzer, etype: EntityType, data: Mapping[str, Any],
                    text: str, parts: list[tuple[str | None, str]] | None = None
                    ) -> KeywordDocument:
    """What the keyword index of a type analyses of one entity (``text``: its embed text;
    ``parts``: its rendered template, if already made): the text (or its segments) and the
    values of its embedded text fields."""
    if parts is None:
        parts = etype.embed_parts(data) or []
    body = text if not analysis.mixed else keyword_document(analysis, parts)
    values: list[tuple[str, str]] = []
    for name, _ in parts:
        spec = etype.fields.get(name) if name is not None else None
        if name is None or spec is None or not (spec.type in ("str", "enum") or spec.item == "str"):
            continue
        analyzer = analysis.fields.get(name, analysis.analyzer)
        value = data.get(name)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                values.append((analyzer, str(getattr(item, "value", item))))
    return FieldedDocument(body, tuple(values)) if values else body


def entity_documents(etype: EntityType, rows: Sequence[tuple[str, Mapping[str, Any]]]
                     ) -> list[tuple[str, KeywordDocument]]:
    """``(entity_id, keyword document)`` of the ``(entity_id, data)`` rows that are embedded."""
    analysis = type_analysis(etype)
    docs: list[tuple[str, KeywordDocument]] = []
    for entity_id, data in rows:
        text = etype.embed_text(data)
        if text is not None:
            docs.append((entity_id, entity_document(analysis, etype, data, text)))
    return docs


def exact_leg(index: KeywordIndex | None, query: str, ranked: Sequence[tuple[str, float]]
              ) -> list[tuple[str, float]]:
    """The *exact* leg of a hybrid search: the keyword leg's hits the query names
    (:meth:`KeywordIndex.exact`), in the keyword leg's order."""
    return [] if index is None or not ranked else index.exact(query, ranked)
