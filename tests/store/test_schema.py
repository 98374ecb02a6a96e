"""Schemas: TOML and Python types behave the same; the registry keeps versions; migrations."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import Memory, SchemaError, TypeDef
from dmf_hybrid._internal.schema import load_toml
from tests.conftest import INDEXES, define_travel
from tests.store import assert_unchanged, open_memory

# ---------------------------------------------------------------- the e-commerce domain in Python


class Customer(BaseModel):
    """A customer of the shop."""

    email: str
    name: str | None = None
    tier: Literal["standard", "silver", "gold"] | None = "standard"
    notes: str | None = None


class Order(BaseModel):
    """An order with its status and total."""

    order_number: str
    placed_at: dt.datetime | None = None
    status: Literal["placed", "paid", "shipped", "delivered", "returned", "cancelled"] | None = (
        "placed")
    total: float | None = 0.0
    currency: str | None = "EUR"
    notes: str | None = None


class Product(BaseModel):
    """A product in the catalogue."""

    sku: str
    name: str
    category: str | None = None
    description: str | None = None
    price: float | None = 0.0
    tags: list[str] = Field(default_factory=list)


class ShippingEvent(BaseModel):
    """A carrier scan or delivery event of an order."""

    order_number: str
    carrier: str
    status: Literal["label_created", "in_transit", "out_for_delivery", "delivered", "exception"]
    happened_at: dt.datetime
    location: str | None = None
    details: str | None = None


def define_ecommerce_in_python(mem: Memory) -> None:
    """The ecommerce types in one transaction: Customer's relation targets Order, defined
    after it (a relation's target must exist when the transaction commits)."""
    with mem.transaction():
        mem.define(Customer, identity=["email"], embed="{name} <{email}> tier {tier}: {notes}",
                   relations={"owns": {"target": "Order", "cardinality": "many",
                                       "description": "Orders the customer placed."}})
        mem.define(Order, identity=["order_number"],
                   embed="Order {order_number} ({status}) total {total} {currency}: {notes}",
                   relations={"contains": {"target": "Product"},
                              "shipped_by": {"target": "ShippingEvent"}})
        mem.define(Product, identity=["sku"], embed="{name} ({category}): {description}")
        mem.define(ShippingEvent, identity=["order_number", "carrier", "happened_at", "status"],
                   embed="{carrier} {status} at {location}: {details}")


SAMPLE: dict[str, dict[str, Any]] = {
    "Customer": {"email": "ana@example.com", "name": "Ana", "tier": "gold"},
    "Order": {"order_number": "A-1", "placed_at": dt.datetime(2025, 3, 1, 9, 30, tzinfo=dt.UTC),
              "total": 12.5},
    "Product": {"sku": "SKU-1", "name": "Kettle", "tags": ["kitchen", "steel"]},
    "ShippingEvent": {"order_number": "A-1", "carrier": "DHL", "status": "in_transit",
                      "happened_at": dt.datetime(2025, 3, 2, 8, 0, tzinfo=dt.UTC)},
}


def test_toml_and_python_types_are_the_same(tmp_path: Path) -> None:
    py_mem, toml_mem = open_memory(tmp_path / "py"), open_memory(tmp_path / "toml")
    try:
        define_ecommerce_in_python(py_mem)
        toml_mem.load_definitions(INDEXES / "ecommerce.toml")
        assert [t.typedef for t in py_mem.types()] == [t.typedef for t in toml_mem.types()]
        for name, data in SAMPLE.items():
            a, b = py_mem.create(name, data), toml_mem.create(name, data)
            assert a.id == b.id
            assert a.fields() == b.fields()
            assert py_mem.get(a.id).fields() == toml_mem.get(b.id).fields()
            cols = f'DESCRIBE "ent_{name}"'
            assert py_mem._store.db.fetchall(cols) == toml_mem._store.db.fetchall(cols)
        order_id = py_mem.create("Order", SAMPLE["Order"]).id
        assert py_mem.query("Order", {"placed_at": {"$gte": dt.datetime(2025, 3, 1)}}
                            ).items[0].id == order_id
        assert toml_mem.query("Order", {"placed_at": {"$gte": dt.datetime(2025, 3, 1)}}
                              ).items[0].id == order_id
    finally:
        py_mem.close()
        toml_mem.close()


def test_both_example_domains_load_and_define_type_takes_data(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        travel = [t.name for t in mem.load_definitions(INDEXES / "travel.toml")]
        assert travel[:4] == ["User", "Trip", "PointOfInterest", "Constraint"]
        assert [t.name for t in load_toml(INDEXES / "travel.toml")] == travel
        defines = [e.type for e in mem.events() if e.op == "define"]
        assert defines == travel  # one define event per type
        (typedef,) = [t for t in load_toml(INDEXES / "ecommerce.toml") if t.name == "Product"]
        etype = mem.define_type(typedef.model_dump())
        assert etype.typedef == typedef
        assert mem.get_type("Product").version == 1
        user = mem.create("User", {"handle": "ana", "interests": ["museums"]})
        trip = mem.create("Trip", {"user": "ana", "destination": "Paris",
                                   "start_date": "2025-05-01"})
        assert mem.link(user.id, "plans", trip.id)
        assert trip.data.start_date == dt.date(2025, 5, 1)
    finally:
        mem.close()


def test_defining_the_same_type_again_is_a_no_op(mem: Memory) -> None:
    before_seq = mem.last_seq()
    etype = mem.get_type("Poi")
    from tests.conftest import Poi

    again = mem.define(Poi, identity=["name", "city"], embed="{name} in {city}")
    assert again.version == etype.version == 1
    assert mem.last_seq() == before_seq


class PoiV2(BaseModel):
    """A point of interest."""

    name: str
    city: str
    cost: float = 0
    rating: int | None = None
    country: str = "FR"
    opening: str | None = None
    kind: Literal["museum", "park"] | None = None


def test_adding_fields_is_an_online_migration(mem: Memory) -> None:
    old = mem.create("Poi", {"name": "Louvre", "city": "Paris", "cost": 17})
    deleted = mem.create("Poi", {"name": "Gone", "city": "Paris"})
    mem.delete(deleted.id)
    seq_before = mem.last_seq()
    v2 = mem.define(PoiV2, name="Poi", identity=["name", "city"], embed="{name} in {city}")
    assert v2.version == 2
    assert mem.last_seq() == seq_before + 1
    (event,) = mem.events(since_seq=seq_before)
    assert (event.op, event.type, event.version_before, event.version_after) == (
        "define", "Poi", 1, 2)
    assert event.meta == {"added_fields": ["country", "opening", "kind"]}
    versions = mem._store.db.fetchall(
        "SELECT name, version FROM schema_types WHERE name = 'Poi' ORDER BY version")
    assert versions == [("Poi", 1), ("Poi", 2)]

    # old rows read with the default, live and through time travel
    got = mem.get(old.id)
    assert (got.data.country, got.data.opening, got.version) == ("FR", None, 1)
    assert mem.get(old.id, as_of=seq_before).data.country == "FR"
    page = mem.query("Poi", {"country": "FR"}, as_of=seq_before)
    assert [e.id for e in page.items] == [old.id]
    assert mem.query("Poi", {"country": "FR"}).items[0].id == old.id
    assert mem.count("Poi", {"opening": None}) == 1
    mem.restore(deleted.id)
    assert mem.get(deleted.id).data.country == "FR"

    new = mem.create("Poi", {"name": "Prado", "city": "Madrid", "country": "ES",
                             "kind": "museum"})
    assert mem.get(new.id).data.country == "ES"
    # the identity did not change, so the same data still maps to the same ID
    assert mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id == old.id
    assert mem.verify_audit().ok


def test_adding_enum_values_is_compatible(mem: Memory) -> None:
    class Trip(BaseModel):
        destination: str
        budget: float = 0
        status: Literal["planned", "booked", "done", "cancelled"] = "planned"
        tags: list[str] = Field(default_factory=list)
        start: dt.date | None = None

    etype = mem.define(Trip, identity=["destination"], embed="Trip to {destination} {tags}",
                       relations={"includes": {"target": "Poi"},
                                  "next": {"target": "Trip", "cardinality": "one"}})
    assert etype.version == 2
    assert mem.create("Trip", {"destination": "Oslo", "status": "cancelled"}).created


@pytest.fixture(scope="module")
def schema_mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """The travel types and one Poi, shared by the cases that must change nothing."""
    mem = open_memory(Path(tmp_path_factory.mktemp("schema")) / "mem")
    define_travel(mem)
    mem.create("Poi", {"name": "Louvre", "city": "Paris"})
    yield mem
    mem.close()


def _poi_variant(**overrides: object) -> type[BaseModel]:
    """A Poi model with some fields replaced (None drops the field)."""
    fields: dict[str, object] = {"name": (str, ...), "city": (str, ...), "cost": (float, 0),
                                 "rating": (int | None, None)}
    for key, value in overrides.items():
        if value is None:
            fields.pop(key)
        else:
            fields[key] = value
    from pydantic import create_model

    return create_model("Poi", **fields)  # type: ignore[call-overload,no-any-return]


@pytest.mark.parametrize(("model", "identity", "reason"), [
    (_poi_variant(rating=None), ["name", "city"], "field 'rating' was removed"),
    (_poi_variant(cost=(str, "0")), ["name", "city"], "field 'cost' changed type float -> str"),
    (_poi_variant(rating=(int, ...)), ["name", "city"], "field 'rating' became required"),
    (_poi_variant(rating=(int, 0)), ["name", "city"], "field 'rating' became non-nullable"),
    (_poi_variant(extra=(str, ...)), ["name", "city"],
     "new field 'extra' is required and has no default"),
    (_poi_variant(), ["name"], "identity fields changed"),
])
def test_incompatible_changes_are_refused_and_change_nothing(
        schema_mem: Memory, model: type[BaseModel], identity: list[str], reason: str) -> None:
    mem = schema_mem
    info = assert_unchanged(
        mem, lambda: mem.define(model, identity=identity, embed="{name} in {city}"),
        SchemaError, match="incompatible change to Poi")
    assert reason in str(info.value)
    assert any(reason in r for r in info.value.details["reasons"])  # type: ignore[attr-defined]
    assert mem.get_type("Poi").version == 1


def test_incompatible_relation_and_enum_changes_are_refused(mem: Memory) -> None:
    trip = mem.get_type("Trip").typedef
    narrower_enum = trip.model_copy(update={"fields": {
        **trip.fields, "status": trip.fields["status"].model_copy(update={"values": ("planned",)})
    }})
    assert_unchanged(mem, lambda: mem.define_type(narrower_enum), SchemaError,
                     match="enum 'status' dropped values")
    no_relation = trip.model_copy(update={"relations": {"includes": trip.relations["includes"]}})
    assert_unchanged(mem, lambda: mem.define_type(no_relation), SchemaError,
                     match="relation 'next' was removed")
    retarget = trip.model_copy(update={"relations": {
        **trip.relations, "includes": trip.relations["includes"].model_copy(
            update={"target": "Trip"})}})
    assert_unchanged(mem, lambda: mem.define_type(retarget), SchemaError,
                     match="relation 'includes' changed target")


@pytest.mark.parametrize(("definition", "match"), [
    ({"name": "lower", "fields": {"a": {}}}, "type name"),
    ({"name": "T", "fields": {}}, "declares no fields"),
    ({"name": "T", "fields": {"version": {}}}, "reserved"),
    ({"name": "T", "fields": {"Bad-Name": {}}}, "field name"),
    ({"name": "T", "fields": {"a": {"type": "enum"}}}, "needs values"),
    ({"name": "T", "fields": {"a": {"type": "list"}}}, "needs an item type"),
    ({"name": "T", "fields": {"a": {"type": "int", "default": "x"}}}, "does not fit"),
    ({"name": "T", "fields": {"a": {}}, "identity": ["b"]}, "identity field"),
    ({"name": "T", "fields": {"a": {}}, "embed": "{b}"}, "unknown field"),
    ({"name": "T", "fields": {"a": {"type": "blob"}}}, "invalid type definition"),
    ({"name": "Trip'; DROP TABLE events; --", "fields": {"a": {}}}, "type name"),
])
def test_invalid_definitions_are_refused_and_change_nothing(
        schema_mem: Memory, definition: dict[str, object], match: str) -> None:
    assert_unchanged(schema_mem, lambda: schema_mem.define_type(definition), SchemaError,
                     match=match)


def test_unsupported_python_types_are_refused(mem: Memory) -> None:
    class Bad(BaseModel):
        blob: dict[str, int]

    class Union(BaseModel):
        either: int | str

    assert_unchanged(mem, lambda: mem.define(Bad), SchemaError, match="unsupported type")
    assert_unchanged(mem, lambda: mem.define(Union), SchemaError, match="union")
    assert_unchanged(mem, lambda: mem.define(dict), SchemaError)  # type: ignore[arg-type]


def test_type_names_differing_only_in_case_clash(mem: Memory) -> None:
    assert_unchanged(mem, lambda: mem.define_type({"name": "POI", "fields": {"a": {}}}),
                     SchemaError, match="case-insensitive")


def test_load_definitions_is_all_or_nothing(mem: Memory, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[types.Good]\nfields.a = {type = "str"}\n\n'
                   '[types.Poi]\nfields.name = {type = "int"}\n')
    assert_unchanged(mem, lambda: mem.load_definitions(bad), SchemaError)
    assert "Good" not in {t.name for t in mem.types()}
    broken = tmp_path / "broken.toml"
    broken.write_text("[types.X\n")
    assert_unchanged(mem, lambda: mem.load_definitions(broken), SchemaError, match="invalid TOML")
    assert_unchanged(mem, lambda: mem.load_definitions(tmp_path / "missing.toml"), SchemaError,
                     match="not found")


def test_registry_survives_reopen_with_all_versions(tmp_path: Path) -> None:
    first = open_memory(tmp_path / "m")
    define_travel(first)
    first.create("Poi", {"name": "Louvre", "city": "Paris"})
    first.define(PoiV2, name="Poi", identity=["name", "city"], embed="{name} in {city}")
    typedef = first.get_type("Poi").typedef
    first.close()
    again = open_memory(tmp_path / "m")
    try:
        assert again.get_type("Poi").version == 2
        assert again.get_type("Poi").typedef == typedef
        assert isinstance(typedef, TypeDef)
        stored = again._store.db.fetchall(
            "SELECT version FROM schema_types WHERE name = 'Poi' ORDER BY version")
        assert stored == [(1,), (2,)]
        (poi,) = again.query("Poi").items
        assert poi.data.country == "FR"
    finally:
        again.close()


class _Note(BaseModel):
    name: str
    city: str


def test_writes_after_a_new_embedded_text_are_queued_after_its_requeue(mem: Memory) -> None:
    """A new embedded text queues every entity of the type again (one event, many outbox
    rows); the next writes queue theirs after them. They were keyed by their events' seqs,
    which the requeue's rows had taken: the next create failed on the outbox's key."""
    mem.define(_Note, name="Note", identity=["name"], embed="{name}")
    for i in range(3):
        mem.create("Note", {"name": f"n{i}", "city": "Paris"})
    mem.define(_Note, name="Note", identity=["name"], embed="{name} in {city}")
    made = mem.create_many("Note", [{"name": "n8", "city": "上海"}, {"name": "n9", "city": "Rome"}])
    single = mem.create("Note", {"name": "n7", "city": "Rome"})
    mem.flush()
    assert mem.search("Note", "n9 in Rome", k=1).hits[0].entity.id == made[1].id
    assert mem.search("Note", "n7 in Rome", k=1).hits[0].entity.id == single.id
    assert mem.verify_audit().ok
