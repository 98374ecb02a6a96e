"""DMFStore against LangGraph's BaseStore contract (read from langgraph.store.base and its
reference InMemoryStore), through both front doors: every op of batch/abatch, TTL,
namespace errors, audit, LangMem's tools. Vector search and filters: test_langgraph_search."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from dmf_hybrid import FilterError, HashEmbedder, MemoryAPI, ValidationError
from dmf_hybrid._internal.clock import set_clock
from dmf_hybrid.integrations.langgraph import DMFStore
from tests.integrations import door, import_error
from tests.store import dump

INDEX = {"dims": 64, "embed": "hash", "fields": ["text"]}


@pytest.fixture(params=["memory", "http"])
def through(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryAPI]:
    with door(request.param, tmp_path / "mem", HashEmbedder()) as (front, _):
        yield front


@pytest.fixture
def store(through: MemoryAPI) -> DMFStore:
    return DMFStore(through, index=INDEX)  # type: ignore[arg-type]


def test_put_get_update_is_audited(store: DMFStore) -> None:
    ns = ("users", "ana")
    store.put(ns, "pref", {"text": "likes green tea", "n": 1})
    first = store.get(ns, "pref")
    assert first is not None and first.value == {"text": "likes green tea", "n": 1}
    assert (first.namespace, first.key) == (ns, "pref")
    seq = store.memory.last_seq()
    store.put(ns, "pref", {"text": "likes black tea", "n": 2})
    second = store.get(ns, "pref")
    assert second is not None and second.value["n"] == 2
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    eid = store.entity_id(ns, "pref")
    assert eid is not None
    assert [e.op for e in store.memory.history(eid)] == ["create", "update"]
    assert store.memory.get(eid, as_of=seq).data.value == first.value
    before = dump(store.memory)
    store.put(ns, "pref", {"text": "likes black tea", "n": 2})  # same value: no write
    assert dump(store.memory) == before
    assert store.get(ns, "missing") is None and store.get(("users",), "pref") is None


def test_delete_and_put_again(store: DMFStore) -> None:
    ns = ("docs",)
    store.put(ns, "a", {"text": "x"})
    store.delete(ns, "a")
    assert store.get(ns, "a") is None
    assert store.search(ns) == []
    store.batch([PutOp(ns, "a", None)])  # deleting a deleted item changes nothing
    store.put(ns, "a", {"text": "y"})
    item = store.get(ns, "a")
    assert item is not None and item.value == {"text": "y"}
    assert store.memory.verify_audit().ok


def test_search_filters_prefix_and_pages(store: DMFStore) -> None:
    for i in range(6):
        store.put(("org", "team" if i % 2 else "ops", f"u{i}"), f"k{i}",
                  {"text": f"note {i}", "n": i, "meta": {"lang": "zh" if i < 3 else "en"}})
    everything = store.search(("org",), limit=50)
    assert sorted(i.key for i in everything) == [f"k{i}" for i in range(6)]
    assert [i.key for i in everything] == [f"k{i}" for i in range(5, -1, -1)]  # newest first
    assert sorted(i.key for i in store.search(("org", "team"))) == ["k1", "k3", "k5"]
    assert store.search(("org", "tea")) == []  # a prefix is whole labels
    flt = {
        "n": ({"$gt": 3}, ["k4", "k5"]), "n2": ({"$gte": 3}, ["k3", "k4", "k5"]),
        "n3": ({"$lt": 1}, ["k0"]), "n4": ({"$lte": 1}, ["k0", "k1"]),
        "n5": ({"$ne": 2}, ["k0", "k1", "k3", "k4", "k5"]), "n6": (4, ["k4"]),
    }
    for cond, expected in flt.values():
        assert sorted(i.key for i in store.search(("org",), filter={"n": cond})) == expected
    assert sorted(i.key for i in store.search(("org",), filter={"meta": {"lang": "zh"}})) == [
        "k0", "k1", "k2"]
    assert sorted(i.key for i in store.search((), filter={"meta": {"lang": "en"}, "n": 3})) == [
        "k3"]
    assert store.search((), filter={"meta.lang": "en"}) == []  # a key of the value, as written
    pages = [store.search(("org",), limit=2, offset=o) for o in (0, 2, 4, 6)]
    assert [i.key for p in pages for i in p] == [i.key for i in everything]
    assert pages[-1] == []


def test_semantic_search_scores_and_index_options(store: DMFStore) -> None:
    ns = ("kb",)
    store.put(ns, "tea", {"text": "green tea from Hangzhou"})
    store.put(ns, "car", {"text": "a red sports car"})
    store.put(ns, "hidden", {"text": "green tea again"}, index=False)
    store.put(ns, "other", {"text": "unrelated", "title": "green tea"}, index=["title"])
    hits = store.search(ns, query="green tea")
    keys = [h.key for h in hits]
    assert sorted(keys[:3]) == ["car", "other", "tea"] and keys[-1] == "hidden"
    assert sorted(keys[:2]) == ["other", "tea"]
    scores = [h.score for h in hits[:3]]
    assert all(s is not None for s in scores) and scores == sorted(scores, reverse=True)
    assert hits[-1].score is None  # not indexed: it only fills the page, unscored
    assert [h.key for h in store.search(ns, query="green tea", limit=1, offset=1)] == [keys[1]]
    assert store.get(ns, "hidden") is not None
    assert "hidden" in [i.key for i in store.search(ns, filter={"text": "green tea again"})]


def test_list_namespaces(store: DMFStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z", "b", "c"), ("z",)]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "x"),
                                       ("z",), ("z", "b", "c")]
    assert store.list_namespaces(prefix=("a",)) == [("a", "b", "c"), ("a", "b", "d"),
                                                    ("a", "x")]
    assert store.list_namespaces(suffix=("c",)) == [("a", "b", "c"), ("z", "b", "c")]
    assert store.list_namespaces(prefix=("*", "b")) == [("a", "b", "c"), ("a", "b", "d"),
                                                        ("z", "b", "c")]
    assert store.list_namespaces(prefix=("a", "*"), suffix=("d",)) == [("a", "b", "d")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "x")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "x")]


def test_batch_and_abatch_run_every_op(store: DMFStore) -> None:
    store.put(("p", "q"), "k1", {"text": "one"})
    ops = [
        PutOp(("p",), "k2", {"text": "two"}, index=False),
        GetOp(("p", "q"), "k1"),
        GetOp(("p",), "k2"),  # reads see the state before the batch's puts
        SearchOp(("p",), filter={"text": "one"}),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("p",)),)),
        PutOp(("p", "q"), "k1", {"text": "uno"}),
        PutOp(("p", "q"), "k1", {"text": "eins"}),  # the last put of a key wins
    ]
    results = store.batch(ops)
    assert results[0] is None and results[5] is None and results[6] is None
    assert results[1] is not None and results[1].value == {"text": "one"}
    assert results[2] is None
    assert [i.key for i in results[3]] == ["k1"]
    assert results[4] == [("p", "q")]
    eid = store.entity_id(("p", "q"), "k1")
    assert eid is not None and [e.op for e in store.memory.history(eid)] == ["create", "update"]
    again = asyncio.run(store.abatch([GetOp(("p", "q"), "k1"), SearchOp(("p",)),
                                      ListNamespacesOp(), PutOp(("p",), "k2", None)]))
    assert again[0] is not None and again[0].value == {"text": "eins"}
    assert sorted(i.key for i in again[1]) == ["k1", "k2"]
    assert again[2] == [("p",), ("p", "q")]
    assert store.get(("p",), "k2") is None
    assert asyncio.run(store.aget(("p", "q"), "k1")) == again[0]


def test_batch_takes_what_the_reference_store_takes(store: DMFStore) -> None:
    with pytest.raises(InvalidNamespaceError):  # put() keeps the root "langgraph" for itself
        store.put(("langgraph", "x"), "k", {"text": "v"})
    store.batch([PutOp(("langgraph", "x"), "k", {"text": "v"})])  # a PutOp straight to batch
    assert store.get(("langgraph", "x"), "k").value == {"text": "v"}  # type: ignore[union-attr]
    assert [i.key for i in store.search(("langgraph",), query="v")] == ["k"]
    asyncio.run(store.abatch([PutOp(("langgraph", "x"), "k", None)]))
    assert store.get(("langgraph", "x"), "k") is None
    before = dump(store.memory)
    for bad in [PutOp(("ok",), 7, {"v": 1}), PutOp(("ok",), "k", ["not", "a", "mapping"]),
                PutOp(("ok",), "k", {"v": 1}, index="text"),
                PutOp(("ok",), "k", {"v": 1}, ttl=-1), PutOp(("ok",), "k", {"v": float("nan")}),
                PutOp(("ok",), "k", {"v": dt.datetime(2030, 1, 1)}),
                PutOp(("ok",), "k", {"v": {1: "an int key"}})]:
        with pytest.raises(ValidationError):  # checked before any op of the batch runs
            store.batch([PutOp(("ok",), "first", {"v": 0}), bad])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown operation"):
        store.batch([PutOp(("ok",), "first", {"v": 0}), "GET ok/first"])  # type: ignore[list-item]
    assert dump(store.memory) == before


BAD_NAMESPACES: list[tuple] = [(), ("langgraph", "x"), ("a.b",), ("a", ""), ("a", 1)]


def test_bad_namespaces_raise_as_langgraph_does(store: DMFStore) -> None:
    store.put(("ok",), "k", {"text": "v"})
    before = dump(store.memory)
    for namespace in BAD_NAMESPACES:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
        if namespace and namespace[0] != "langgraph":
            with pytest.raises(InvalidNamespaceError):  # checked before any op runs
                store.batch([PutOp(("ok",), "k2", {"v": 1}), GetOp(namespace, "k")])
    assert dump(store.memory) == before


def test_bad_filters_change_nothing(store: DMFStore) -> None:
    store.put(("ok",), "k", {"text": "v", "n": 1})
    before = dump(store.memory)
    for flt in [{"n": {"$regex": "x"}}, {"n": {"$gt": "1"}}, {"n": {"$lte": None}},
                {"m": {"x": {"$in": [1]}}}, ["n", 1]]:
        for query in (None, "v"):
            with pytest.raises(FilterError):
                store.search(("ok",), filter=flt, query=query)  # type: ignore[arg-type]
    assert issubclass(FilterError, ValueError)
    # a key is data, whatever it holds: no match here, and no error
    for flt in [{"n'; DROP TABLE events; --": 1}, {"a..b": 1}, {"n": [1, 2]}]:
        assert store.search(("ok",), filter=flt) == []
    assert dump(store.memory) == before


def test_ttl_expires_refreshes_and_sweeps(through: MemoryAPI) -> None:
    now = [dt.datetime(2030, 1, 1, tzinfo=dt.UTC)]
    set_clock(lambda: now[0])
    try:
        store = DMFStore(through, ttl={"default_ttl": 10, "refresh_on_read": True})
        store.put(("t",), "a", {"v": 1})
        store.put(("t",), "b", {"v": 2})
        store.put(("t",), "forever", {"v": 3}, ttl=None)
        now[0] += dt.timedelta(minutes=8)
        assert store.get(("t",), "a") is not None  # read: a's TTL starts again
        assert store.get(("t",), "b", refresh_ttl=False) is not None
        now[0] += dt.timedelta(minutes=8)
        assert store.get(("t",), "a", refresh_ttl=False) is not None
        assert store.get(("t",), "b") is None  # 16 minutes without a refresh
        assert sorted(i.key for i in store.search(("t",), refresh_ttl=False)) == [
            "a", "forever"]
        now[0] += dt.timedelta(minutes=30)
        assert store.list_namespaces() == [("t",)]
        assert store.sweep_ttl() == 2
        assert [i.key for i in store.search(("t",))] == ["forever"]
    finally:
        set_clock(None)


def test_langmem_tools_manage_and_search(through: MemoryAPI) -> None:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    store = DMFStore(through, index={**INDEX, "fields": ["content"]})  # type: ignore[typeddict-item]

    manage = create_manage_memory_tool(namespace=("memories", "ana"), store=store)
    search = create_search_memory_tool(namespace=("memories", "ana"), store=store)
    made = manage.invoke({"content": "Ana prefers window seats", "action": "create"})
    key = made.split()[-1]
    item = store.get(("memories", "ana"), key)
    assert item is not None and item.value == {"content": "Ana prefers window seats"}
    found = search.invoke({"query": "window seats"})
    assert "Ana prefers window seats" in str(found)
    manage.invoke({"content": "Ana prefers aisle seats", "action": "update", "id": key})
    assert store.get(("memories", "ana"), key).value["content"] == "Ana prefers aisle seats"
    manage.invoke({"action": "delete", "id": key})
    assert store.get(("memories", "ana"), key) is None
    eid = store.memory.query("LangGraphItem", {"key": key}).items
    assert eid == []


def test_model_mismatch_is_refused(through: MemoryAPI) -> None:
    with pytest.raises(ValueError, match="embeds with"):
        DMFStore(through, index={"dims": 8, "embed": lambda texts: [[1.0] * 8 for _ in texts]})


def test_private_memory_embeds_with_the_callers_function() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [[float(t.count("tea")), float(t.count("car")), 1.0] for t in texts]

    store = DMFStore(index={"dims": 3, "embed": embed, "fields": ["text"]})
    try:
        store.put(("k",), "tea", {"text": "tea tea tea"})
        store.put(("k",), "car", {"text": "car car car"})
        assert [h.key for h in store.search(("k",), query="tea")] == ["tea", "car"]
        assert any("tea tea tea" in c for c in calls)
        hits = store.memory.search("LangGraphVector", "car", mode="vector").receipt
        assert hits.model_id.startswith("caller:") and hits.model_id.endswith(":3")
    finally:
        store.close()


def test_import_without_the_extra_says_what_to_install() -> None:
    out = import_error("dmf_hybrid.integrations.langgraph", 'langgraph', 'langgraph.store')
    assert "pip install 'dmf-hybrid[server,langgraph]'" in out


def test_items_written_as_one_vector_keep_it_until_put_again(through: MemoryAPI) -> None:
    from dmf_hybrid.integrations.langgraph import ITEM_TYPEDEF

    # the item type as it was when an item was one vector, its index texts joined
    through.define_type(ITEM_TYPEDEF.model_copy(update={"embed": "{text}"}))
    value = {"text": "likes green tea"}
    through.create("LangGraphItem", {"namespace": "u", "prefixes": ["u"], "key": "tea",
                                     "value": value, "text": "likes green tea"})
    through.create("LangGraphItem", {"namespace": "u", "prefixes": ["u"], "key": "car",
                                     "value": {"text": "a red car"}, "text": "a red car"})
    store = DMFStore(through, index=INDEX)  # type: ignore[arg-type]
    assert through.get_type("LangGraphItem").typedef.embed is None
    hits = store.search(("u",), query="likes green tea")
    assert [h.key for h in hits] == ["tea", "car"] and hits[0].score == pytest.approx(1.0)
    store.put(("u",), "tea", {"text": "likes black tea"})
    rows = through.query("LangGraphVector", {"key": "tea", "text": {"$ne": None}}).items
    assert [(r.data.path, r.data.text) for r in rows] == [("text", "likes black tea")]
    assert DMFStore(through, index=INDEX).search(("u",), query="a red car")[0].key == "car"
