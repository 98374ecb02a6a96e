"""Tenant isolation: every route probed with the other tenant's IDs and values leaks nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.errors import Conflict, NotFound, ValidationError, VersionConflict
from dmf_hybrid._internal.ids import entity_id
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.reliability_isolation import run_isolation
from evaluation.reliability_service import POI_TYPE, TRIP_TYPE
from tests.conftest import tenant_like


def test_no_route_answers_differently_for_another_tenants_ids(tmp_path: Path) -> None:
    figures = run_isolation(tmp_path, targets=("deleted", "given"))
    assert figures.probes >= 180
    assert figures.problems == []
    assert figures.leaks == 0


@pytest.fixture
def two_tenants() -> tuple[Memory, Memory]:
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    mem.define_type(POI_TYPE)
    return tenant_like(mem, "alpha"), tenant_like(mem, "beta")


def test_another_tenants_derived_id_cannot_be_probed(two_tenants: tuple[Memory, Memory]) -> None:
    """Derived IDs are computable from a fact: claiming one must not tell whether it exists."""
    alpha, beta = two_tenants
    held = alpha.create("Poi", {"name": "Shanghai Museum", "city": "Shanghai"})
    absent = entity_id("Poi", {"name": "Nowhere", "city": "Shanghai"}, "alpha")
    errors = []
    for eid in (held.id, absent):
        with pytest.raises(ValidationError) as info:
            beta.create("Poi", {"name": "mine", "city": "c"}, id=eid)
        errors.append(info.value.message)
    assert errors[0] == errors[1]
    # re-creating one's own entity under its derived ID still works
    assert alpha.create("Poi", {"name": "Shanghai Museum", "city": "Shanghai"},
                        id=held.id).id == held.id


def test_caller_given_ids_are_per_tenant(two_tenants: tuple[Memory, Memory]) -> None:
    alpha, beta = two_tenants
    alpha.create("Poi", {"name": "a", "city": "c"}, id="trip-1")
    assert beta.create("Poi", {"name": "b", "city": "c"}, id="trip-1").tenant == "beta"
    assert alpha.get("trip-1").data.name == "a" and beta.get("trip-1").data.name == "b"


# ---------------------------------------------------------------- one caller-given ID, 3 tenants

TENANTS = ("alpha", "beta", "default")
#: Each tenant's entity "trip-1": same type, same city, different names.
NAMES = {"alpha": "Colosseum arena", "beta": "Harbour lighthouse", "default": "Glacier cabin"}
MODES = ("vector", "keyword", "hybrid")
NO_DRIFT = {"missing": 0, "stale": 0, "orphan": 0}


def _open(path: Path, **settings: object) -> dict[str, Memory]:
    mem = Memory.open(path, embedder=HashEmbedder(), settings=Settings(**settings))
    return {t: mem.for_tenant(t) for t in TENANTS}


def _seed(views: dict[str, Memory]) -> dict[str, int]:
    """Every tenant: Poi trip-1 and other-1, Trip plan-1 including trip-1; the seqs of trip-1."""
    for view in views.values():  # each tenant owns its types
        view.define_type(POI_TYPE)
        view.define_type(TRIP_TYPE)
    created = {}
    for tenant, view in views.items():
        created[tenant] = view.create("Poi", {"name": NAMES[tenant], "city": "Rome",
                                              "tags": [tenant]}, id="trip-1").id
        view.create("Poi", {"name": f"Fountain of {tenant}", "city": "Rome"}, id="other-1")
        view.create("Trip", {"destination": f"Rome with {tenant}"}, id="plan-1")
        assert view.link("plan-1", "includes", "trip-1") is True
    assert set(created.values()) == {"trip-1"}
    return {t: v.history("trip-1")[0].seq for t, v in views.items()}


def _check(views: dict[str, Memory], state: dict[str, dict[str, object]],
           created_seq: dict[str, int]) -> None:
    """Every route of every tenant sees its own trip-1 (or none) and never another's."""
    for me, view in views.items():
        mine = state[me]
        others = {n for t, n in NAMES.items() if t != me} | {
            str(state[t]["name"]) for t in views if t != me}
        own_names = {str(mine["name"]), f"Fountain of {me}"}
        if mine["present"]:
            entity = view.get("trip-1")
            assert (entity.tenant, entity.data.name, entity.version) == (
                me, mine["name"], mine["version"])
        else:
            with pytest.raises(NotFound):
                view.get("trip-1")
        # queries and counts
        items = view.query("Poi", {"city": "Rome"}).items
        assert {(e.tenant, e.data.name) for e in items} <= {(me, n) for n in own_names}
        assert view.count("Poi", {"city": "Rome"}) == len(items) == 1 + bool(mine["present"])
        assert view.query("Poi", {"name": {"$in": sorted(others)}}).items == []
        # searches: every leg and plan, with and without a filter, for every tenant's text
        for text in [*NAMES.values(), str(mine["name"])]:
            for mode in MODES:
                for where in (None, {"city": "Rome"}):
                    hits = view.search("Poi", text, mode=mode, where=where, k=10).hits
                    assert {(h.entity.tenant, h.entity.data.name) for h in hits} <= {
                        (me, n) for n in own_names}, (me, text, mode, where)
                    trip = [h for h in hits if h.entity.id == "trip-1"]
                    if text == mine["name"] and mine["present"]:
                        assert hits[0].entity.id == "trip-1", (me, text, mode, where)
                    assert bool(trip) <= bool(mine["present"])
        related = view.search("Poi", str(mine["name"]), related_to={
            "relation": "includes", "from": "plan-1"}).hits
        assert [(h.entity.tenant, h.entity.data.name) for h in related] == (
            [(me, mine["name"])] if mine["present"] else [])
        # relations, both ways
        assert [(r.entity.tenant, r.entity.data.name) for r in view.related("plan-1")] == (
            [(me, mine["name"])] if mine["present"] else [])
        if mine["present"]:
            back = view.related("trip-1", direction="in")
            assert [(r.entity.tenant, r.entity.id, r.entity.data.destination) for r in back] == [
                (me, "plan-1", f"Rome with {me}")]
        # history: this tenant's events of trip-1 only (creation, link, later changes)
        if mine["erased"]:
            with pytest.raises(NotFound):
                view.get("trip-1", as_of=created_seq[me])
        else:
            events = view.history("trip-1")
            assert {e.tenant for e in events} == {me}
            assert [e.op for e in events] == mine["ops"]
            assert events[0].after is not None and events[0].after["data"]["name"] == NAMES[me]
            # time travel: as it was when created
            old = view.get("trip-1", as_of=created_seq[me])
            assert (old.tenant, old.data.name, old.version) == (me, NAMES[me], 1)
            page = view.query("Poi", {"city": "Rome"}, as_of=created_seq[me])
            assert [(e.tenant, e.data.name) for e in page.items] == [(me, NAMES[me])]
            hits = view.search("Poi", NAMES[me], as_of=created_seq[me]).hits
            assert [(h.entity.tenant, h.entity.data.name) for h in hits] == [(me, NAMES[me])]


def test_one_caller_given_id_in_three_tenants_lives_three_independent_lives(
        tmp_path: Path) -> None:
    path = tmp_path / "mem"
    views = _open(path)
    created_seq = _seed(views)
    state: dict[str, dict[str, object]] = {
        t: {"name": NAMES[t], "version": 1, "present": True, "erased": False,
            "ops": ["create", "link"]} for t in TENANTS}
    _check(views, state, created_seq)

    # an update (with the expected version of each tenant's own entity) touches one tenant
    views["alpha"].update("trip-1", {"cost": 5.0}, expected_version=1)
    views["beta"].update("trip-1", {"name": "Harbour lighthouse north"}, expected_version=1)
    with pytest.raises(VersionConflict):
        views["default"].update("trip-1", {"cost": 1.0}, expected_version=2)
    state["alpha"].update(version=2, ops=["create", "link", "update"])
    state["beta"].update(name="Harbour lighthouse north", version=2,
                         ops=["create", "link", "update"])
    _check(views, state, created_seq)

    # deleting alpha's trip-1 leaves beta's and default's (rows, vectors, keyword index) alone
    views["alpha"].delete("trip-1")
    state["alpha"].update(present=False, version=3, ops=["create", "link", "update", "delete"])
    _check(views, state, created_seq)
    assert views["alpha"].restore("trip-1").version == 4
    state["alpha"].update(present=True, version=4,
                          ops=["create", "link", "update", "delete", "restore"])
    _check(views, state, created_seq)

    # erasing it redacts alpha's history only, and ends alpha's links only
    views["alpha"].erase("trip-1")
    state["alpha"].update(present=False, erased=True)
    _check(views, state, created_seq)
    assert all(e.after is not None for e in views["beta"].history("trip-1")
               if e.op in ("create", "update"))
    with pytest.raises(Conflict):  # alpha's erased ID stays retired, in alpha only
        views["alpha"].create("Poi", {"name": "again", "city": "Rome"}, id="trip-1")
    gamma = tenant_like(views["alpha"], "gamma")
    assert gamma.create("Poi", {"name": "Gamma gate", "city": "Rome"}, id="trip-1").created
    gamma.delete("trip-1")
    assert views["alpha"].verify_audit().ok
    assert {k: getattr(views["alpha"].reconcile(), k) for k in NO_DRIFT} == NO_DRIFT

    # writes whose indexing fails stay in the outbox and are replayed on the next open
    def crash(stage: str) -> None:
        if stage == "before_vector_upsert":
            raise RuntimeError("indexer killed")

    views["beta"].engine.indexer.fault = crash
    views["beta"].update("trip-1", {"name": "Harbour lighthouse south"})
    views["default"].update("trip-1", {"name": "Glacier cabin east"})
    assert views["beta"].engine.indexer.pending() == 2
    state["beta"].update(name="Harbour lighthouse south", version=3,
                         ops=["create", "link", "update", "update"])
    state["default"].update(name="Glacier cabin east", version=2,
                            ops=["create", "link", "update"])
    views["beta"].close()

    # reopened (outbox replayed, mirrors reloaded), and with the ANN plan for every search
    views = _open(path, exact_threshold=0)
    try:
        assert views["beta"].engine.indexer.pending() == 0
        for tenant, view in views.items():
            receipt = view.search("Poi", str(state[tenant]["name"]), mode="vector").receipt
            assert receipt.plan == "ann"
        _check(views, state, created_seq)
        assert {k: getattr(views["beta"].reconcile(), k) for k in NO_DRIFT} == NO_DRIFT
        indexer = views["beta"].engine.indexer
        mine = views["beta"].engine.vectors.records(indexer.collection("Poi"))
        records = views["beta"].engine.vectors.records(
            indexer.collection(views["beta"].get_type("Poi").key))
        # each tenant's type has its collection; the default tenant's vector IDs are its
        # entity IDs, the others' are qualified
        assert "trip-1" in mine and not any("\x1f" in v for v in mine)
        assert "beta\x1ftrip-1" in records and "alpha\x1fother-1" not in records
        assert records["beta\x1ftrip-1"]["tenant"] == "beta"
        assert views["beta"].verify_audit().ok
    finally:
        views["beta"].close()
