"""DMFStore's vector search and filters against the reference contract (langgraph.store.base,
langgraph.store.memory.InMemoryStore), through both front doors: what an index embeds (the
whole value by default, each text of a path on its own), similarity from the caller's own
embeddings, ranking, offset / limit, filters with a query, non-ASCII text, reindexing; and a
property: the filter terms pushed to the store never drop an item the rules accept."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from dmf_hybrid import MemoryAPI
from dmf_hybrid.integrations.embedder import CallerEmbedder
from dmf_hybrid.integrations.langgraph import DMFStore
from dmf_hybrid.integrations.langgraph_values import matches, pushdown
from tests.integrations import door

DIMS = 64


def char_embed(texts: Sequence[str]) -> list[list[float]]:
    """Characters and character pairs counted in hashed buckets: texts that share them are
    similar."""
    rows = []
    for text in texts:
        row = [0.0] * DIMS
        for i, ch in enumerate(text):
            row[(ord(ch) * 2654435761) % DIMS] += 1.0
            if i:
                row[((ord(text[i - 1]) * 31 + ord(ch)) * 2654435761) % DIMS] += 0.5
        rows.append(row)
    return rows


def cosine(a: str, b: str) -> float:
    x, y = (np.asarray(v, dtype=np.float64) for v in char_embed([a, b]))
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    return 0.0 if norm == 0 else float(x @ y) / norm


INDEX: dict[str, Any] = {"dims": DIMS, "embed": char_embed}


@pytest.fixture(params=["memory", "http"])
def front(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryAPI]:
    with door(request.param, tmp_path / "mem", CallerEmbedder(char_embed, dim=DIMS)) as (
            mem, _):
        yield mem


def store_of(front: MemoryAPI, **index: Any) -> DMFStore:
    return DMFStore(front, index={**INDEX, **index})  # type: ignore[typeddict-item]


def whole(value: dict[str, Any]) -> str:
    """The text of the index path "$": the value as LangGraph serialises it."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def test_the_default_index_embeds_the_whole_value(front: MemoryAPI) -> None:
    store = store_of(front)  # no "fields": LangGraph's default ["$"]
    values = {"tea": {"text": "green tea", "n": 1}, "car": {"text": "a red car", "n": 2},
              "zh": {"text": "这是中文", "n": 3}}
    for key, value in values.items():
        store.put(("kb",), key, value)
    for query in ["green tea", "这是中文", "car"]:
        hits = store.search(("kb",), query=query)
        expected = sorted(values, key=lambda k: -cosine(query, whole(values[k])))
        assert [h.key for h in hits] == expected
        for hit in hits:  # the similarity is the caller's embeddings' cosine
            assert hit.score == pytest.approx(cosine(query, whole(values[hit.key])), abs=1e-5)
    assert store.memory.get(store.entity_id(("kb",), "zh") or "").data.text == whole(
        values["zh"])


def test_each_text_of_a_path_is_a_vector_of_its_own(front: MemoryAPI) -> None:
    store = store_of(front, fields=["title", "tags[*]", "meta.lang"])
    store.put(("d",), "a", {"title": "rivers of Guilin", "tags": ["karst", "bamboo raft"],
                            "meta": {"lang": "en"}})
    store.put(("d",), "b", {"title": "bamboo", "tags": []})
    store.put(("d",), "c", {"body": "nothing to index"})
    hits = store.search(("d",), query="bamboo raft")
    assert [h.key for h in hits] == ["a", "b", "c"]
    assert hits[0].score == pytest.approx(1.0)  # the tag alone, not the texts joined
    assert hits[1].score == pytest.approx(cosine("bamboo raft", "bamboo"), abs=1e-5)
    assert hits[2].score is None  # no text: it only fills the page, unscored
    rows = store.memory.query("LangGraphVector", {"text": {"$ne": None}}).items
    assert sorted((r.data.key, r.data.path, r.data.text) for r in rows) == [
        ("a", "meta.lang", "en"), ("a", "tags[*].0", "karst"),
        ("a", "tags[*].1", "bamboo raft"), ("a", "title", "rivers of Guilin"),
        ("b", "title", "bamboo")]


def test_per_put_index_paths_and_no_index(front: MemoryAPI) -> None:
    store = store_of(front, fields=["key17"])  # a path no value has
    store.put(("t",), "x", {"k0": "aaa", "k1": "bbb"}, index=["k0", "k1"])
    store.put(("t",), "y", {"k0": "eee", "k1": "bbb"}, index=["k1"])
    store.put(("t",), "z", {"k0": "aaa"}, index=False)
    store.put(("t",), "w", {"k0": "aaa", "k1": "bbb"})  # the store's fields: nothing
    hits = store.search(("t",), query="aaa")
    assert [h.key for h in hits[:2]] == ["x", "y"]
    assert hits[0].score == pytest.approx(1.0) and hits[1].score < 1.0  # type: ignore[operator]
    assert {h.key for h in hits[2:]} == {"z", "w"} and {h.score for h in hits[2:]} == {None}
    bbb = store.search(("t",), query="bbb", limit=2)
    assert {h.key for h in bbb} == {"x", "y"} and bbb[0].score == bbb[1].score


def test_ranking_pages_with_offset_and_limit(front: MemoryAPI) -> None:
    store = store_of(front, fields=["tags[*]"])
    words = ["amber", "birch", "cedar", "daisy", "ember", "fjord", "grove", "heath", "inlet",
             "juniper", "kelp", "larch"]
    for i, word in enumerate(words):  # many texts per item: ranking reads several rounds
        store.put(("w",), word, {"tags": [f"{word}{j}" for j in range(i % 4 * 5 + 1)]})
    store.put(("w",), "plain", {"note": "no tags"})
    query = "birch juniper"
    best = {w: max(cosine(query, f"{w}{j}") for j in range(i % 4 * 5 + 1))
            for i, w in enumerate(words)}
    expected = sorted(words, key=lambda w: -best[w])
    assert len(set(best.values())) == len(words)  # no tie: one order is right
    ranked = store.search(("w",), query=query, limit=len(words))
    assert [h.key for h in ranked] == expected
    assert [h.score for h in ranked] == pytest.approx([best[w] for w in expected], abs=1e-5)
    pages = [store.search(("w",), query=query, limit=5, offset=o) for o in (0, 5)]
    assert [h.key for p in pages for h in p] == expected[:10]
    last = store.search(("w",), query=query, limit=5, offset=10)
    assert [h.key for h in last] == [*expected[10:], "plain"]  # then the unindexed item
    assert last[-1].score is None


def test_filters_combine_with_a_query(front: MemoryAPI) -> None:
    store = store_of(front, fields=["text"])
    docs = {"d1": {"text": "red apple", "color": "red", "score": 4.5},
            "d2": {"text": "red car", "color": "red", "score": 3.0},
            "d3": {"text": "green apple", "color": "green", "score": 4.0},
            "d4": {"text": "blue car", "color": "blue", "score": 3.5, "meta": {"x": [1, 2]}}}
    for key, value in docs.items():
        store.put(("f",), key, value)

    def keys(query: str | None, flt: dict[str, Any], **kw: Any) -> list[str]:
        return [h.key for h in store.search(("f",), query=query, filter=flt, **kw)]

    def ranked(query: str, *which: str) -> list[str]:
        return sorted(which, key=lambda k: -cosine(query, docs[k]["text"]))

    assert keys("apple", {"color": "red"}) == ranked("apple", "d1", "d2") == ["d1", "d2"]
    assert keys("car", {"color": "red"}) == ranked("car", "d1", "d2") == ["d2", "d1"]
    assert keys("blue car", {"score": {"$gt": 3.2}}) == ranked("blue car", "d1", "d3", "d4")
    assert keys("apple", {"score": {"$gte": 4.0}, "color": "green"}) == ["d3"]
    assert keys("car", {"score": {"$gt": 3.0, "$lt": 4.0}}) == ["d4"]
    assert keys("car", {"color": {"$ne": "red"}}) == ranked("car", "d3", "d4")
    assert keys("car", {"meta": {"x": [1, 2]}}) == ["d4"]  # a list compares element-wise
    assert keys("car", {"meta": {"x": [1]}}) == []
    assert keys("car", {"nothing": {"$ne": 1}}, limit=2) == ranked(  # missing: not 1
        "car", *docs)[:2]
    assert keys("car", {"nothing": {"$gt": 1}}) == []
    assert keys("apple", {"color": "red"}, limit=1, offset=1) == ["d2"]
    assert sorted(keys(None, {"color": "red"})) == ["d1", "d2"]


def test_filters_follow_the_reference_stores(front: MemoryAPI) -> None:
    store = store_of(front, fields=["t"])
    store.put(("v",), "dotted", {"t": "one", "a.b": 1, "a": {"b": 2}})
    store.put(("v",), "spaced", {"t": "two", "my key": "x y", "flag": True, "n": 1})
    store.put(("v",), "number", {"t": "three", "flag": 1, "n": 1.0, "中文": "是"})
    for query in (None, "one two three"):
        def keys(flt: dict[str, Any], q: str | None = query) -> list[str]:
            return sorted(h.key for h in store.search(("v",), query=q, filter=flt))

        assert keys({"a.b": 1}) == ["dotted"]  # a key of the value, as it is written
        assert keys({"a": {"b": 2}}) == ["dotted"]
        assert keys({"my key": "x y"}) == ["spaced"]  # any key, decided in Python
        assert keys({"flag": True}) == ["spaced"]  # a boolean is not a number
        assert keys({"flag": 1}) == ["number"]
        assert keys({"n": 1}) == ["number", "spaced"]  # 1 and 1.0 are one number
        assert keys({"中文": "是"}) == ["number"]
        assert keys({"n": {"$eq": 1}, "t": {"$ne": "two"}}) == ["number"]


def test_a_put_reindexes_and_a_delete_retires_the_vectors(front: MemoryAPI) -> None:
    store = store_of(front, fields=["tags[*]"])
    store.put(("r",), "k", {"tags": ["alpha", "beta"]})
    store.put(("r",), "other", {"tags": ["gamma"]})
    assert store.search(("r",), query="beta")[0].score == pytest.approx(1.0)
    store.put(("r",), "k", {"tags": ["gamma ray"]})
    top = store.search(("r",), query="beta")
    assert all(h.score < 0.99 for h in top)  # type: ignore[operator]
    assert store.search(("r",), query="gamma ray")[0].key == "k"

    def live_rows() -> list[tuple[str, str]]:
        rows = store.memory.query("LangGraphVector", {"key": "k", "text": {"$ne": None}}).items
        return sorted((r.data.path, r.data.text) for r in rows)

    assert live_rows() == [("tags[*]", "gamma ray")]
    store.delete(("r",), "k")
    assert live_rows() == []
    assert [h.key for h in store.search(("r",), query="gamma ray")] == ["other"]
    store.put(("r",), "k", {"tags": ["alpha", "beta"]})  # the same paths come back
    assert store.search(("r",), query="beta")[0].key == "k"
    assert live_rows() == [("tags[*].0", "alpha"), ("tags[*].1", "beta")]
    assert store.memory.verify_audit().ok


def test_non_ascii_text_ranks_the_closest_first(front: MemoryAPI) -> None:
    store = store_of(front)
    texts = {"1": "这是中文", "2": "これは日本語です", "3": "이건 한국어야", "4": "Это русский",
             "5": "यह रूसी है", "6": "我的蓝色衬衫发货了吗"}
    for key, text in texts.items():
        store.put(("user_123", "memories"), key, {"text": text})
    for key, text in texts.items():
        hits = store.search(("user_123", "memories"), query=text)
        assert hits[0].key == key and hits[0].score == pytest.approx(
            cosine(text, whole({"text": text})), abs=1e-5)


class QueryPrefixed(Embeddings):
    """Documents and queries embedded differently, as some models do."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return char_embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return char_embed(["query: " + text])[0]


def test_queries_are_embedded_with_embed_query(tmp_path: Path) -> None:
    model = QueryPrefixed()
    with door("http", tmp_path / "m", CallerEmbedder(model, dim=DIMS)) as (front, _):
        store = DMFStore(front, index={"dims": DIMS, "embed": model, "fields": ["t"]})
        store.put(("q",), "k", {"t": "tea"})
        hit = store.search(("q",), query="tea")[0]
        assert hit.score == pytest.approx(cosine("query: tea", "tea"), abs=1e-5)


def test_an_async_embedding_function() -> None:
    async def embed(texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return char_embed(texts)

    async def run(store: DMFStore) -> list[Any]:
        await store.aput(("a",), "x", {"t": "kelp forest"})
        await store.aput(("a",), "y", {"t": "desert"})
        return await store.asearch(("a",), query="kelp")

    store = DMFStore(index={"dims": DIMS, "embed": embed, "fields": ["t"]})
    try:
        assert [h.key for h in asyncio.run(run(store))] == ["x", "y"]
        assert store.search(("a",), query="desert")[0].key == "y"  # and without a loop
    finally:
        store.close()


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, 1.0]),
                    st.sampled_from(["x", "y", "是"]))
NAMES = ["a", "b", "a.b", "my key", "中文"]
KEYS = st.sampled_from(NAMES)
CONDITIONS = st.one_of(
    SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(st.just("b"), SCALARS, min_size=1),
    st.dictionaries(st.sampled_from(["$eq", "$ne"]), SCALARS, min_size=1),
    st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
                    st.integers(-3, 3) | st.just(0.5), min_size=1))
FILTERS = st.dictionaries(KEYS, CONDITIONS, min_size=1, max_size=2)


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DMFStore, dict]]:
    """A store of 24 random values (drawn once, with a fixed seed), for the filter property."""
    rng = random.Random(7)
    universe = [None, True, False, 0, 1, -2, 0.5, 1.0, "x", "y", "是", [1, "x"], [None],
                {"b": 1}, {"b": "x"}, {"b": None}]
    values: dict[str, Any] = {}
    for i in range(24):
        names = rng.sample(NAMES, rng.randint(0, 3))
        values[f"v{i}"] = {k: rng.choice(universe) for k in names}
    with door("memory", tmp_path_factory.mktemp("pop") / "m",
              CallerEmbedder(char_embed, dim=DIMS)) as (mem, _):
        store = store_of(mem)
        for key, value in values.items():
            store.put(("p",), key, value)
        yield store, values


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=FILTERS)
def test_a_filter_selects_what_the_rules_accept(population: tuple[DMFStore, dict],
                                                flt: dict[str, Any]) -> None:
    store, values = population
    accepted = sorted(k for k, v in values.items() if matches(v, flt))
    narrowed = store.memory.query("LangGraphItem", {"$and": [{"namespace": "p"},
                                                            *pushdown(flt, "value")]},
                                  limit=100).items
    assert set(accepted) <= {e.data.key for e in narrowed}  # never narrower than the rules
    assert sorted(i.key for i in store.search(("p",), filter=flt, limit=100)) == accepted
    ranked = store.search(("p",), query="x 是", filter=flt, limit=100)
    assert sorted(i.key for i in ranked) == accepted
