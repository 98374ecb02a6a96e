"""KeywordIndex: scores equal a from-scratch BM25, filters are exact, order is deterministic."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.mirrors import terms
from dmf_hybrid._internal.mirrors.keyword import MERGE_AT, KeywordIndex
from dmf_hybrid._internal.mirrors.terms import MAX_DOC_TERMS, MAX_TERM_CHARS, term_keys
from dmf_hybrid._internal.mirrors.text import Analyzer

ROOT = Path(__file__).resolve().parents[2]

VOCAB = (
    "memory agent running runs runner fact graph vector search index keyword store apple "
    "banana cherry delta echo the and of a is"
).split()


def reference_bm25(
    docs: dict[str, str],
    query: str,
    *,
    k1: float = 0.9,
    b: float = 0.4,
    stemmer: str | None = "english",
) -> list[tuple[str, float]]:
    """Every document with a positive Lucene BM25 score, by (score desc, id asc), from scratch."""
    analyzer = Analyzer(stemmer=stemmer, stopwords="en")
    doc_terms = {doc_id: Counter(analyzer.terms(text)) for doc_id, text in docs.items()}
    lengths = {doc_id: sum(c.values()) for doc_id, c in doc_terms.items()}
    n = len(docs)
    if n == 0:
        return []
    avg = sum(lengths.values()) / n
    query_terms = Counter(analyzer.terms(query))
    hits = []
    for doc_id, counts in doc_terms.items():
        score = 0.0
        for term, qtf in query_terms.items():
            tf = counts.get(term, 0)
            if not tf:
                continue
            df = sum(1 for c in doc_terms.values() if term in c)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            score += qtf * idf * tf / (tf + k1 * (1.0 - b + b * lengths[doc_id] / avg))
        if score > 0:
            hits.append((doc_id, score))
    hits.sort(key=lambda h: (-h[1], h[0]))
    return hits


def random_text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 12)))


QUERIES = [
    "running memory",
    "apple apple banana",
    "the index of a store",
    "runner",
    "vector graph search keyword",
    "zebra",
    "fact delta echo cherry",
]


def assert_same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [d for d, _ in got] == [d for d, _ in want]
    for (_, g), (_, w) in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=1e-12, abs=0.0)


#: Delta sizes for the tests of writes: the default (nothing is merged at these sizes) and
#: small ones (merges, dropped postings and renumbered slots all along).
MERGES = [pytest.param(MERGE_AT, id="no-merge"), pytest.param(1, id="merge-always"),
          pytest.param(7, id="merge-at-7")]


@pytest.mark.parametrize("merge_at", MERGES)
def test_scores_equal_reference_after_random_writes(merge_at: int) -> None:
    rng = random.Random(1234)
    index = KeywordIndex(merge_at=merge_at)
    docs: dict[str, str] = {}
    for step in range(300):
        op = rng.random()
        if op < 0.6 or not docs:
            batch = [
                (f"e{rng.randrange(60):03d}", random_text(rng)) for _ in range(rng.randint(1, 4))
            ]
            index.upsert(batch)
            docs.update(batch)  # last wins, as in the index
        else:
            gone = rng.sample(sorted(docs), min(len(docs), rng.randint(1, 3))) + ["never-seen"]
            index.delete(gone)
            for doc_id in gone:
                docs.pop(doc_id, None)
        assert len(index) == len(docs)
        if step % 10 == 0:
            for query in QUERIES:
                assert_same(index.search(query, 1000), reference_bm25(docs, query))
                assert_same(index.search(query, 3), reference_bm25(docs, query)[:3])
    # the same scores, bit for bit, as an index built from scratch over the final documents
    fresh = KeywordIndex()
    fresh.upsert(sorted(docs.items(), reverse=True))
    for query in QUERIES:
        assert index.search(query, 1000) == fresh.search(query, 1000)


@pytest.mark.parametrize("merge_at", MERGES)
def test_candidates_filter_is_exact(merge_at: int) -> None:
    rng = random.Random(99)
    index = KeywordIndex(merge_at=merge_at)
    docs = {f"d{i:03d}": random_text(rng) for i in range(200)}
    index.upsert(list(docs.items()))
    index.delete(["d000", "d001"])
    del docs["d000"], docs["d001"]
    ids = sorted(docs)
    for trial in range(40):
        size = rng.choice([1, 3, 10, 50, 150])
        candidates = rng.sample(ids, size) + ["d000", "unknown"]  # deleted and unknown IDs
        if trial % 2:
            candidates = candidates + candidates[:2]  # duplicates are harmless
        allowed = set(candidates)
        for query in QUERIES:
            full = index.search(query, 10_000)
            want = [h for h in full if h[0] in allowed][:5]
            got = index.search(query, 5, candidates)
            assert got == want
            assert all(doc_id in allowed for doc_id, _ in got)
    # statistics stay global: a filtered score is the unfiltered score of that document
    only = index.search("running memory", 5, {"d010"})
    assert only == [h for h in index.search("running memory", 10_000) if h[0] == "d010"]
    assert index.search("running memory", 5, []) == []
    assert index.search("running memory", 5, ["nope"]) == []


def test_ties_are_broken_by_id() -> None:
    index = KeywordIndex()
    index.upsert([("c", "apple pie"), ("a", "apple pie"), ("b", "apple pie"), ("z", "pear")])
    hits = index.search("apple", 10)
    assert [d for d, _ in hits] == ["a", "b", "c"]
    assert len({s for _, s in hits}) == 1
    assert [d for d, _ in index.search("apple", 2)] == ["a", "b"]  # cut inside a tie
    assert [d for d, _ in index.search("apple", 2, ["c", "b"])] == ["b", "c"]


@pytest.mark.parametrize("query", ["", "   ", "the and of a", "!!! ??", "x", "zebra"])
def test_query_without_usable_terms_gives_nothing(query: str) -> None:
    index = KeywordIndex()
    index.upsert([("a", "the apple and the tree"), ("b", "banana")])
    assert index.search(query, 10) == []


def test_empty_index_and_only_positive_scores() -> None:
    index = KeywordIndex()
    assert index.search("apple", 10) == []
    index.upsert([("a", "apple"), ("b", "banana"), ("c", "")])
    assert [d for d, _ in index.search("apple", 10)] == ["a"]
    assert all(score > 0 for _, score in index.search("apple banana", 10))
    assert len(index) == 3 and "c" in index


def test_stemming_matches_word_forms() -> None:
    index = KeywordIndex()
    index.upsert([("a", "She runs every morning"), ("b", "Studies of memory"), ("c", "cats")])
    assert [d for d, _ in index.search("running", 10)] == ["a"]
    assert [d for d, _ in index.search("study", 10)] == ["b"]
    plain = KeywordIndex(stemmer=None)
    plain.upsert([("a", "She runs every morning")])
    assert plain.search("running", 10) == []
    assert [d for d, _ in plain.search("runs", 10)] == ["a"]


def test_upsert_replaces_and_delete_forgets() -> None:
    index = KeywordIndex()
    index.upsert([("a", "apple"), ("b", "apple banana")])
    index.upsert([("a", "cherry")])
    assert [d for d, _ in index.search("apple", 10)] == ["b"]
    assert [d for d, _ in index.search("cherry", 10)] == ["a"]
    index.upsert([("a", "cherry")])  # unchanged text: a no-op
    index.delete(["a", "a", "missing"])
    assert index.search("cherry", 10) == [] and len(index) == 1
    index.upsert([("a", "apple"), ("a", "banana")])  # within one batch the last wins
    assert [d for d, _ in index.search("banana", 10)] == ["a", "b"]
    assert_same(
        index.search("apple banana", 10),
        reference_bm25({"a": "banana", "b": "apple banana"}, "apple banana"),
    )


def test_bad_input_is_rejected_and_changes_nothing() -> None:
    index = KeywordIndex()
    index.upsert([("a", "apple")])
    with pytest.raises(ValidationError):
        index.upsert([("b", "banana"), ("", "empty id")])
    with pytest.raises(ValidationError):
        index.upsert([("b", "banana"), ("c", None)])  # type: ignore[list-item]
    assert len(index) == 1 and index.search("banana", 10) == []
    for k in (0, -1, True):
        with pytest.raises(ValidationError):
            index.search("apple", k)
    with pytest.raises(ValidationError):
        index.search("apple", 5, "a")
    with pytest.raises(ValidationError):
        index.delete("a")
    with pytest.raises(ValidationError):
        KeywordIndex(stemmer="klingon")
    with pytest.raises(ValidationError):
        KeywordIndex(stopwords="xx")
    with pytest.raises(ValidationError):
        KeywordIndex(b=1.5)


_SCRIPT = """
import json, random, sys
from dmf_hybrid._internal.mirrors import terms
from dmf_hybrid._internal.mirrors.keyword import MERGE_AT, KeywordIndex
from dmf_hybrid._internal.mirrors.terms import MAX_DOC_TERMS, MAX_TERM_CHARS, term_keys
rng = random.Random(5)
words = "memory agent running runs fact graph vector apple banana cherry the of".split()
index = KeywordIndex()
for i in range(300):
    index.upsert([(f"id{rng.randrange(150)}", " ".join(rng.choices(words, k=rng.randint(1, 9))))])
    if i % 7 == 0:
        index.delete([f"id{rng.randrange(150)}"])
out = {q: index.search(q, 20, None if j % 2 else [f"id{n}" for n in range(0, 150, 3)])
       for j, q in enumerate(["running memory", "apple banana apple", "graph", "cherry fact"])}
json.dump(out, sys.stdout)
"""


def test_deterministic_across_processes() -> None:
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1
    assert any(json.loads(outputs.pop()).values())


@pytest.mark.parametrize("merge_at", MERGES)
def test_concurrent_searches_with_writes(merge_at: int) -> None:
    rng = random.Random(3)
    docs = {f"d{i}": random_text(rng) for i in range(100)}
    index = KeywordIndex(merge_at=merge_at)
    index.upsert(list(docs.items()))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for query in QUERIES:
                    hits = index.search(query, 5, None)
                    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(300):
        doc_id = f"d{rng.randrange(120)}"
        if i % 5 == 0:
            index.delete([doc_id])
            docs.pop(doc_id, None)
        else:
            text = random_text(rng)
            index.upsert([(doc_id, text)])
            docs[doc_id] = text
    stop.set()
    for t in threads:
        t.join(timeout=10)
    assert not errors
    assert len(index) == len(docs)
    for query in QUERIES:
        assert_same(index.search(query, 1000), reference_bm25(docs, query))


def test_bench_ndcg_at_10_matches_hand_computation() -> None:
    from evaluation.bench_keyword import ndcg_at_10

    rels = {"a": 2, "b": 1, "z": 1}
    assert ndcg_at_10(["a", "b", "z"], rels) == pytest.approx(1.0)
    dcg = 1 / math.log2(2) + 2 / math.log2(4)  # b at rank 1, a at rank 3
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_10(["b", "x", "a"], rels) == pytest.approx(dcg / idcg)
    assert ndcg_at_10([], rels) == 0.0
    assert ndcg_at_10(["x"] * 10 + ["a"], rels) == 0.0  # rank 11 is past the cut


@pytest.mark.parametrize("merge_at", MERGES)
def test_candidate_keys_select_exactly_what_candidate_ids_select(merge_at: int) -> None:
    import numpy as np

    rng = random.Random(7)
    index = KeywordIndex(merge_at=merge_at)
    key_of = {f"d{i:03d}": 1000 + 7 * i for i in range(200)}
    docs = {eid: random_text(rng) for eid in key_of}
    items = sorted(docs.items())
    index.upsert(items, [key_of[eid] for eid, _ in items])
    memo: dict[str, object] = {}
    for trial in range(30):
        if trial % 10 == 9:  # writes move documents: a remembered mapping must not be reused
            gone = rng.sample(sorted(docs), 5)
            index.delete(gone)
            for eid in gone:
                docs.pop(eid)
            back = rng.sample(sorted(set(key_of) - set(docs)), 3)
            index.upsert([(eid, random_text(rng)) for eid in back], [key_of[e] for e in back])
            docs.update({eid: "x" for eid in back})
        chosen = rng.sample(sorted(key_of), 60)  # some of them are not indexed (deleted)
        keys = np.array([key_of[eid] for eid in chosen] + [5], dtype=np.uint64)
        query = rng.choice(QUERIES)
        by_ids = index.search(query, 10, candidates=chosen)
        assert index.search_keys(query, 10, keys) == by_ids
        memo.clear()  # a new candidate list: mapped, then remembered
        assert index.search_keys(query, 10, keys, memo) == by_ids
        assert index.search_keys(query, 10, keys, memo) == by_ids
    # a repeated list reuses the slots it mapped to (the keys are not even looked at)
    chosen = sorted(docs)[:20]
    keys = np.array([key_of[e] for e in chosen], dtype=np.uint64)
    memo = {}
    first = index.search_keys("apple", 10, keys, memo)
    assert memo and index.search_keys("apple", 10, keys[:0], memo) == first
    index.upsert([("d-new", "apple")], [99])
    assert index.search_keys("apple", 10, keys[:0], memo) == []  # moved on: mapped afresh


def test_candidate_keys_cannot_say_without_keys_or_with_a_collision() -> None:
    import numpy as np

    index = KeywordIndex()
    index.upsert([("a", "apple pie"), ("b", "apple tart")], [11, 12])
    assert index.search_keys("apple", 5, np.array([12], dtype=np.uint64)) == [
        ("b", index.search("apple", 5, candidates=["b"])[0][1])]
    index.upsert([("c", "apple")])  # no key
    assert index.search_keys("apple", 5, np.array([12], dtype=np.uint64)) is None
    index.delete(["c"])
    assert index.search_keys("apple", 5, np.array([12], dtype=np.uint64)) is not None
    index.upsert([("d", "apple crumble")], [12])  # the same key as "b"
    assert index.search_keys("apple", 5, np.array([12], dtype=np.uint64)) is None
    assert index.collided
    with pytest.raises(ValidationError):
        index.upsert([("e", "x")], [1, 2])


def test_a_documents_index_terms_are_bounded_and_its_length_is_not() -> None:
    """At most MAX_DOC_TERMS distinct terms per document (its most frequent) and none longer
    than MAX_TERM_CHARS are indexed, so memory follows the documents, not their entropy; the
    length BM25 normalises by still counts every term."""
    rare = [f"rare{i:05d}x" for i in range(MAX_DOC_TERMS + 500)]
    frequent = ["zebra"] * 5 + ["quokka"] * 3
    long_ok, too_long = "h" * MAX_TERM_CHARS, "q" * (MAX_TERM_CHARS + 1)
    index = KeywordIndex(stemmer=None, stopwords=None)
    text = " ".join(frequent + rare + [long_ok, long_ok, too_long])
    docs = {"big": text, "small": "zebra quokka rare00000x"}
    index.upsert(list(docs.items()))
    assert index.stats()["delta_postings"] == MAX_DOC_TERMS + 3
    # the length counts every term: the score is BM25's over the whole text
    assert_same(index.search("zebra", 5), reference_bm25(docs, "zebra", stemmer=None))
    assert {d for d, _ in index.search("quokka", 5)} == {"small", "big"}
    assert {d for d, _ in index.search(long_ok, 5)} == {"big"}
    assert {d for d, _ in index.search(rare[0], 5)} == {"small", "big"}  # kept: first seen
    assert [d for d, _ in index.search(rare[-1], 5)] == []  # past the bound: not indexed
    assert index.search(too_long, 5) == []


def test_term_keys_are_the_same_bits_in_python_and_numpy() -> None:
    """A query's few terms are keyed in Python, a document's many with numpy: one function."""
    rng = random.Random(5)
    alphabet = "abcxyz09_éß中文字\U0001f600"
    for size in (1, 3, 23, 24, 25, 200):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
                 for _ in range(size)]
        assert term_keys(words).tolist() == [terms._term_key(t) for t in words]
    assert len(set(term_keys([f"t{i}" for i in range(50_000)]).tolist())) == 50_000


def test_two_terms_with_one_key_make_one_posting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two distinct terms of one document whose keys collide (about n^2/2^65) are one term of
    the summed frequency, never two postings of one slot."""
    import numpy as np

    def colliding(terms: list[str]) -> np.ndarray:
        return np.array([7 if t in ("apple", "pear") else 1000 + i
                         for i, t in enumerate(terms)], dtype=np.uint64)

    monkeypatch.setattr(terms, "term_keys", colliding)
    counts = terms.bounded_counts(["apple", "pie", "pear", "pear"])
    assert counts.keys.tolist() == [7, 1001] and counts.tfs.tolist() == [3, 1]


def test_merges_keep_memory_in_arrays() -> None:
    """Past the delta's bound postings move into arrays; removed documents' postings go at a
    merge, and the stats say so."""
    index = KeywordIndex(stemmer=None, stopwords=None, merge_at=10)
    index.upsert([(f"d{i}", f"common w{i}a w{i}b") for i in range(8)])
    stats = index.stats()
    assert stats["postings"] == 24 and stats["delta_postings"] == 0 and stats["terms"] == 17
    index.delete(["d0"])
    assert index.stats()["dead_postings"] == 3  # within the bound: kept, skipped by searches
    assert "d0" not in {d for d, _ in index.search("common w0a", 10)}
    index.delete([f"d{i}" for i in range(1, 5)])  # 15 dead postings: over it, dropped
    index.upsert([("late", "common late")])
    stats = index.stats()
    assert (stats["documents"], stats["postings"], stats["delta_postings"]) == (4, 9, 2)
    assert (stats["dead_postings"], stats["dead_slots"]) == (0, 0)
    assert {d for d, _ in index.search("common", 10)} == {"d5", "d6", "d7", "late"}
