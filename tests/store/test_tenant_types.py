"""Each tenant owns its types: the same name with other fields in two tenants, nothing of one
tenant's types visible to another, bundled types per tenant, rules per tenant, and stores
made before (one set of types shared by every tenant) split when opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmf_hybrid import HashEmbedder, Memory, NotFound, SchemaError
from dmf_hybrid._internal.vector.exact import ExactIndex

SHOP_ORDER = {"name": "Order", "identity": ["number"], "embed": "order {number} {item}",
              "fields": {"number": {"type": "int"}, "item": {}, "price": {"type": "float"}}}
TRAVEL_ORDER = {"name": "Order", "identity": ["ref"], "embed": "booking {ref} to {city}",
                "fields": {"ref": {}, "city": {}, "nights": {"type": "int"}}}


@pytest.fixture
def shop_and_travel(mem: Memory) -> tuple[Memory, Memory]:
    shop, travel = mem.for_tenant("shop"), mem.for_tenant("travel")
    shop.define_type(SHOP_ORDER)
    travel.define_type(TRAVEL_ORDER)
    return shop, travel


def test_two_tenants_define_the_same_name_with_other_fields(
        shop_and_travel: tuple[Memory, Memory]) -> None:
    shop, travel = shop_and_travel
    mine = shop.create("Order", {"number": 7, "item": "blue shirt", "price": 19.9})
    theirs = travel.create("Order", {"ref": "SH-1", "city": "上海", "nights": 3})
    assert shop.get_type("Order").fields.keys() == {"number", "item", "price"}
    assert travel.get_type("Order").fields.keys() == {"ref", "city", "nights"}
    assert [e.id for e in shop.query("Order", {"price": {"$gt": 10}}).items] == [mine.id]
    assert [e.id for e in travel.query("Order", {"nights": 3}).items] == [theirs.id]
    for mode in ("vector", "keyword", "hybrid"):
        assert [h.entity.id for h in shop.search("Order", "blue shirt", mode=mode).hits] \
            == [mine.id]
        assert [h.entity.id for h in travel.search("Order", "上海", mode=mode).hits] \
            == [theirs.id]
    # a version of one tenant's type leaves the other's as it was
    shop.define_type({**SHOP_ORDER, "fields": {**SHOP_ORDER["fields"], "size": {}}})
    assert shop.get_type("Order").version == 2 and travel.get_type("Order").version == 1
    assert shop.get(mine.id).data.size is None
    with pytest.raises(SchemaError, match="incompatible"):
        travel.define_type({**TRAVEL_ORDER, "fields": {"ref": {}, "city": {}}})  # its own history
    assert shop.verify_audit().ok


def test_no_tenant_lists_describes_or_infers_another_tenants_types(
        shop_and_travel: tuple[Memory, Memory], mem: Memory) -> None:
    shop, travel = shop_and_travel
    travel.define_type({"name": "Hotel", "fields": {"name": {}}})
    assert [t.name for t in shop.types()] == ["Order"]
    assert [t.name for t in travel.types()] == ["Hotel", "Order"]
    assert "Hotel" not in [t.name for t in mem.types()]
    with pytest.raises(NotFound) as caught:
        shop.get_type("Hotel")
    assert "Hotel" not in caught.value.message.replace("'Hotel'", "")
    assert "(known: Order)" in caught.value.message
    with pytest.raises(NotFound, match="known: Order\\)"):
        shop.create("Hotel", {"name": "x"})
    # names are case-insensitive within a tenant only
    shop.define_type({"name": "HOTEL", "fields": {"title": {}}})
    with pytest.raises(SchemaError, match="clashes"):
        travel.define_type({"name": "HOTEL", "fields": {"title": {}}})
    # a relation targets a type of the defining tenant
    with pytest.raises(SchemaError, match="not a defined type"):
        shop.define_type({"name": "Stay", "fields": {"name": {}},
                          "relations": {"at": {"target": "Hotel"}}})
    assert [t.name for t in shop.types()] == ["HOTEL", "Order"]


def test_bundled_types_are_each_tenants_own(mem: Memory) -> None:
    one, two = mem.for_tenant("one"), mem.for_tenant("two")
    one.add_messages("c1", [{"role": "user", "text": "我的蓝色衬衫到哪了"}])
    assert [t.name for t in one.types()] == ["Message"]
    assert two.types() == []
    two.add_messages("c1", [{"role": "user", "text": "where is my blue shirt"}])
    assert [h.entity.data.text for h in two.search("Message", "blue shirt").hits] \
        == ["where is my blue shirt"]
    assert [h.entity.data.text for h in one.search("Message", "衬衫").hits] \
        == ["我的蓝色衬衫到哪了"]


def test_a_rule_belongs_to_its_tenant(mem: Memory) -> None:
    one, two = mem.for_tenant("one"), mem.for_tenant("two")
    trip = {"name": "Trip", "identity": ["destination"],
            "fields": {"destination": {}, "budget": {"type": "float"},
                       "cost": {"type": "float"}}}
    rule = {"name": "over_budget", "condition": "cost > budget",
            "trigger": {"type": "Trip"}, "action": {"kind": "budget", "message": "{value}"}}
    for view in (one, two):
        view.define_type(trip)
    one.define_rule(rule)
    assert [r.name for r in one.rules()] == ["over_budget"] and two.rules() == []
    one.create("Trip", {"destination": "上海", "budget": 5000, "cost": 6000})
    two.create("Trip", {"destination": "上海", "budget": 5000, "cost": 6000})
    assert len(one.query("Constraint").items) == 1
    assert "Constraint" not in [t.name for t in two.types()]


def test_a_store_made_before_types_belonged_to_tenants_is_split_when_opened(
        tmp_path: Path) -> None:
    """The format-3 layout is rebuilt from a store written now (see test_persistence's
    format 1 for the vectors): the other tenant's rows move to its own copy of the type."""
    from tests.store.test_persistence import _to_format_1

    path = tmp_path / "m"
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.define_type(TRAVEL_ORDER)
        mine = mem.create("Order", {"ref": "A", "city": "Paris"}).id
        other = mem.for_tenant("other")
        other.define_type(TRAVEL_ORDER)
        theirs = other.create("Order", {"ref": "B", "city": "上海", "nights": 2}).id
        seq = mem.last_seq()
    _to_format_1(path)
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as again:
        other = again.for_tenant("other")
        assert [t.name for t in other.types()] == ["Order"]
        assert other.get(theirs).data.nights == 2 and again.get(mine).data.city == "Paris"
        assert [h.entity.id for h in other.search("Order", "上海").hits] == [theirs]
        with pytest.raises(NotFound):
            again.get(theirs)
        copied = [e for e in other.events(since_seq=seq) if e.actor == "dmf-store"]
        assert [(e.op, e.type, e.meta["rows_moved"]) for e in copied] == [("define", "Order", 1)]
        assert again.verify_audit().ok


def test_a_rule_of_a_split_type_is_copied_to_each_tenant_that_used_it(tmp_path: Path) -> None:
    """Before types belonged to tenants, a rule on a type ran on every tenant's writes of it:
    the split gives each tenant that used the type its copy of the rule, audited."""
    from tests.store.test_persistence import _to_format_1

    path = tmp_path / "m"
    rule = {"name": "long_stay", "condition": "nights > 7", "trigger": {"type": "Order"},
            "action": {"kind": "time", "message": "{value} nights"}}
    with Memory.open(path, embedder=HashEmbedder()) as mem:
        mem.define_type(TRAVEL_ORDER)
        mem.define_rule(rule)
        mem.create("Order", {"ref": "A", "city": "Paris"})
        other = mem.for_tenant("other")
        other.define_type(TRAVEL_ORDER)
        other.create("Order", {"ref": "B", "city": "上海", "nights": 2})
        seq = other.last_seq() + 1  # after the migration's own event
    _to_format_1(path)
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as again:
        other = again.for_tenant("other")
        assert [r.name for r in other.rules()] == [r.name for r in again.rules()] == ["long_stay"]
        copied = [(e.op, e.type) for e in other.events(since_seq=seq) if e.actor == "dmf-store"]
        # the Constraint type comes with the rule: without it the copy would load disabled
        assert copied == [("define", "Constraint"), ("define", "Order"),
                          ("define_rule", "Order")]
        stay = other.create("Order", {"ref": "C", "city": "Oslo", "nights": 9}).id
        [opened] = other.query("Constraint").items
        assert opened.data.subject == stay and opened.data.kind == "time"
        again.create("Order", {"ref": "D", "city": "Paris", "nights": 8})
        assert len(again.query("Constraint").items) == 1  # each tenant's rule, its writes
        assert len(other.query("Constraint").items) == 1
        assert again.verify_audit().ok

