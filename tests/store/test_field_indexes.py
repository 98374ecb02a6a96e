"""Indexed fields: ``indexed = true`` on a field makes an index on its column on PostgreSQL
(a B-tree or, for text, a hash index; DuckDB makes none: its column scans are faster than its
index there); every answer stays the same on both engines, a change of the flag is a new version
of the type, and a bad flag is refused through both front doors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, SchemaError
from dmf_hybrid._internal.schema import EntityType
from dmf_hybrid._internal.store.tables import field_index_name
from tests.store import assert_unchanged, both_doors

door = both_doors("door")
CITIES = ("Shanghai", "上海", "Paris", "Lyon")


class Listing(BaseModel):
    """A listing whose filtered fields are indexed."""

    name: str
    city: str = Field(json_schema_extra={"indexed": True})
    price: float = Field(json_schema_extra={"indexed": True})
    listed: dt.date = Field(json_schema_extra={"indexed": True})
    kind: Literal["flat", "room"] = Field("flat", json_schema_extra={"indexed": True})
    tags: list[str] = []


class Plain(BaseModel):
    """The same listing with no index."""

    name: str
    city: str
    price: float
    listed: dt.date
    kind: Literal["flat", "room"] = "flat"
    tags: list[str] = []


#: The fields of Listing an engine indexes.
INDEXED = {"city", "price", "listed", "kind"}


def expected(mem: Memory) -> set[str]:
    """The fields of Listing the memory's engine has an index of (PostgreSQL: all marked)."""
    return INDEXED if mem._store.db.dialect.name == "postgresql" else set()


def indexes(mem: Memory, etype: EntityType) -> dict[str, str]:
    """The type's field indexes in the engine's catalogue: name -> method ("art" on DuckDB)."""
    db = mem._store.db
    names = {field_index_name(etype, f): f for f in etype.fields}
    if db.dialect.name == "duckdb":
        rows = db.fetchall("SELECT index_name, 'art' FROM duckdb_indexes()")
    else:
        rows = db.fetchall("SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a "
                           "ON a.oid = c.relam WHERE c.relkind = 'i'")
    return {names[n]: str(m) for n, m in rows if n in names}


def rows(i: int) -> dict[str, Any]:
    return {"name": f"listing {i}", "city": CITIES[i % 4], "price": float(i % 50),
            "listed": dt.date(2026, 1, 1) + dt.timedelta(days=i % 30),
            "kind": ("flat", "room")[i % 2], "tags": [f"t{i % 3}"]}


def answers(mem: Memory, type_name: str) -> list[Any]:
    """What filtered queries and searches of a listing type answer (IDs, in order)."""
    out: list[Any] = []
    for where in ({"city": "上海"}, {"city": {"$in": ["Paris", "Lyon"]}},
                  {"price": {"$lt": 10}}, {"listed": {"$gte": "2026-01-20"}},
                  {"kind": "room", "city": {"$ne": "Paris"}}):
        out.append(sorted(e.data.name for e in mem.query(type_name, where, limit=500).items))
        hits = mem.search(type_name, "listing in Shanghai", where=where, k=7).hits
        # ties go by ID, and the two types' IDs differ: equal scores in name order
        out.append(sorted(((h.entity.data.name, round(h.score, 6)) for h in hits),
                          key=lambda hit: (-hit[1], hit[0])))
    return out


def test_indexed_fields_have_an_index_and_answer_as_unindexed_ones(mem: Memory) -> None:
    listing = mem.define(Listing, identity=["name"], embed="{name} in {city}")
    mem.define(Plain, identity=["name"], embed="{name} in {city}")
    assert {f for f, s in listing.fields.items() if s.indexed} == INDEXED
    found = indexes(mem, listing)
    assert set(found) == expected(mem)
    if mem._store.db.dialect.name == "postgresql":
        # text by hash (a B-tree refuses entries over ~2.7 KB), the others by B-tree
        assert found == {"city": "hash", "price": "btree", "listed": "btree", "kind": "btree"}
    for name in ("Listing", "Plain"):
        ids = [e.id for e in mem.create_many(name, [rows(i) for i in range(120)])]
        mem.update(ids[3], {"city": "上海", "price": 1.5})
        mem.delete(ids[4])
        mem.delete(ids[8])
        mem.restore(ids[8])
    assert answers(mem, "Listing") == answers(mem, "Plain")
    # a text far longer than a B-tree entry may be is stored under the hash index
    long = mem.create("Listing", {**rows(999), "city": "长" * 5000})
    assert mem.query("Listing", {"city": "长" * 5000}).items[0].id == long.id
    assert mem.verify_audit().ok


def test_the_flag_is_a_new_version_and_makes_or_drops_the_index(mem: Memory) -> None:
    plain = mem.define(Plain, name="Listing", identity=["name"])
    ids = [e.id for e in mem.create_many("Listing", [rows(i) for i in range(40)])]
    assert indexes(mem, plain) == {}
    indexed = mem.define(Listing, identity=["name"])
    assert indexed.version == 2 and set(indexes(mem, indexed)) == expected(mem)
    assert mem.define(Listing, identity=["name"]).version == 2  # the same definition: no change
    unindexed = mem.define(Plain, name="Listing", identity=["name"])
    assert unindexed.version == 3 and indexes(mem, unindexed) == {}
    assert [e.id for e in mem.query("Listing", {"city": "Paris"}, limit=100).items] == sorted(
        ids[i] for i in range(2, 40, 4))
    defines = [e for e in mem.events() if e.op == "define" and e.type == "Listing"]
    assert [(e.version_before, e.version_after) for e in defines] == [(None, 1), (1, 2), (2, 3)]
    assert defines[1].after["fields"]["city"]["indexed"] is True
    assert mem.verify_audit().ok


def test_indexing_after_changing_its_rows_in_one_transaction_is_refused(mem: Memory) -> None:
    mem.define(Plain, name="Listing", identity=["name"])
    first = mem.create("Listing", rows(1))
    before = mem.get_type("Listing").version

    def change_then_index() -> None:
        with mem.transaction():
            mem.update(first.id, {"price": 2.0})
            mem.define(Listing, identity=["name"])

    assert_unchanged(mem, change_then_index, SchemaError, match="transaction of its own")
    assert mem.get_type("Listing").version == before
    assert mem.define(Listing, identity=["name"]).version == before + 1


@pytest.mark.parametrize(("fields", "field"), [
    ({"tags": {"type": "list", "item": "str", "indexed": True}}, "fields.tags.indexed"),
    ({"doc": {"type": "json", "indexed": True}}, "fields.doc.indexed"),
    ({"city": {"type": "str", "indexed": "yes"}}, "fields.city.indexed"),
    ({"city": {"type": "str", "indexed": 1}}, "fields.city.indexed"),
])
def test_a_bad_indexed_flag_is_refused_and_changes_nothing(
        door: MemoryAPI, fields: dict[str, Any], field: str) -> None:
    info = assert_unchanged(door, lambda: door.define_type({"name": "Bad", "fields": fields}),
                            SchemaError)
    assert info.value.field == field


def test_a_bad_indexed_flag_on_a_model_is_refused(door: MemoryAPI) -> None:
    class Tagged(BaseModel):
        tags: list[str] = Field([], json_schema_extra={"indexed": True})

    class Flagged(BaseModel):
        city: str = Field(json_schema_extra={"indexed": "yes"})

    for model, field in ((Tagged, "fields.tags.indexed"), (Flagged, "fields.city.indexed")):
        info = assert_unchanged(door, lambda m=model: door.define(m), SchemaError)
        assert info.value.field == field


def test_a_bundle_carries_the_indexes(mem: Memory, tmp_path: Path, engine: str,
                                      request: pytest.FixtureRequest) -> None:
    """Exported and imported into the other engine and back, the type keeps its indexes."""
    listing = mem.define(Listing, identity=["name"], embed="{name} in {city}")
    mem.create_many("Listing", [rows(i) for i in range(30)])
    mem.export(tmp_path / "b.jsonl")
    other = tmp_path / "copy" if engine == "postgresql" else \
        request.getfixturevalue("pg_server").fresh()
    with Memory.import_bundle(tmp_path / "b.jsonl", other, embedder=HashEmbedder()) as copy:
        assert set(indexes(copy, copy.get_type("Listing"))) == expected(copy)
        assert set(indexes(mem, listing)) == expected(mem)
        assert answers(copy, "Listing") == answers(mem, "Listing")
