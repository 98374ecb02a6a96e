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

Memory. Terms are 64-bit keys (:mod:`.terms`), and postings live in sorted arrays (CSR: the
distinct term keys, where each one's postings start, slots as int32 and frequencies as uint32):
8 bytes per posting and 16 per distinct term. A write goes to a small delta (a dict of packed
ints) that a merge folds into the arrays once it holds more than ``merge_at`` postings or a
sixteenth of the arrays (linear: the arrays are already sorted); a removed document is marked
dead, skipped by searches, and its postings dropped at the merge that follows a quarter of them
dead. 600 texts of 120 KB of random words (1.2 million postings, a million distinct terms): 26 MB
of arrays, against 192 MB as Python dicts and strings before (docs/benchmarks.md, "Memory against
text entropy"). A filter costs O(len(candidates)) dictionary look-ups (~0.5 us each, so a
50k-ID filter is dominated by them).

Scoring is Lucene's BM25 (as in Lucene >= 8 and bm25s ``method="lucene"``)::

    idf(t)     = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d,q) = sum over distinct query terms t of
                 qtf(t) * idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * len(d) / avglen))

where ``qtf`` is the number of times ``t`` occurs in the query (Lucene sums one clause per
occurrence), ``len(d)`` counts a document's terms after stopword removal, and ``N`` counts every
document, including those with no terms. Defaults k1 = 0.9, b = 0.4 (Anserini's BEIR settings).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.mirrors.keys import KeyIndex, key_index, positions_of
from dmf_hybrid._internal.mirrors.terms import (
    MAX_TERM_CHARS,
    DocTerms,
    TfArray,
    bounded_counts_many,
    term_keys,
)
from dmf_hybrid._internal.mirrors.text import (
    Analyzer,
    FieldedDocument,
    KeywordDocument,
)

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
#: Postings the delta may always hold before it is merged (see KeywordIndex).
MERGE_AT = 65_536

_FloatArray = npt.NDArray[np.float64]
_IntArray = npt.NDArray[np.int64]
_KeyArray = npt.NDArray[np.uint64]
_SlotArray = npt.NDArray[np.int32]
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
    the segments its analysis takes. ``merge_at``: the size of the delta (in postings) that is
    always small enough to keep; past it, or past a sixteenth of the merged arrays, the delta
    is merged into them (see the module doc).
    """

    def __init__(
        self,
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        stemmer: str | None = "english",
        stopwords: str | None = "en",
        analyzer: TextAnalysis | None = None,
        merge_at: int = MERGE_AT,
    ) -> None:
        if not (k1 >= 0.0 and math.isfinite(k1)):
            raise ValidationError(f"k1 must be a finite number >= 0, got {k1!r}", field="k1")
        if not 0.0 <= b <= 1.0:
            raise ValidationError(f"b must be between 0 and 1, got {b!r}", field="b")
        if isinstance(merge_at, bool) or not isinstance(merge_at, int) or merge_at < 1:
            raise ValidationError(f"merge_at must be a positive integer, got {merge_at!r}",
                                  field="merge_at")
        self.k1 = float(k1)
        self.b = float(b)
        self.merge_at = merge_at
        self.analyzer: TextAnalysis = (analyzer if analyzer is not None
                                       else Analyzer(stemmer=stemmer, stopwords=stopwords))
        self._lock = threading.Lock()
        # A document lives in a slot (an index into the per-slot arrays); slots are handed out
        # in increasing order and not reused: a merge renumbers the live ones (keeping their
        # order), so the layout depends only on the sequence of writes.
        self._slot_of: dict[str, int] = {}
        self._id_of_slot: list[str | None] = []
        # per slot: the term sets of its field values (see exact)
        self._values_of_slot: list[_Values] = []
        self._doc_len: _FloatArray = np.zeros(64, dtype=np.float64)
        self._live: npt.NDArray[np.bool_] = np.zeros(64, dtype=np.bool_)
        # per slot: its number of postings, and a digest of its (terms, frequencies)
        self._postings_of_slot: _IntArray = np.zeros(64, dtype=np.int64)
        self._digest_of_slot: _KeyArray = np.zeros(64, dtype=np.uint64)
        self._total_len = 0
        # The postings. The merged part is arrays sorted by (term key, slot): the distinct
        # term keys, where each one's postings start, and the postings' slots and term
        # frequencies. Writes since the last merge wait in the delta, term key -> packed
        # postings (one packed int for a term of one document, a list for more).
        self._terms: _KeyArray = np.zeros(0, dtype=np.uint64)
        self._starts: _IntArray = np.zeros(1, dtype=np.int64)
        self._slots: _SlotArray = np.zeros(0, dtype=np.int32)
        self._tfs: TfArray = np.zeros(0, dtype=np.uint32)
        self._delta: dict[int, int | list[int]] = {}
        self._delta_postings = 0
        # postings (in either part) and slots of documents since removed or replaced
        self._dead_postings = 0
        self._dead_slots = 0
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
        checked = [_check_item(item) for item in items]
        value_terms = getattr(self.analyzer, "value_terms", None)
        terms = [self.analyzer.document_terms(text) for _, text in checked]
        # a value with a term the postings leave out (longer than MAX_TERM_CHARS) could
        # never be named by a query that finds its document: not kept
        values: list[_Values] = [() if value_terms is None else tuple(
            v for v in value_terms(text) if all(len(t) <= MAX_TERM_CHARS for t in v))
            for _, text in checked]
        analysed = zip([entity_id for entity_id, _ in checked], bounded_counts_many(terms),
                       map(len, terms), keys if keys is not None else [None] * len(checked),
                       values, strict=True)
        with self._lock:
            for entity_id, counts, length, key, doc_values in analysed:
                slot = self._slot_of.get(entity_id)
                if slot is not None:
                    if (int(self._digest_of_slot[slot]) == counts.digest
                            and self._doc_len[slot] == length
                            and (key or 0) == int(self._key_of_slot[slot])):
                        self._values_of_slot[slot] = doc_values
                        continue  # same terms: nothing to do, keep the caches warm
                    self._remove_slot(slot)
                self._add(entity_id, counts, length, key)
                self._values_of_slot[self._slot_of[entity_id]] = doc_values
            self._merge_if_due()

    def delete(self, ids: Sequence[str]) -> None:
        """Remove these IDs from the index; unknown IDs are ignored."""
        if isinstance(ids, str):
            raise ValidationError("ids must be a sequence of IDs, not one string", field="ids")
        with self._lock:
            for entity_id in ids:
                slot = self._slot_of.get(entity_id)
                if slot is not None:
                    self._remove_slot(slot)
            self._merge_if_due()

    def _add(self, entity_id: str, counts: DocTerms, length: int, key: int | None) -> None:
        slot = len(self._id_of_slot)
        self._id_of_slot.append(entity_id)
        self._values_of_slot.append(())
        if slot >= len(self._doc_len):
            self._resize(np.arange(slot), 2 * len(self._doc_len))
        self._slot_of[entity_id] = slot
        self._live[slot] = True
        self._doc_len[slot] = float(length)
        self._postings_of_slot[slot] = len(counts.keys)
        self._digest_of_slot[slot] = counts.digest
        if not key:
            self._unkeyed += 1
        self._key_of_slot[slot] = key or 0
        self._by_key = None
        self.generation = next(_GENERATIONS)
        self._total_len += length
        delta = self._delta
        for term, tf in zip(counts.keys.tolist(), counts.tfs.tolist(), strict=True):
            posting = delta.get(term)
            packed = slot * _TF_SPAN + tf
            if posting is None:
                delta[term] = packed
            elif isinstance(posting, int):
                delta[term] = [posting, packed]
            else:
                posting.append(packed)
        self._delta_postings += len(counts.keys)

    def _resize(self, kept: _IntArray, size: int) -> None:
        """Per-slot arrays of ``size`` slots holding the ``kept`` slots' values, in order."""
        for name in ("_doc_len", "_live", "_postings_of_slot", "_digest_of_slot",
                     "_key_of_slot"):
            old = getattr(self, name)
            fresh = np.zeros(size, dtype=old.dtype)
            fresh[:len(kept)] = old[kept]
            setattr(self, name, fresh)

    def _remove_slot(self, slot: int) -> None:
        entity_id = self._id_of_slot[slot]
        assert entity_id is not None
        self._total_len -= int(self._doc_len[slot])
        self._doc_len[slot] = 0.0
        self._live[slot] = False
        self._dead_postings += int(self._postings_of_slot[slot])
        self._dead_slots += 1
        if self._key_of_slot[slot] == 0:
            self._unkeyed -= 1  # (a key of 0 counts as none: DuckDB's hash is 0 in 2^-64)
        self._key_of_slot[slot] = 0
        self._by_key = None
        self.generation = next(_GENERATIONS)
        self._id_of_slot[slot] = None
        self._values_of_slot[slot] = ()
        del self._slot_of[entity_id]

    def _merge_if_due(self) -> None:
        merged = len(self._slots)
        if (self._delta_postings > max(self.merge_at, merged // 16)
                or self._dead_postings > max(self.merge_at, (merged + self._delta_postings) // 4)
                or self._dead_slots > max(self.merge_at, len(self._slot_of))):
            self._merge()

    def _merge(self) -> None:
        """Fold the delta into the arrays, drop the postings of removed documents and renumber
        the live slots (in order). Linear but for sorting the delta: the arrays are sorted by
        (term, slot) already, and every slot of the delta is above every merged one."""
        n = self._delta_postings
        terms = np.empty(n, dtype=np.uint64)
        packed = np.empty(n, dtype=np.int64)
        at = 0
        for term, posting in self._delta.items():
            if isinstance(posting, int):
                terms[at] = term
                packed[at] = posting
                at += 1
            else:
                terms[at:at + len(posting)] = term
                packed[at:at + len(posting)] = posting
                at += len(posting)
        order = np.lexsort((packed, terms))  # by term, then slot (the high bits of packed)
        all_terms = np.concatenate(
            [np.repeat(self._terms, np.diff(self._starts)), terms[order]])
        slots = np.concatenate([self._slots, (packed[order] >> 32).astype(np.int32)])
        tfs = np.concatenate([self._tfs, (packed[order] & (_TF_SPAN - 1)).astype(np.uint32)])
        del terms, packed, order
        live = self._live[:len(self._id_of_slot)]
        keep = live[slots]
        if not keep.all():
            all_terms, slots, tfs = all_terms[keep], slots[keep], tfs[keep]
        if self._dead_slots:
            slots = (np.cumsum(live) - 1).astype(np.int32)[slots]
            self._renumber(np.flatnonzero(live))
        by_term = np.argsort(all_terms, kind="stable")  # two sorted runs: a linear merge
        all_terms, self._slots, self._tfs = all_terms[by_term], slots[by_term], tfs[by_term]
        first = np.ones(len(all_terms), dtype=np.bool_)
        first[1:] = all_terms[1:] != all_terms[:-1]
        self._terms = all_terms[first]
        self._starts = np.append(np.flatnonzero(first), len(all_terms)).astype(np.int64)
        self._delta = {}
        self._delta_postings = 0
        self._dead_postings = 0

    def _renumber(self, kept: _IntArray) -> None:
        """Keep only the live slots ``kept``, in order (the caller renumbers their postings)."""
        positions = kept.tolist()
        ids = [self._id_of_slot[s] for s in positions]
        self._values_of_slot = [self._values_of_slot[s] for s in positions]
        self._resize(kept, max(64, 2 * len(kept)))
        self._id_of_slot = ids
        self._slot_of = {str(entity_id): slot for slot, entity_id in enumerate(ids)}
        self._dead_slots = 0
        self._by_key = None
        self.generation = next(_GENERATIONS)

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        """The number of indexed documents."""
        with self._lock:
            return len(self._slot_of)

    def __contains__(self, entity_id: object) -> bool:
        """Whether ``entity_id`` is indexed."""
        with self._lock:
            return entity_id in self._slot_of

    def stats(self) -> dict[str, int]:
        """Its size: live documents, distinct terms and postings merged, postings waiting in
        the delta, postings and slots of removed documents not yet dropped, and the bytes of
        its arrays."""
        with self._lock:
            arrays = (self._terms, self._starts, self._slots, self._tfs, self._doc_len,
                      self._live, self._postings_of_slot, self._digest_of_slot,
                      self._key_of_slot)
            return {"documents": len(self._slot_of), "terms": len(self._terms),
                    "postings": len(self._slots), "delta_postings": self._delta_postings,
                    "dead_postings": self._dead_postings, "dead_slots": self._dead_slots,
                    "array_bytes": sum(a.nbytes for a in arrays)}

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
        query_keys = term_keys(list(query_counts))
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
            at = np.searchsorted(self._terms, query_keys).tolist()
            scores = self._scores(zip(query_keys.tolist(), at, query_counts.values(),
                                      strict=True), n_docs)
            if scores is None:
                return []
            return self._top_k(scores, allowed, k)

    def _scores(self, query: Iterable[tuple[int, int, int]], n_docs: int
                ) -> _FloatArray | None:
        """BM25 of every slot for the query's (term key, its place in the merged keys, count)
        triples (0 where no term matches); None if nothing matches."""
        avg_len = self._total_len / n_docs
        k1, b = self.k1, self.b
        scores: _FloatArray | None = None
        for term, at, qtf in query:
            slots, tfs = self._postings(term, at)
            df = len(slots)
            if not df:
                continue
            if scores is None:
                scores = np.zeros(len(self._id_of_slot), dtype=np.float64)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * self._doc_len[slots] / avg_len)
            # slots in one posting are distinct, so fancy-index += adds once per document
            scores[slots] += (qtf * idf) * (tfs / (tfs + norm))
        return scores

    def _postings(self, term: int, at: int) -> tuple[_IntArray, _FloatArray]:
        """The (slots, term frequencies) of a term's live postings, merged and in the delta
        (``at``: where the term's key is or would be in the merged keys)."""
        slots: _IntArray = _NO_SLOTS
        tfs: _FloatArray = _NO_TFS
        if at < len(self._terms) and int(self._terms[at]) == term:
            start, end = int(self._starts[at]), int(self._starts[at + 1])
            slots = self._slots[start:end].astype(np.int64)
            tfs = self._tfs[start:end].astype(np.float64)
        fresh = self._delta.get(term)
        if fresh is not None:
            packed = np.array([fresh] if isinstance(fresh, int) else fresh, dtype=np.int64)
            slots = np.concatenate([slots, packed >> 32])
            tfs = np.concatenate([tfs, (packed & (_TF_SPAN - 1)).astype(np.float64)])
        if self._dead_slots:
            live = self._live[slots]
            if not live.all():
                slots, tfs = slots[live], tfs[live]
        return slots, tfs

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
_NO_SLOTS: _IntArray = np.zeros(0, dtype=np.int64)
_NO_TFS: _FloatArray = np.zeros(0, dtype=np.float64)

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


def exact_leg(index: KeywordIndex | None, query: str, ranked: Sequence[tuple[str, float]]
              ) -> list[tuple[str, float]]:
    """The *exact* leg of a hybrid search: the keyword leg's hits the query names
    (:meth:`KeywordIndex.exact`), in the keyword leg's order."""
    return [] if index is None or not ranked else index.exact(query, ranked)
