"""Expiry (TTL): an expired entity is absent from every read before and after the sweep,
present in ``as_of`` reads before its expiry and in the audit log; the sweep is audited and
idempotent; bad ``ttl`` / ``expires_at`` change nothing. Through both front doors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from dmf_hybrid import Memory, MemoryAPI, NotFound, ValidationError
from dmf_hybrid._internal.cli import app
from dmf_hybrid._internal.clock import set_clock
from dmf_hybrid._internal.errors import Conflict, SchemaError
from dmf_hybrid._internal.expiry import EXPIRY_ACTOR
from tests.conftest import tenant_like
from tests.store import assert_unchanged, behind, both_doors, open_memory
from tests.store.old_chain import to_one_chain

mem = both_doors()

START = dt.datetime(2026, 5, 8, 9, 0, tzinfo=dt.UTC)


class Clock:
    """The package clock, frozen at a time the test moves."""

    def __init__(self) -> None:
        self.now = START

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def clock() -> Iterator[Clock]:
    frozen = Clock()
    set_clock(lambda: frozen.now)
    yield frozen
    set_clock(None)


def everywhere(mem: MemoryAPI, eid: str, text: str = "Yu Garden") -> dict[str, bool]:
    """Whether the entity is found by ID, by filter, by count, by search and in context."""
    try:
        mem.get(eid)
        by_id = True
    except NotFound:
        by_id = False
    items = mem.query("Poi", {"city": "Shanghai"}, limit=100).items
    hits = mem.search("Poi", text, k=10).hits
    keyword = mem.search("Poi", text, k=10, mode="keyword").hits
    context = mem.context(query=text, k=10)
    return {
        "id": by_id,
        "filter": any(e.id == eid for e in items),
        "count": mem.count("Poi", {"city": "Shanghai"}) == len(items) and
        any(e.id == eid for e in items),
        "search": any(h.entity.id == eid for h in hits),
        "keyword": any(h.entity.id == eid for h in keyword),
        "context": any(h.id == eid for h in context.hits),
        "overview": context.types.get("Poi") == len(items) and bool(items),
    }


def test_expired_entity_is_absent_before_and_after_the_sweep(mem: MemoryAPI,
                                                             clock: Clock) -> None:
    gone = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"}, ttl=60)
    kept = mem.create("Poi", {"name": "Yu Garden Bazaar", "city": "Shanghai"})
    assert gone.expires_at == START + dt.timedelta(seconds=60)
    assert kept.expires_at is None
    seq_before = mem.last_seq()
    assert all(everywhere(mem, gone.id).values())

    clock.advance(61)  # expired, not yet swept
    assert not any(v for k, v in everywhere(mem, gone.id).items() if k != "overview")
    assert all(everywhere(mem, kept.id, "Yu Garden Bazaar").values())
    with pytest.raises(NotFound, match="expired at"):
        mem.get(gone.id)
    assert mem.get(gone.id, as_of=seq_before).id == gone.id  # before its expiry
    assert mem.query("Poi", {"city": "Shanghai"}, as_of=seq_before).items[0].id in (
        gone.id, kept.id)
    assert mem.count("Poi", {"city": "Shanghai"}, as_of=seq_before) == 2

    assert mem.sweep_expired() == 1
    assert mem.sweep_expired() == 0  # idempotent
    assert not any(v for k, v in everywhere(mem, gone.id).items() if k != "overview")
    events = mem.history(gone.id)
    assert [e.op for e in events] == ["create", "delete"]
    assert events[-1].actor == EXPIRY_ACTOR
    assert "expired at" in (events[-1].reason or "")
    assert mem.get(gone.id, as_of=seq_before).id == gone.id
    assert mem.verify_audit().ok


def test_as_of_after_the_expiry_does_not_see_it(mem: MemoryAPI, clock: Clock) -> None:
    gone = mem.create("Poi", {"name": "Bund", "city": "Shanghai"}, ttl=10)
    clock.advance(20)
    other = mem.create("Poi", {"name": "Jade Temple", "city": "Shanghai"})
    later = mem.last_seq()  # an event written after the expiry
    with pytest.raises(NotFound):
        mem.get(gone.id, as_of=later)
    assert [e.id for e in mem.query("Poi", as_of=later).items] == [other.id]
    assert [h.entity.id for h in mem.search("Poi", "Bund", as_of=later).hits] == [other.id]


def test_update_renews_clears_and_keeps_the_expiry(mem: MemoryAPI, clock: Clock) -> None:
    poi = mem.create("Poi", {"name": "Bund", "city": "Shanghai"}, ttl=60)
    kept = mem.update(poi.id, {"cost": 5})
    assert kept.expires_at == poi.expires_at and kept.version == 2
    renewed = mem.update(poi.id, {}, ttl=dt.timedelta(hours=1))
    assert renewed.expires_at == START + dt.timedelta(hours=1) and renewed.version == 3
    at = START + dt.timedelta(days=2)
    assert mem.update(poi.id, {}, expires_at=at.isoformat()).expires_at == at
    cleared = mem.update(poi.id, {}, ttl="never")
    assert cleared.expires_at is None
    clock.advance(10 * 86_400)
    assert mem.get(poi.id).expires_at is None
    assert mem.sweep_expired() == 0


def test_expired_entity_cannot_be_changed_but_can_be_restored(mem: MemoryAPI,
                                                              clock: Clock) -> None:
    poi = mem.create("Poi", {"name": "Bund", "city": "Shanghai"}, ttl=5)
    clock.advance(5)
    for call in (lambda: mem.update(poi.id, {"cost": 1}), lambda: mem.delete(poi.id)):
        assert_unchanged(mem, call, NotFound, "expired")
    assert_unchanged(mem, lambda: mem.create("Poi", {"name": "Bund", "city": "Shanghai"}),
                     Conflict, "expired")
    restored = mem.restore(poi.id)  # restoring clears an expiry that has come
    assert restored.expires_at is None and mem.get(poi.id).version == restored.version
    swept = mem.create("Poi", {"name": "Jade Temple", "city": "Shanghai"}, ttl=5)
    clock.advance(6)
    assert mem.sweep_expired() == 1
    assert mem.restore(swept.id).expires_at is None
    assert mem.get(swept.id).deleted_at is None


def test_type_default_ttl(tmp_path: Path, clock: Clock) -> None:
    class Reminder(BaseModel):
        text: str

    memory = open_memory(tmp_path / "m")
    try:
        etype = memory.define(Reminder, embed="{text}", ttl=dt.timedelta(minutes=5))
        assert etype.typedef.ttl == 300
        a = memory.create("Reminder", {"text": "call the hotel"})
        b = memory.create("Reminder", {"text": "book the train"}, ttl="never")
        c = memory.create_many("Reminder", [{"text": "pack"}], ttl=30)[0]
        assert a.expires_at == START + dt.timedelta(minutes=5)
        assert b.expires_at is None
        assert c.expires_at == START + dt.timedelta(seconds=30)
        memory.define_type({"name": "Note", "fields": {"text": {"type": "str"}}, "ttl": 60})
        assert memory.create("Note", {"text": "x"}).expires_at == START + dt.timedelta(
            seconds=60)
        for bad in (0, -1, 1e12, "soon"):
            with pytest.raises(SchemaError) as info:
                memory.define_type({"name": "Bad", "fields": {"text": {"type": "str"}},
                                    "ttl": bad})
            assert info.value.details.get("field") == "ttl"
        assert "Bad" not in {t.name for t in memory.types()}
    finally:
        memory.close()


BAD_EXPIRY: list[tuple[dict[str, Any], str]] = [
    ({"ttl": 0}, "ttl"),
    ({"ttl": -5}, "ttl"),
    ({"ttl": 1e12}, "ttl"),
    ({"ttl": float("nan")}, "ttl"),
    ({"ttl": True}, "ttl"),
    ({"ttl": "tomorrow"}, "ttl"),
    ({"ttl": [1]}, "ttl"),
    ({"expires_at": "next week"}, "expires_at"),
    ({"expires_at": "2026-05-08T08:00:00"}, "expires_at"),  # has passed
    ({"expires_at": "3026-05-08T08:00:00"}, "expires_at"),  # absurd
    ({"ttl": 60, "expires_at": "2026-06-01T00:00:00"}, "ttl"),
]


@pytest.mark.parametrize(("kwargs", "field"), BAD_EXPIRY)
def test_bad_expiry_is_a_validation_error_that_changes_nothing(
        mem: MemoryAPI, kwargs: dict[str, Any], field: str) -> None:
    poi = mem.create("Poi", {"name": "Bund", "city": "Shanghai"})
    for call in (lambda: mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"}, **kwargs),
                 lambda: mem.create_many("Poi", [{"name": "Yu", "city": "Shanghai"}],
                                         **kwargs),
                 lambda: mem.update(poi.id, {"cost": 3}, **kwargs)):
        info = assert_unchanged(mem, call, ValidationError)
        assert info.value.details.get("field") == field, info.value  # type: ignore[attr-defined]


def test_empty_update_needs_a_new_expiry(mem: MemoryAPI) -> None:
    poi = mem.create("Poi", {"name": "Bund", "city": "Shanghai"})
    info = assert_unchanged(mem, lambda: mem.update(poi.id, {}), ValidationError)
    assert info.value.details.get("field") == "changes"  # type: ignore[attr-defined]


def test_the_sweep_covers_every_tenant_and_spares_renewed_entities(tmp_path: Path,
                                                                   clock: Clock) -> None:
    root = open_memory(tmp_path / "m")
    try:
        root.define(_Poi, name="Poi", identity=["name"])
        a, b = tenant_like(root, "a"), tenant_like(root, "b")
        ea = a.create("Poi", {"name": "x"}, ttl=10)
        eb = b.create("Poi", {"name": "x"}, ttl=10)
        renewed = b.create("Poi", {"name": "y"}, ttl=10)
        b.update(renewed.id, {}, ttl=3600)
        clock.advance(11)
        assert a.sweep_expired() == 1  # its own tenant only
        assert b.history(eb.id)[-1].op == "create"
        assert root.sweep_every_tenant() == 1
        assert b.history(eb.id)[-1].actor == EXPIRY_ACTOR
        assert b.get(renewed.id).deleted_at is None
        assert a.history(ea.id)[-1].op == "delete"
        assert root.verify_audit().ok
    finally:
        root.close()


class _Poi(BaseModel):
    name: str


def test_a_store_without_expiry_is_migrated_when_opened(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "m"
    memory = open_memory(path)
    memory.define(_Poi, name="Poi", identity=["name"])
    old = memory.create("Poi", {"name": "old"})
    db = memory._store.db
    with db.write() as con:  # the layout of a store written before expiry existed
        con.execute('DROP INDEX "ent_Poi_id"')  # DuckDB drops no column under an index
        con.execute('ALTER TABLE "ent_Poi" DROP COLUMN _expires_at')
        con.execute('CREATE INDEX "ent_Poi_id" ON "ent_Poi" (id)')
        con.execute("UPDATE meta SET value = '2' WHERE key = 'store_format'")
        to_one_chain(con)  # one audit chain for the store, as before format 5
    memory.close()
    memory = open_memory(path)
    try:
        assert memory.get(old.id).expires_at is None
        new = memory.create_many("Poi", [{"name": f"n{i}"} for i in range(10)], ttl=5)
        single = memory.create("Poi", {"name": "single"}, ttl=5)
        clock.advance(6)
        assert [e.id for e in memory.query("Poi").items] == [old.id]
        assert memory.sweep_expired() == len(new) + 1
        assert single.id not in {e.id for e in memory.query("Poi").items}
        assert memory.verify_audit().ok
    finally:
        memory.close()


def test_service_sweeps_on_its_own(tmp_path: Path, clock: Clock) -> None:
    from dmf_hybrid import MemoryClient, Settings
    from dmf_hybrid._internal.api import create_app
    from dmf_hybrid._internal.api.server import serve_in_thread

    memory = open_memory(tmp_path / "m")
    settings = Settings(data_dir=tmp_path / "s", embedder="hash", load_examples=False,
                        expiry_sweep_seconds=0.05)
    try:
        memory.define(_Poi, name="Poi", identity=["name"])
        gone = memory.create("Poi", {"name": "x"}, ttl=1)
        clock.advance(2)
        with serve_in_thread(create_app(settings, memory), timeout=10) as url, \
                MemoryClient(url, timeout=30) as client:
            for _ in range(400):
                if memory.history(gone.id)[-1].op == "delete":
                    break
                import time
                time.sleep(0.05)
            assert memory.history(gone.id)[-1].actor == EXPIRY_ACTOR
            assert client.sweep_expired() == 0
    finally:
        memory.close()


def test_cli_ttl_and_sweep(tmp_path: Path, clock: Clock) -> None:
    data = tmp_path / "cli"
    runner = CliRunner()
    memory = open_memory(data)
    memory.define(_Poi, name="Poi", identity=["name"])
    memory.close()
    made = runner.invoke(app, ["create", "Poi", '{"name": "x"}', "--ttl", "30", "--json",
                               "--data", str(data)])
    assert made.exit_code == 0, made.output
    bad = runner.invoke(app, ["create", "Poi", '{"name": "y"}', "--ttl", "soon",
                              "--data", str(data)])
    assert bad.exit_code != 0 and "ttl" in bad.output
    clock.advance(31)
    swept = runner.invoke(app, ["sweep", "--json", "--data", str(data)])
    assert swept.exit_code == 0, swept.output
    assert '"swept": 1' in swept.output


def test_tools_and_plans_take_a_ttl(tmp_path: Path, clock: Clock) -> None:
    memory: Memory = open_memory(tmp_path / "m")
    try:
        memory.define(_Poi, name="Poi", identity=["name"])
        made: Any = memory.call_tool("create_Poi", {"data": {"name": "x"}, "ttl": 60})
        assert made["expires_at"].startswith("2026-05-08T09:01:00")
        renewed: Any = memory.call_tool("update", {"id": made["id"], "data": {}, "ttl": "never"})
        assert "expires_at" not in renewed
        out: Any = memory.execute_plan([{"op": "create", "type": "Poi", "data": {"name": "y"},
                                    "ttl": 5}])
        assert out.committed
        with pytest.raises(ValidationError):
            memory.execute_plan([{"op": "create", "type": "Poi", "data": {"name": "z"},
                                  "ttl": "soon"}])
        clock.advance(6)
        assert memory.sweep_expired() == 1
        assert behind(memory) is memory
    finally:
        memory.close()
