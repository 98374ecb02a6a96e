"""The unfiltered search's short ways give exactly what the long ways gave: entities built a
search's rows at a time equal those built one by one (and those ``get`` reads), leg scores of
a few proposals equal the mirror's own scoring, a ranking sorted whole equals the partitioned
one, and a query's time phrases read once equal those read afresh.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pydantic
import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.dates import asks_when, ground
from dmf_hybrid._internal.mirrors.vectors import PRECISE_ONLY_ROWS, LocalVectors
from dmf_hybrid._internal.search.ranking import ranked, unit64
from dmf_hybrid._internal.search.rerank import read_query_time
from dmf_hybrid._internal.store.tables import table_name


class Gadget(BaseModel):
    """A type with a field of every kind, defaults and nulls among them."""

    name: str
    size: Literal["s", "m", "l"] = "m"
    price: float = 1.5
    count: int | None = None
    fragile: bool = False
    made: dt.date | None = None
    seen: dt.datetime | None = None
    tags: list[str] = Field(default_factory=list)
    stamps: list[dt.datetime] = Field(default_factory=list)
    extra: pydantic.JsonValue | None = None


GADGET_AS_DATA: dict[str, Any] = {
    "name": "Widget",
    "identity": ["name"],
    "embed": "{name} {tags}",
    "fields": {
        "name": {"type": "str", "required": True, "nullable": False},
        "size": {"type": "enum", "values": ["s", "m", "l"], "default": "m"},
        "price": {"type": "float", "default": 1.5},
        "count": {"type": "int"},
        "fragile": {"type": "bool", "default": False},
        "made": {"type": "date"},
        "seen": {"type": "datetime"},
        "tags": {"type": "list", "item": "str"},
        "stamps": {"type": "list", "item": "datetime"},
        "extra": {"type": "json"},
    },
}

WHEN = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
VALUES: list[dict[str, Any]] = [
    {"name": "bare"},
    {"name": "full", "size": "l", "price": 3.0, "count": 7, "fragile": True,
     "made": dt.date(2023, 1, 2), "seen": WHEN, "tags": ["a", "b"],
     "stamps": [WHEN, WHEN + dt.timedelta(days=1)],
     "extra": {"deep": [1, 2.5, {"x": None}], "ok": True}},
    {"name": "nulls", "count": None, "made": None, "seen": None, "extra": [1, "two"]},
]


@pytest.fixture
def gadgets(tmp_path: Path) -> Any:
    """A memory with a type defined by a model and the same type defined as data, each
    holding entities with every kind of value."""
    m = Memory.open(tmp_path / "mem", embedder=HashEmbedder(),
                    settings=Settings(exact_threshold=0))  # real Chroma, the ANN plan
    m.define(Gadget, identity=["name"], embed="{name} {tags}")
    m.define_type(GADGET_AS_DATA)
    for value in VALUES:
        m.create("Gadget", value)
        m.create("Widget", value)
    yield m
    m.close()


@pytest.mark.parametrize("type_name", ["Gadget", "Widget"])
def test_entities_built_together_equal_those_built_alone(gadgets: Memory,
                                                         type_name: str) -> None:
    store = gadgets._store
    etype = store.registry.get(type_name, gadgets.tenant)
    assert etype is not None
    rows = store.db.reader().execute(
        f"SELECT {store.rows.select_cols(etype)} FROM {table_name(etype.key)} "
        "ORDER BY id").fetchall()
    assert len(rows) == len(VALUES)
    together = store.rows.rows_to_entities(etype, rows)
    for row, entity in zip(rows, together, strict=True):
        alone = store.rows.row_to_entity(etype, row)
        assert entity == alone
        assert entity.model_fields_set == alone.model_fields_set
        assert type(entity.data) is type(alone.data)
        assert entity.data.model_fields_set == alone.data.model_fields_set
        for name in alone.data.model_fields:
            mine, theirs = getattr(entity.data, name), getattr(alone.data, name)
            assert mine == theirs and type(mine) is type(theirs), name
        assert entity.model_dump(mode="json") == alone.model_dump(mode="json")
    if type_name == "Gadget":
        full = next(e for e in together if e.data.name == "full")
        assert full.data.seen == WHEN and full.data.seen.tzinfo is not None
    assert store.rows.rows_to_entities(etype, []) == []


@pytest.mark.parametrize("type_name", ["Gadget", "Widget"])
def test_search_hits_are_the_stored_entities_after_an_update(gadgets: Memory,
                                                             type_name: str) -> None:
    before = {h.entity.id: h.entity for h in
              gadgets.search(type_name, "full a b", k=10, mode="vector").hits}
    assert before and all(e == gadgets.get(eid) for eid, e in before.items())
    target = next(e for e in before.values() if e.data.name == "full")
    gadgets.update(target.id, {"tags": ["c"], "count": 8}, expected_version=target.version)
    hits = gadgets.search(type_name, "full c", k=10, mode="vector").hits
    assert hits[0].entity.id == target.id or target.id in {h.entity.id for h in hits}
    for hit in hits:
        assert hit.entity == gadgets.get(hit.entity.id)
    updated = next(h.entity for h in hits if h.entity.id == target.id)
    assert updated.version == target.version + 1
    assert updated.data.tags == ["c"] and updated.data.count == 8
    hits[0].entity.data.tags.append("mutated")  # a caller's change stays the caller's
    again = gadgets.search(type_name, "full c", k=10, mode="vector").hits
    assert all(h.entity == gadgets.get(h.entity.id) for h in again)


def _ranked_by_partition(ids: list[str], scores: np.ndarray, depth: int
                         ) -> list[tuple[str, float]]:
    """The ranking as it was made for every size: partition, keep ties at the cut, sort."""
    values = np.asarray(scores, dtype=np.float64)
    if len(values) > depth > 0:
        kth = np.partition(values, len(values) - depth)[len(values) - depth]
        keep = np.flatnonzero(values >= kth).tolist()
    else:
        keep = list(range(len(values)))
    pairs = sorted(((ids[i], float(values[i])) for i in keep),
                   key=lambda item: (-item[1], item[0]))
    return pairs[:depth]


@pytest.mark.parametrize("size", [0, 1, 5, 10, 11, 15, 64, 65, 200])
@pytest.mark.parametrize("depth", [0, 1, 10])
def test_a_ranking_sorted_whole_equals_the_partitioned_one(size: int, depth: int) -> None:
    rng = np.random.default_rng(size * 31 + depth)
    for _ in range(20):
        ids = [f"e{i:04d}" for i in rng.permutation(size)]
        scores = rng.choice(np.array([0.5, 0.25, -0.0, 0.0, 0.125]), size=size) \
            if rng.random() < 0.5 else rng.standard_normal(size)
        assert ranked(ids, scores, depth) == _ranked_by_partition(ids, scores, depth)


def test_unit64_is_numpy_norm_division_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for vec in [rng.standard_normal(384).astype(np.float32), rng.standard_normal(7),
                np.zeros(4), np.array([3.0, 4.0])]:
        as64 = np.asarray(vec, dtype=np.float64)
        norm = float(np.linalg.norm(as64))
        expected = as64 if norm == 0.0 else as64 / norm
        assert np.array_equal(unit64(vec), expected)
        assert unit64(vec).tobytes() == expected.tobytes()


def test_scores_of_a_few_ids_equal_the_mirrors_top() -> None:
    rng = np.random.default_rng(9)
    local = LocalVectors(dim=32)
    ids = [f"id{i:03d}" for i in range(300)]
    local.upsert(ids, list(range(1, 301)), rng.standard_normal((300, 32)).astype(np.float32),
                 ["default"] * 300, ["h"] * 300)
    local.upsert(["t1"], [999], rng.standard_normal((1, 32)).astype(np.float32), ["other"],
                 ["h"])
    for n in (0, 1, 10, 15, PRECISE_ONLY_ROWS):
        query = unit64(rng.standard_normal(32))
        wanted = [ids[i] for i in rng.choice(300, size=n, replace=False)] + ["missing", "t1"]
        got_ids, got = local.precise("default", wanted, query)
        top = local.top(query, n, lambda w=wanted: local.rows_of_ids("default", w))
        assert top is not None
        assert sorted(zip(got_ids, got.tolist(), strict=True)) == \
            sorted(zip(top[0], top[1].tolist(), strict=True))
        assert ranked(got_ids, got, 10) == ranked(*top, 10)


@pytest.mark.parametrize("text", ["what did we do last weekend", "trip in March 2023",
                                  "When did she move? 3 days ago", "no time here"])
def test_time_phrases_read_once_equal_those_read_afresh(text: str) -> None:
    for reference in (dt.datetime(2024, 3, 3, 23, 59, tzinfo=dt.UTC),
                      dt.datetime(2024, 3, 4, 0, 1, tzinfo=dt.UTC),
                      dt.datetime(2024, 3, 4, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=5))),
                      dt.datetime(2024, 3, 3, 23, 59, tzinfo=dt.UTC)):
        read = read_query_time(text, reference)
        assert read.reference == reference
        assert read.windows == ground(text, reference.astimezone(dt.UTC).replace(tzinfo=None))
        assert read.asks_when == asks_when(text)
        read.windows.append(read.windows[0] if read.windows else None)  # type: ignore[arg-type]
        assert read_query_time(text, reference).windows == read.windows[:-1]
