"""The filter language: every operator, SQL equals a pure-Python evaluation, names are not SQL."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from dmf_hybrid import FilterError, Memory
from tests.conftest import tenant_like
from tests.store import assert_unchanged, evaluate, open_memory

UTC = dt.UTC


class Item(BaseModel):
    """One row of every column kind."""

    key: str
    s: str | None = None
    n: int | None = None
    x: float | None = None
    b: bool | None = None
    d: dt.date | None = None
    ts: dt.datetime | None = None
    e: Literal["red", "green", "blue"] | None = None
    tags: list[str] = Field(default_factory=list)
    nums: list[int] | None = None


ROWS: dict[str, dict[str, Any]] = {
    "a": {"s": "Paris", "n": 1, "x": 1.5, "b": True, "d": dt.date(2025, 1, 1),
          "ts": dt.datetime(2025, 1, 1, 12, tzinfo=UTC), "e": "red", "tags": ["art", "food"],
          "nums": [1, 2]},
    "b": {"s": "paris 100%", "n": 2, "x": -3.0, "b": False, "d": dt.date(2025, 2, 1),
          "ts": dt.datetime(2025, 2, 1, tzinfo=UTC), "e": "green", "tags": ["food"], "nums": []},
    "c": {"s": "O'Hare \"x\"", "n": 3, "x": 0.0, "b": None, "d": None, "ts": None,
          "e": "blue", "tags": []},
    "d": {"s": None, "n": None, "x": None, "b": None, "d": None, "ts": None, "e": None,
          "tags": ["art"], "nums": None},
    "e": {"s": "Rome", "n": 2, "x": 1e300, "b": True, "d": dt.date(2024, 12, 31),
          "ts": dt.datetime(2024, 12, 31, 23, 59, tzinfo=UTC), "e": "red",
          "tags": ["a_b", "%"], "nums": [2]},
}


@pytest.fixture(scope="module")
def items_mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """A memory holding the ROWS as Items, shared by the read-only tests of this module."""
    mem = open_memory(Path(tmp_path_factory.mktemp("items")) / "mem")
    mem.define(Item, identity=["key"])
    mem.create_many("Item", [{"key": k, **v} for k, v in ROWS.items()])
    yield mem
    mem.close()


@pytest.fixture
def items(items_mem: Memory) -> dict[str, str]:
    """Row name to entity ID of the ROWS."""
    return {k: items_mem.query("Item", {"key": k}).items[0].id for k in ROWS}


def _run(mem: Memory, ids: dict[str, str], where: dict[str, Any]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    page = mem.query("Item", where, limit=100)
    names = sorted(by_id[e.id] for e in page.items)
    assert [e.id for e in page.items] == sorted(e.id for e in page.items)  # ID order
    assert mem.count("Item", where) == len(names)
    # time travel compiles the same filter against rows rebuilt from the log
    assert [by_id[e.id] for e in mem.query("Item", where, limit=100, as_of=mem.last_seq()).items
            ] == [by_id[e.id] for e in page.items]
    full = {k: Item(key=k, **v).model_dump() for k, v in ROWS.items()}
    assert names == sorted(k for k, row in full.items() if evaluate(where, row))
    return names


@pytest.mark.parametrize(("where", "expected"), [
    ({"s": "Paris"}, "a"),
    ({"s": {"$eq": "paris"}}, ""),
    ({"s": None}, "d"),
    ({"s": {"$eq": None}}, "d"),
    ({"s": {"$ne": None}}, "abce"),
    ({"s": {"$ne": "Paris"}}, "bcde"),  # null != x is true (IS DISTINCT FROM)
    ({"n": {"$gt": 1}}, "bce"),  # comparisons with null are false
    ({"n": {"$gte": 2}}, "bce"),
    ({"n": {"$lt": 2}}, "a"),
    ({"n": {"$lte": 2}}, "abe"),
    ({"n": {"$gt": 1, "$lt": 3}}, "be"),
    ({"x": {"$gt": 1}}, "ae"),
    ({"x": {"$lte": 0}}, "bc"),
    ({"x": {"$gte": 1e300}}, "e"),
    ({"n": {"$in": [1, 3]}}, "ac"),
    ({"n": {"$in": []}}, ""),
    ({"n": {"$nin": [1, 3]}}, "bde"),  # $nin matches null
    ({"n": {"$nin": []}}, "abcde"),
    ({"e": {"$in": ["red"]}}, "ae"),
    ({"e": {"$nin": ["red", "green"]}}, "cd"),
    ({"e": {"$gt": "green"}}, "ae"),  # enums compare as text
    ({"b": True}, "ae"),
    ({"b": False}, "b"),
    ({"b": {"$ne": True}}, "bcd"),
    ({"d": {"$gte": "2025-01-01"}}, "ab"),
    ({"d": {"$lt": dt.date(2025, 1, 1)}}, "e"),
    ({"ts": {"$gt": dt.datetime(2025, 1, 1, tzinfo=UTC)}}, "ab"),
    ({"ts": {"$lte": "2025-01-01T00:59:00+01:00"}}, "e"),  # compared as UTC instants
    ({"tags": {"$contains": "food"}}, "ab"),
    ({"tags": {"$contains": "%"}}, "e"),  # literal, not a LIKE pattern
    ({"tags": {"$contains": "a_"}}, ""),
    ({"tags": []}, "c"),
    ({"tags": {"$ne": []}}, "abde"),
    ({"nums": {"$contains": 2}}, "ae"),
    ({"nums": None}, "cd"),
    ({"s": {"$contains": "aris"}}, "ab"),
    ({"s": {"$contains": "%"}}, "b"),
    ({"s": {"$contains": "'"}}, "c"),
    ({"s": {"$contains": "\""}}, "c"),
    ({"s": {"$contains": "_"}}, ""),
    ({"$and": [{"n": 2}, {"e": "red"}]}, "e"),
    ({"$or": [{"n": 1}, {"s": None}]}, "ad"),
    ({"$or": [{"$and": [{"n": 2}, {"b": False}]}, {"tags": {"$contains": "art"}}]}, "abd"),
    ({"n": 2, "b": True}, "e"),
    ({"$and": [{"$or": [{"n": {"$nin": [2]}}]}, {"x": {"$ne": 0}}]}, "ad"),
])
def test_every_operator(items_mem: Memory, items: dict[str, str], where: dict[str, Any],
                        expected: str) -> None:
    assert _run(items_mem, items, where) == sorted(expected)


@pytest.mark.parametrize("where", [
    {"x; DROP TABLE events; --": 1},
    {'s" = s OR 1=1 --': 1},
    {"s'": "x"},
    {"S": "Paris"},
    {"n ": 1},
    {"id": "x"},  # system columns are not fields
    {"tenant": "default"},
    {"$and": [{"s": "Paris"}, {"\"; DELETE FROM ent_Item; --": 1}]},
    {"$or": []},
    {"$not": {"s": "Paris"}},
    {"s": {"$regex": ".*"}},
    {"s": {"$eq": "Paris", "$like": "%"}},
    {"s": {}},
    {"n": {"$gt": None}},
    {"n": {"$in": "1,2"}},
    {"n": {"$in": [1, None]}},
    {"n": {"$gt": "two"}},
    {"n": {"$eq": float("nan")}},
    {"x": {"$lt": float("inf")}},
    {"n": {"$eq": 2**70}},
    {"b": {"$gt": True}},
    {"tags": {"$gt": "a"}},
    {"tags": {"$contains": 5.5}},
    {"n": {"$contains": 1}},
    {"s": {"$contains": 1}},
    {"d": "not a date"},
    {1: "x"},
    {"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [
        {"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [{"$and": [
            {"$and": [{"n": 1}]}]}]}]}]}]}]}]}]}]}]}]}]}]}]}]}]},
    {"$or": [{"n": i} for i in range(300)]},
])
def test_malformed_filters_raise_filter_error_and_change_nothing(
        items_mem: Memory, where: Any) -> None:
    mem = items_mem
    assert_unchanged(mem, lambda: mem.query("Item", where), FilterError)
    with pytest.raises(FilterError):
        mem.count("Item", where)
    with pytest.raises(FilterError):
        mem.query("Item", where, as_of=1)
    assert mem.count("Item") == len(ROWS)


@pytest.mark.parametrize("order_by", [
    "x; DROP TABLE events", "-\"s\"", ["s", "s'"], "tags", "", "-", ["n"] * 5, 5, ["n", None],
])
def test_malformed_orderings_raise_filter_error(items_mem: Memory, order_by: Any) -> None:
    assert_unchanged(items_mem, lambda: items_mem.query("Item", order_by=order_by), FilterError)


def test_values_are_bound_never_sql(mem: Memory) -> None:
    mem.define(Item, identity=["key"])
    mem.create_many("Item", [{"key": k, **v} for k, v in ROWS.items()])
    evil = "x' OR '1'='1"
    created = mem.create("Item", {"key": "evil", "s": evil, "tags": [evil]})
    assert [e.id for e in mem.query("Item", {"s": evil}).items] == [created.id]
    assert [e.id for e in mem.query("Item", {"tags": {"$contains": evil}}).items] == [created.id]
    assert mem.query("Item", {"s": "x"}).items == []
    assert mem.count("Item") == len(ROWS) + 1


# ---------------------------------------------------------------- property: SQL == Python

TEXT = st.text(alphabet="aAbzé'\"%_ \\", max_size=3)
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "s": TEXT,
    "n": st.integers(-3, 3),
    "x": st.sampled_from([-1.5, 0.0, 0.5, 2.0, 1e300, -1e-300]),
    "b": st.booleans(),
    "d": st.dates(dt.date(2024, 12, 30), dt.date(2025, 1, 3)),
    "ts": st.sampled_from([dt.datetime(2025, 1, 1, h, m, tzinfo=UTC)
                           for h, m in itertools.product((0, 12, 23), (0, 30))]),
    "e": st.sampled_from(["red", "green", "blue"]),
}
ORDERED = ("s", "n", "x", "d", "ts", "e")
ROW = st.fixed_dictionaries({}, optional={
    **{name: st.none() | values for name, values in SCALARS.items()},
    "tags": st.lists(TEXT, max_size=3),
    "nums": st.none() | st.lists(st.integers(-2, 2), max_size=3),
})


def _leaves() -> st.SearchStrategy[dict[str, Any]]:
    options: list[st.SearchStrategy[dict[str, Any]]] = []
    for name, values in SCALARS.items():
        ops = ["$eq", "$ne"] + (["$gt", "$gte", "$lt", "$lte"] if name in ORDERED else [])
        options.append(st.builds(lambda n, v: {n: v}, st.just(name), st.none() | values))
        options.append(st.builds(lambda n, op, v: {n: {op: v}}, st.just(name),
                                 st.sampled_from(ops), values))
        options.append(st.builds(lambda n, op, v: {n: {op: None}}, st.just(name),
                                 st.sampled_from(["$eq", "$ne"]), st.none()))
        options.append(st.builds(lambda n, op, v: {n: {op: v}}, st.just(name),
                                 st.sampled_from(["$in", "$nin"]),
                                 st.lists(values, max_size=3)))
        if name in ORDERED:  # a range: two operators on one field
            options.append(st.builds(lambda n, lo, hi: {n: {"$gte": lo, "$lt": hi}},
                                     st.just(name), values, values))
    options.append(st.builds(lambda v: {"s": {"$contains": v}}, TEXT))
    options.append(st.builds(lambda v: {"tags": {"$contains": v}}, TEXT))
    options.append(st.builds(lambda v: {"nums": {"$contains": v}}, st.integers(-2, 2)))
    options.append(st.builds(lambda op, v: {"tags": {op: v}}, st.sampled_from(["$eq", "$ne"]),
                             st.lists(TEXT, max_size=2)))
    options.append(st.builds(lambda op, v: {"nums": {op: v}}, st.sampled_from(["$eq", "$ne"]),
                             st.none() | st.lists(st.integers(-2, 2), max_size=2)))
    return st.one_of(options)


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


FILTERS = st.recursive(
    _leaves(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"$and": xs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"$or": xs}),
        st.lists(inner, min_size=2, max_size=3).map(_merge),
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def prop_mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """One memory for the property test; every example writes into a tenant of its own."""
    mem = open_memory(Path(tmp_path_factory.mktemp("prop")) / "mem")
    mem.define(Item, identity=["key"])
    yield mem
    mem.close()


_tenants = itertools.count()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=st.lists(ROW, max_size=10), where=FILTERS)
def test_sql_filter_equals_python_evaluation(prop_mem: Memory, rows: list[dict[str, Any]],
                                             where: dict[str, Any]) -> None:
    # IDs are unique across tenants, so the keys carry the tenant too
    tenant = f"prop{next(_tenants)}"
    mem = tenant_like(prop_mem, tenant)
    keys = [f"{tenant}-r{i}" for i in range(len(rows))]
    created = mem.create_many("Item", [{"key": k, **row} for k, row in zip(keys, rows,
                                                                           strict=True)]
                              ) if rows else []
    truth = {e.id: Item(key=k, **row).model_dump()
             for e, k, row in zip(created, keys, rows, strict=True)}
    expected = sorted(eid for eid, data in truth.items() if evaluate(where, data))
    live = [e.id for e in mem.query("Item", where, limit=100).items]
    assert live == expected, where
    assert mem.count("Item", where) == len(expected)
    past = [e.id for e in mem.query("Item", where, limit=100, as_of=mem.last_seq()).items]
    assert past == expected, where
