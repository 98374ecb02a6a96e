"""A tenant's bundle: its types, rules, entities, relations and audit chain alone, checked
whole and imported as a store of that tenant with the same IDs, seqs and hashes (both
engines; the export's arguments through both doors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, NotFound, ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import tenant_like
from tests.store import assert_unchanged, behind, both_doors, open_door

door = both_doors("door")


def _fill(mem: Memory) -> tuple[Memory, Memory]:
    """Two tenants writing in turns; b links, deletes and erases too."""
    b = tenant_like(mem, "b")
    for i in range(4):
        mem.create("Poi", {"name": f"a{i}", "city": "Paris"})
        b.create("Poi", {"name": f"b{i}", "city": "上海"})
    trip = b.create("Trip", {"destination": "上海"})
    b.link(trip.id, "includes", b.query("Poi", {"name": "b0"}).items[0].id)
    b.delete(b.query("Poi", {"name": "b1"}).items[0].id)
    b.erase(b.query("Poi", {"name": "b2"}).items[0].id)
    return mem, b


def test_a_tenants_bundle_imports_as_a_store_of_that_tenant(mem: Memory, tmp_path: Path
                                                            ) -> None:
    a, b = _fill(mem)
    manifest = mem.export(tmp_path / "b.jsonl.gz", tenant="b")
    assert manifest.tenant == "b" and manifest.counts["event"] == b.last_seq()
    assert (manifest.last_seq, manifest.last_hash) == (b.last_seq(), b.events()[-1].hash)
    assert manifest.counts["entity"] == len(b.query("Poi").items) + 1 + 1  # + trip + deleted
    with Memory.import_bundle(tmp_path / "b.jsonl.gz", tmp_path / "imported",
                              embedder=HashEmbedder(), vector_index=ExactIndex()) as imported:
        moved = imported.for_tenant("b")
        assert moved.events(limit=1000) == b.events(limit=1000)  # same seqs and hashes
        assert [e.model_dump() for e in moved.query("Poi").items] == [
            e.model_dump() for e in b.query("Poi").items]
        trip = b.query("Trip").items[0].id
        assert [r.model_dump() for r in moved.related(trip)] == [
            r.model_dump() for r in b.related(trip)]
        assert moved.search("Poi", "b3 上海", k=1).hits[0].entity.data.name == "b3"
        report = imported.verify_audit()
        assert report.ok and report.chains == 1 and report.events_checked == b.last_seq()
        assert imported.types() == [] and imported.last_seq() == 0  # nothing of tenant a
        moved.create("Poi", {"name": "next", "city": "上海"})
        assert moved.last_seq() == b.last_seq() + 1 and imported.verify_audit().ok
    assert a.last_seq() > 0  # the source is untouched


def test_a_tenants_bundle_with_another_tenants_record_is_refused(mem: Memory,
                                                                tmp_path: Path) -> None:
    _fill(mem)
    mem.export(tmp_path / "b.jsonl", tenant="b")
    lines = (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if json.loads(line).get("k") == "id")
    record = json.loads(lines[number])
    record["row"]["tenant"] = "default"
    lines[number] = json.dumps(record, ensure_ascii=False) + "\n"
    (tmp_path / "edited.jsonl").write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValidationError, match=f"line {number + 1}: a record of tenant default"):
        Memory.import_bundle(tmp_path / "edited.jsonl", tmp_path / "x", embedder=HashEmbedder())
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_a_tenants_bundle_is_asked_for_by_a_valid_tenant_with_something(door: MemoryAPI,
                                                                       tmp_path: Path) -> None:
    mem = behind(door)
    for bad, error in (("no tenant!", ValidationError), ("nobody", NotFound)):
        def export(bad: str = bad) -> object:
            return door.export("t.jsonl" if door is not mem else tmp_path / "t.jsonl",
                               tenant=bad)
        info = assert_unchanged(door, export, error)
        assert info.value.details["field"] == "tenant"  # type: ignore[attr-defined]
    assert not (tmp_path / "t.jsonl").exists()


def test_a_tenants_bundle_over_http_names_the_tenant(tmp_path: Path) -> None:
    with open_door("http", tmp_path / "m") as client:
        client.create("Poi", {"name": "Louvre", "city": "Paris"})
        manifest = client.export("mine.jsonl", tenant="default")
        assert manifest.tenant == "default" and manifest.path == "exports/mine.jsonl"
        assert manifest.last_seq == client.last_seq() == manifest.counts["event"]
