"""Property tests: the filter language, invalid plans, and IDs across processes and hash seeds."""

from __future__ import annotations

import base64
import json
import math
import pickle
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmf_hybrid._internal.ids
from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.errors import DMFError, FilterError, ValidationError
from dmf_hybrid._internal.ids import entity_id
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.reliability_service import dump_state

ITEM_TYPE: dict[str, Any] = {
    "name": "Item",
    "fields": {"key": {"type": "str", "required": True, "nullable": False},
               "name": {"type": "str"},
               "n": {"type": "int"},
               "x": {"type": "float", "default": 0.0},
               "tags": {"type": "list", "item": "str", "default": []},
               "flag": {"type": "bool"}},
    "identity": ["key"],
    "embed": "{name} {tags}",
    "relations": {"next": {"target": "Item", "cardinality": "many"}},
}
# small domains, so that filters hit; strings that mean something to SQL LIKE or quoting
NAMES = ["", "a", "ab", "b", "A", "a%", "%", "_", "a_b", "O'Hara", 'x"y', "é", "ß", "z\\"]
INTS = [-2, 0, 1, 5, 2**40]
FLOATS = [-1.5, 0.0, 2.25, 1e10]
TAGS = ["red", "green", "%", "_"]
PROPERTY_SETTINGS = settings(max_examples=50, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])
PLAN_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=15)


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, dict[str, Any],
                                                                      Path]]:
    """A memory with 26 items whose fields cover the domains (nulls included)."""
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    mem.define_type(ITEM_TYPE)
    rows: dict[str, dict[str, Any]] = {}
    for i in range(26):
        data = {"key": f"k{i}", "name": NAMES[i % len(NAMES)],
                "n": None if i % 7 == 3 else INTS[i % len(INTS)],
                "x": FLOATS[(i * 3) % len(FLOATS)],
                "tags": [TAGS[j] for j in range(len(TAGS)) if (i >> j) & 1],
                "flag": None if i % 5 == 0 else bool(i % 2)}
        entity = mem.create("Item", data)
        rows[entity.id] = entity.data.model_dump()
    ids = sorted(rows)
    mem.link(ids[0], "next", ids[1])
    mem.delete(ids[-1])
    del rows[ids[-1]]
    yield mem, rows, tmp_path_factory.mktemp("dump")
    mem.close()


# ---------------------------------------------------------------------------- filters


def _holds(value: Any, op: str, operand: Any) -> bool:
    """The filter language's meaning, written independently of its SQL compiler."""
    if operand is None:
        return (value is None) if op == "$eq" else (value is not None)
    if op == "$ne":
        return value != operand
    if op == "$nin":
        return value is None or value not in operand
    if value is None:
        return False
    if op == "$eq":
        return bool(value == operand)
    if op == "$in":
        return value in operand
    if op == "$contains":
        return operand in value
    return {"$gt": value > operand, "$gte": value >= operand, "$lt": value < operand,
            "$lte": value <= operand}[op]


def matches(row: dict[str, Any], where: dict[str, Any]) -> bool:
    """Whether a row satisfies a filter (an implicit AND over the object's keys)."""
    for key, value in where.items():
        if key == "$and":
            ok = all(matches(row, w) for w in value)
        elif key == "$or":
            ok = any(matches(row, w) for w in value)
        elif isinstance(value, dict):
            ok = all(_holds(row[key], op, operand) for op, operand in value.items())
        else:
            ok = _holds(row[key], "$eq", value)
        if not ok:
            return False
    return True


ORDERED = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
FIELDS: dict[str, tuple[tuple[str, ...], st.SearchStrategy[Any]]] = {
    "name": ((*ORDERED, "$contains"), st.sampled_from(NAMES)),
    "n": (ORDERED, st.sampled_from(INTS)),
    "x": (ORDERED, st.sampled_from(FLOATS)),
    "flag": (("$eq", "$ne", "$in", "$nin"), st.booleans()),
    "tags": (("$contains", "$eq"), st.sampled_from(TAGS)),
}


@st.composite
def comparisons(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(sorted(FIELDS)))
    ops, values = FIELDS[field]
    op = draw(st.sampled_from(ops))
    operand: Any
    if draw(st.integers(0, 9)) == 0 and op in ("$eq", "$ne"):
        operand = None
    elif op in ("$in", "$nin"):
        operand = draw(st.lists(values, max_size=3))
    elif field == "tags" and op == "$eq":
        operand = draw(st.lists(st.sampled_from(TAGS), max_size=2))
    else:
        operand = draw(values)
    if op == "$eq" and draw(st.booleans()):
        return {field: operand}
    return {field: {op: operand}}


filters = st.recursive(
    comparisons(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"$and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda a, b: {**a, **b}, inner, inner),
    ),
    max_leaves=6,
)


@PROPERTY_SETTINGS
@given(where=filters)
def test_query_count_and_search_agree_with_the_filter_meaning(
        items: tuple[Memory, dict[str, Any], Path], where: dict[str, Any]) -> None:
    mem, rows, _ = items
    want = {eid for eid, row in rows.items() if matches(row, where)}
    assert {e.id for e in mem.query("Item", where, limit=1000).items} == want
    assert mem.count("Item", where) == len(want)
    hits = mem.search("Item", "a red", where=where, k=100, mode="vector").hits
    assert {h.entity.id for h in hits} == want


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["$and", "$or", "$eq", "$in", "$gt", "$contains", "$not", "name",
                         "n", "tags", "bogus", "id", ""]), inner, max_size=3),
    max_leaves=10,
)


@PROPERTY_SETTINGS
@given(where=json_values)
def test_any_filter_value_is_a_result_or_a_filter_error(
        items: tuple[Memory, dict[str, Any], Path], where: Any) -> None:
    mem, rows, _ = items
    try:
        got = {e.id for e in mem.query("Item", where, limit=1000).items}
    except (FilterError, ValidationError):
        return
    if isinstance(where, dict) and where and not _has_nan(where):
        try:
            want = {eid for eid, row in rows.items() if matches(row, where)}
        except (TypeError, KeyError):
            return  # the service coerced a value the reference does not model
        assert got == want or not _well_typed(where)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_nan(v) for v in value)
    return False


def _well_typed(where: Any) -> bool:
    """Only filters whose operands already have the field's Python type are compared."""
    kinds = {"name": str, "n": int, "x": float, "flag": bool, "tags": str}
    if isinstance(where, list):
        return all(_well_typed(w) for w in where)
    if not isinstance(where, dict):
        return False
    for key, value in where.items():
        if key in ("$and", "$or"):
            if not _well_typed(value):
                return False
            continue
        operands = value.values() if isinstance(value, dict) else [value]
        for operand in operands:
            items = operand if isinstance(operand, list) else [operand]
            if not all(type(v) is kinds.get(key) for v in items if v is not None):
                return False
    return True


# ---------------------------------------------------------------------------- plans


MISSING = "Item_00000000000000000000"


@st.composite
def valid_steps(draw: st.DrawFn, ids: list[str], deleted: str) -> dict[str, Any]:
    eid = draw(st.sampled_from(ids))
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return {"op": "get", "id": eid}
    if kind == 1:
        return {"op": "create", "type": "Item", "data": {"key": f"new-{uuid.uuid4().hex}",
                                                         "name": "fresh"}}
    if kind == 2:
        return {"op": "update", "id": eid, "data": {"n": draw(st.integers(0, 9))}}
    if kind == 3:
        return {"op": "query", "type": "Item", "where": {"name": draw(st.sampled_from(NAMES))}}
    if kind == 4:
        return {"op": "link", "from_id": eid, "relation": "next",
                "to_id": draw(st.sampled_from(ids))}
    return {"op": "search", "type": "Item", "text": "a", "k": 3}


def invalid_steps(ids: list[str], deleted: str) -> st.SearchStrategy[Any]:
    eid = st.sampled_from(ids)
    return st.one_of(
        st.just({"op": "explode", "id": ids[0]}),
        st.just({"op": "get"}),
        st.just({"op": "get", "id": MISSING}),
        st.just({"op": "get", "id": deleted}),
        st.just({"op": "delete", "id": deleted}),
        st.just({"op": "get", "id": "no such id!"}),
        st.just({"op": "create", "type": "Nope", "data": {"key": "k"}}),
        st.just({"op": "create", "type": "Item", "data": {"key": 5}}),
        st.just({"op": "create", "type": "Item", "data": {"key": "k", "bogus": 1}}),
        st.just({"op": "create", "type": "Item", "data": {"name": "no key"}}),
        eid.map(lambda e: {"op": "update", "id": e, "data": {"n": "many"}}),
        eid.map(lambda e: {"op": "update", "id": e, "data": {"x": math.nan}}),
        eid.map(lambda e: {"op": "update", "id": e, "data": {"n": 1},
                           "expected_version": 999}),
        eid.map(lambda e: {"op": "update", "id": e, "data": {}}),
        eid.map(lambda e: {"op": "append", "id": e, "field": "name", "values": ["x"]}),
        eid.map(lambda e: {"op": "link", "from_id": e, "relation": "nope", "to_id": e}),
        eid.map(lambda e: {"op": "get", "id": e, "surprise": True}),
        st.just({"op": "update", "id": "$9.id", "data": {"n": 1}}),
        st.just({"op": "get", "id": "$0.nope.deeper"}),
        st.just({"op": "search", "type": "Item", "text": "a", "mode": "psychic"}),
        st.just({"op": "query", "type": "Item", "where": {"bogus": 1}}),
        st.just({"op": "query", "type": "Item", "limit": -1}),
        st.just("not a step"),
        st.just({"op": "link", "from_id": MISSING, "relation": "next", "to_id": ids[0]}),
    )


@st.composite
def invalid_plans(draw: st.DrawFn, ids: list[str], deleted: str) -> list[Any]:
    before = draw(st.lists(valid_steps(ids, deleted), max_size=3))
    after = draw(st.lists(valid_steps(ids, deleted), max_size=2))
    return [*before, draw(invalid_steps(ids, deleted)), *after]


def _plan_inputs(mem: Memory) -> tuple[list[str], str]:
    live = [e.id for e in mem.query("Item", limit=1000).items]
    deleted = sorted(set(e.entity_id for e in mem.events(limit=1000)
                         if e.op == "delete" and e.entity_id) - set(live))
    return live, deleted[0]


@PLAN_SETTINGS
@given(data=st.data())
def test_an_invalid_plan_raises_and_changes_nothing(
        items: tuple[Memory, dict[str, Any], Path], data: st.DataObject) -> None:
    mem, _, root = items
    ids, deleted = _plan_inputs(mem)
    plan = data.draw(invalid_plans(ids, deleted))
    before, seq = dump_state(mem, root), mem.last_seq()
    with pytest.raises(DMFError) as info:
        mem.execute_plan(plan)
    assert 400 <= info.value.status_code < 500
    assert mem.last_seq() == seq
    assert dump_state(mem, root) == before


@PLAN_SETTINGS
@given(data=st.data())
def test_a_dry_run_changes_nothing(items: tuple[Memory, dict[str, Any], Path],
                                   data: st.DataObject) -> None:
    mem, _, root = items
    ids, deleted = _plan_inputs(mem)
    plan = data.draw(st.lists(valid_steps(ids, deleted), min_size=1, max_size=4))
    before, seq = dump_state(mem, root), mem.last_seq()
    try:
        result = mem.execute_plan(plan, dry_run=True)
    except DMFError as exc:
        assert 400 <= exc.status_code < 500
    else:
        assert result.committed is False
    assert mem.last_seq() == seq
    assert dump_state(mem, root) == before


# ---------------------------------------------------------------------------- IDs


identity_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
    | st.frozensets(st.text(max_size=4), max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)
identities = st.dictionaries(st.text(min_size=1, max_size=8), identity_values, min_size=1,
                             max_size=4)
tenants = st.sampled_from(["default", "alpha", "beta"])


@settings(max_examples=100, deadline=None, database=None)
@given(identity=identities, tenant=tenants)
def test_ids_ignore_key_order_and_separate_tenants(identity: dict[str, Any],
                                                   tenant: str) -> None:
    eid = entity_id("Thing", identity, tenant)
    assert re.fullmatch(r"Thing_[0-9a-f]{20}", eid)
    assert entity_id("Thing", dict(reversed(list(identity.items()))), tenant) == eid
    other = "beta" if tenant == "alpha" else "alpha"
    assert entity_id("Thing", identity, other) != eid


_OTHER_PROCESS = """
import base64, importlib.util, json, pickle, sys
spec = importlib.util.spec_from_file_location("ids_alone", sys.argv[1])
ids = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ids)
batch = pickle.loads(base64.b64decode(sys.stdin.read()))
print(json.dumps([ids.entity_id("Thing", identity, tenant) for identity, tenant in batch]))
"""


@settings(max_examples=3, deadline=None, database=None)
@given(batch=st.lists(st.tuples(identities, tenants), min_size=10, max_size=40))
def test_ids_are_the_same_in_other_processes_and_hash_seeds(
        batch: list[tuple[dict[str, Any], str]]) -> None:
    expected = [entity_id("Thing", identity, tenant) for identity, tenant in batch]
    payload = base64.b64encode(pickle.dumps(batch)).decode()
    for seed in ("0", "4242", "random"):
        out = subprocess.run(
            [sys.executable, "-c", _OTHER_PROCESS, dmf_hybrid._internal.ids.__file__],
            input=payload, capture_output=True, text=True, timeout=60, check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        assert json.loads(out.stdout) == expected
