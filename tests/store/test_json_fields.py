"""The json field kind: values kept, audited, time-travelled; filters on paths inside them.

Path filters are checked against a pure-Python reading of the language on generated data and
filters (hypothesis); hostile paths are refused through both front doors, changing nothing.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from dmf_hybrid import FilterError, Memory, MemoryAPI, ValidationError
from dmf_hybrid._internal.jsonpaths import MISSING, value_at
from tests.store import assert_unchanged, both_doors, open_memory

mem = both_doors()

NOTE = {"name": "Note", "fields": {"text": {"type": "str"}, "meta": {"type": "json"}},
        "embed": "{text} about {meta.topic}"}


def define_note(m: MemoryAPI) -> None:
    m.define_type(NOTE)


# ---------------------------------------------------------------- values, audit, time travel


def test_json_values_round_trip_and_time_travel(mem: MemoryAPI) -> None:
    define_note(mem)
    first = {"topic": "旅行", "tags": ["a", "b"], "n": 3, "deep": {"x": [1, {"y": None}]},
             "ok": True, "f": 0.5}
    e = mem.create("Note", {"text": "hello", "meta": first})
    assert mem.get(e.id).data.meta == first
    seq = mem.last_seq()
    second = [1, "two", {"three": 3}]
    mem.update(e.id, {"meta": second})
    assert mem.get(e.id).data.meta == second
    assert mem.get(e.id, as_of=seq).data.meta == first
    assert [ev.op for ev in mem.history(e.id)] == ["create", "update"]
    assert mem.history(e.id)[0].after["data"]["meta"] == first
    assert [x.id for x in mem.query("Note", {"meta.topic": "旅行"}, as_of=seq).items] == [e.id]
    assert mem.query("Note", {"meta.topic": "旅行"}).items == []
    assert mem.verify_audit().ok


def test_json_scalars_and_null_are_values(mem: MemoryAPI) -> None:
    define_note(mem)
    ids = [mem.create("Note", {"text": f"t{i}", "meta": v}).id
           for i, v in enumerate(["s", 7, None, False])]
    assert [mem.get(i).data.meta for i in ids] == ["s", 7, None, False]
    assert [x.id for x in mem.query("Note", {"meta": 7}).items] == [ids[1]]


def test_bulk_create_keeps_json(mem: MemoryAPI) -> None:
    define_note(mem)
    rows = [{"text": f"t{i}", "meta": {"i": i, "tags": [str(i)]}} for i in range(12)]
    made = mem.create_many("Note", rows)
    assert [mem.get(e.id).data.meta for e in made] == [r["meta"] for r in rows]
    hits = mem.query("Note", {"meta.tags": {"$contains": "5"}}).items
    assert [h.data.meta["i"] for h in hits] == [5]


def test_embed_template_renders_a_path(mem: MemoryAPI) -> None:
    define_note(mem)
    etype = mem.get_type("Note")
    assert etype.embed_text({"text": "hi", "meta": {"topic": ["x", "y"]}}) == "hi about x, y"
    assert etype.embed_text({"text": "hi", "meta": {"other": 1}}) == "hi about"
    mem.create("Note", {"text": "plain", "meta": {"topic": "kangaroo"}})
    mem.flush()
    hits = mem.search("Note", "kangaroo", mode="keyword").hits
    assert [h.entity.data.meta["topic"] for h in hits] == ["kangaroo"]


def test_a_pydantic_dict_field_is_json(mem: MemoryAPI) -> None:
    class Doc(BaseModel):
        title: str
        extra: dict[str, Any] | None = None

    mem.define(Doc, embed="{title} {extra.k}")
    assert mem.get_type("Doc").fields["extra"].type == "json"
    e = mem.create("Doc", {"title": "t", "extra": {"k": "v"}})
    assert mem.get(e.id).data.extra == {"k": "v"}


def test_non_finite_json_is_refused(mem: MemoryAPI) -> None:
    define_note(mem)
    for bad in (float("nan"), {"a": [1, float("inf")]}):
        assert_unchanged(mem, lambda bad=bad: mem.create("Note", {"text": "x", "meta": bad}),
                         ValidationError)


def test_non_json_value_is_refused(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m") as m:
        define_note(m)
        assert_unchanged(m, lambda: m.create("Note", {"text": "x", "meta": {"s": {1, 2}}}),
                         ValidationError)


HOSTILE = ["meta.a'b", "meta..a", 'meta."x"', "meta.a; DROP TABLE events; --", "meta.",
           "meta.a b", "meta.a\\b", "meta.$", "meta.a[0]", "text.sub", "meta.a\n"]
BAD_OPERANDS: list[dict[str, Any]] = [
    {"meta.a": [1]}, {"meta.a": {"k": 1}}, {"meta.a": {"$gt": True}}, {"meta.a": {"$in": 1}},
    {"meta.a": {"$gt": None}}, {"meta.a": 2**70},
]


def test_hostile_paths_are_refused(mem: MemoryAPI) -> None:
    define_note(mem)
    mem.create("Note", {"text": "x", "meta": {"a": 1}})
    for key in HOSTILE:
        info = assert_unchanged(mem, lambda key=key: mem.query("Note", {key: 1}), FilterError)
        assert 400 <= info.value.status_code < 500
        assert info.value.details.get("field", "").startswith("where"), key
        assert_unchanged(mem, lambda key=key: mem.count("Note", {"$or": [{key: {"$gt": 0}}]}),
                         FilterError)


def test_bad_json_operands_are_refused(mem: MemoryAPI) -> None:
    define_note(mem)
    for where in BAD_OPERANDS:
        assert_unchanged(mem, lambda where=where: mem.query("Note", where), FilterError)
    assert_unchanged(mem, lambda: mem.query("Note", order_by="meta"), FilterError)


# ---------------------------------------------------------------- paths agree with Python

KEYS = ["a", "b", "名"]
SCALARS = [0, 1, -2, 2.5, "x", "xy", "", "名字", True, False, None]


def _kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "str"
    if isinstance(v, int | float):
        return "num"
    return None


def _same(v: Any, x: Any) -> bool:
    return v is not MISSING and _kind(v) is not None and _kind(v) == _kind(x) and v == x


def _holds(v: Any, op: str, x: Any) -> bool:
    """What a comparison at a path means, read from the language's definition."""
    if x is None:
        null = v is MISSING or v is None
        return null if op == "$eq" else not null
    if op == "$eq":
        return _same(v, x)
    if op == "$ne":
        return not _same(v, x)
    if op == "$in":
        return any(_same(v, o) for o in x)
    if op == "$nin":
        return not any(_same(v, o) for o in x)
    if op == "$contains":
        return (isinstance(v, list) and any(_same(e, x) for e in v)) or (
            isinstance(v, str) and isinstance(x, str) and x in v)
    if v is MISSING or _kind(v) != _kind(x):
        return False
    return {"$gt": v > x, "$gte": v >= x, "$lt": v < x, "$lte": v <= x}[op]


def _evaluate(where: dict[str, Any], data: dict[str, Any]) -> bool:
    for key, cond in where.items():
        if key == "$or":
            if not any(_evaluate(sub, data) for sub in cond):
                return False
            continue
        root, _, rest = key.partition(".")
        v = value_at(data[root], tuple(rest.split("."))) if rest else data[root]
        ops = cond if isinstance(cond, dict) else {"$eq": cond}
        if not all(_holds(v, op, x) for op, x in ops.items()):
            return False
    return True


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 2 and roll < 0.45:
        return {k: _random_value(rng, depth + 1) for k in rng.sample(KEYS, rng.randint(0, 3))}
    if roll < 0.6:
        return [rng.choice(SCALARS) for _ in range(rng.randint(0, 3))]
    return rng.choice(SCALARS)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, dict]]:
    m = open_memory(tmp_path_factory.mktemp("json") / "m")
    define_note(m)
    rng = random.Random(20261201)
    rows = [{"text": f"n{i}", "meta": _random_value(rng)} for i in range(120)]
    made = m.create_many("Note", rows)
    yield m, {e.id: r for e, r in zip(made, rows, strict=True)}
    m.close()


paths = st.lists(st.sampled_from(KEYS), min_size=0, max_size=3).map(
    lambda ks: ".".join(["meta", *ks]))
scalar = st.sampled_from([s for s in SCALARS if s is not None])
condition = st.one_of(
    st.sampled_from(SCALARS),
    st.builds(lambda op, x: {op: x}, st.sampled_from(["$eq", "$ne", "$contains"]), scalar),
    st.builds(lambda op, x: {op: x}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
              st.sampled_from([0, 1, 2.5, -2, "x", "名"])),
    st.builds(lambda op, xs: {op: xs}, st.sampled_from(["$in", "$nin"]),
              st.lists(scalar, max_size=3)),
    st.sampled_from([{"$eq": None}, {"$ne": None}]),
)
leaf = st.dictionaries(paths, condition, min_size=1, max_size=2)
where_strategy = st.one_of(leaf, st.builds(lambda a, b: {"$or": [a, b]}, leaf, leaf))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=where_strategy)
def test_path_filters_agree_with_python(filled: tuple[Memory, dict], where: dict) -> None:
    m, rows = filled
    expected = sorted(i for i, r in rows.items() if _evaluate(where, r))
    got = sorted(e.id for e in m.query("Note", where, limit=500).items)
    assert got == expected, where
    assert m.count("Note", where) == len(expected)
