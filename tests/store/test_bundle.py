"""Export to a bundle and import it back: the same store, checked whole before any write."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import Conflict, Memory, ValidationError
from dmf_hybrid._internal.store.bundle import check_bundle
from tests.conftest import tenant_like
from tests.store import dump_rows, open_memory
from tests.store.test_persistence import _fill, _open_kwargs, _readable_state

#: Tables a bundle leaves out: derived (rebuilt by the memory that opens the import) or the
#: store's own secret; and the hot events table, since an import holds every event hot (the
#: whole log, archived events too, is compared through ``events()``).
DERIVED = {"embeddings", "outbox", "meta", "event_archive", "events"}


MIXED = {"name": "Mixed", "identity": ["n"], "embed": "{n} {words}", "fields": {
    "n": {"type": "int"}, "x": {"type": "float", "required": False},
    "when": {"type": "datetime", "required": False}, "day": {"type": "date", "required": False},
    "days": {"type": "list", "item": "date", "required": False},
    "doc": {"type": "json", "required": False}, "ok": {"type": "bool", "required": False},
    "words": {"type": "list", "item": "str", "required": False}}}


def fill_mixed(mem: Memory) -> None:
    """The type with every kind of column, and rows with empty lists and missing values."""
    mem.define_type(MIXED)
    mem.create_many("Mixed", [
        {"n": 1, "x": 0.5, "when": "2026-01-02T03:04:05.678901", "day": "2026-02-03",
         "days": ["2026-01-01", "2026-12-31"], "doc": {"a": [1, {"b": None}], "c": "中"},
         "ok": True, "words": []},
        {"n": 2, "x": 3, "when": None, "day": None, "days": [], "doc": None, "ok": False,
         "words": ["x", "y"]}])


@pytest.fixture
def filled(tmp_path: Path) -> Any:
    mem = open_memory(tmp_path / "m")
    ids = _fill(mem)
    other = tenant_like(mem, "acme", principal="key:00c0ffee")
    other.create("Trip", {"destination": "Paris", "budget": 3})  # the same ID, another tenant
    other.create("Poi", {"name": "东方明珠", "city": "上海", "rating": 4})
    fill_mixed(mem)
    mem.create("Mixed", {"n": 3})
    archive = mem.archive_events(10, tmp_path / "archive")  # archived events travel too
    assert archive.moved == 9
    yield mem, ids
    mem.close()


def _records(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")


@pytest.mark.parametrize("name", ["store.jsonl", "store.jsonl.gz"])
def test_a_bundle_imports_as_the_same_store(filled: Any, tmp_path: Path, name: str) -> None:
    mem, ids = filled
    manifest = mem.export(tmp_path / name)
    report = mem.verify_audit()  # every tenant's chain: the store's last position, newest hash
    assert (manifest.last_seq, manifest.last_hash) == (report.last_seq, report.last_hash)
    assert manifest.counts["event"] == report.events_checked == report.last_seq  # archived too
    with pytest.raises(Conflict):
        mem.export(tmp_path / name)  # never overwrites
    state = _readable_state(mem)
    acme = mem.for_tenant("acme")
    acme_state = [e.model_dump() for e in acme.query("Poi").items]
    rows = {t: r for t, r in dump_rows(mem).items() if t not in DERIVED}
    imported = Memory.import_bundle(tmp_path / name, tmp_path / "imported", **_open_kwargs())
    try:
        assert _readable_state(imported) == state  # IDs, versions, seqs, hashes, types
        assert [e.model_dump() for e in imported.for_tenant("acme").query("Poi").items] \
            == acme_state
        assert [e.model_dump() for e in imported.query("Mixed", order_by="n").items] \
            == [e.model_dump() for e in mem.query("Mixed", order_by="n").items]
        assert {t: r for t, r in dump_rows(imported).items() if t not in DERIVED} == rows
        report = imported.verify_audit()
        assert report.ok and report.last_seq == manifest.last_seq
        assert report.last_hash == manifest.last_hash
        # every entity by ID, by filter and by search
        louvre = imported.get(ids["louvre"])
        assert louvre.data.name == "Louvre" and louvre.version == mem.get(ids["louvre"]).version
        assert [e.id for e in imported.query("Poi", {"city": "Paris"}).items] == [ids["louvre"]]
        assert imported.search("Poi", "Louvre in Paris", k=1).hits[0].entity.id == ids["louvre"]
        assert imported.for_tenant("acme").search("Poi", "东方明珠", k=1).hits[0].entity \
            .data.name == "东方明珠"
        with pytest.raises(Conflict):
            imported.create("Poi", {"name": "Secret", "city": "Nowhere"})  # still burnt
        # it goes on from the same heads
        imported.update(ids["trip"], {"budget": 1})
        assert imported.last_seq() == mem.last_seq() + 1 and imported.verify_audit().ok
        assert imported.verify_audit().last_seq == manifest.last_seq + 1
    finally:
        imported.close()
    with pytest.raises(Conflict):
        Memory.import_bundle(tmp_path / name, tmp_path / "imported", **_open_kwargs())


def _refused(src: Path, dest: Path, match: str) -> ValidationError:
    with pytest.raises(ValidationError, match=match) as caught:
        Memory.import_bundle(src, dest, **_open_kwargs())
    assert not dest.exists()  # nothing written
    return caught.value


def test_a_tampered_event_is_refused_naming_it(filled: Any, tmp_path: Path) -> None:
    mem, ids = filled
    mem.export(tmp_path / "b.jsonl")
    records = _records(tmp_path / "b.jsonl")
    event = next(r for r in records if r.get("k") == "event" and r["row"]["op"] == "update")
    after = json.loads(event["row"]["after"])
    after["data"]["budget"] = 1_000_000
    event["row"]["after"] = json.dumps(after)
    _write(tmp_path / "edited.jsonl", records)
    error = _refused(tmp_path / "edited.jsonl", tmp_path / "x", "payload_hash")
    assert error.details["first_bad_seq"] == event["row"]["seq"]
    # a re-hashed forgery breaks the next link instead
    event = next(r for r in records if r.get("k") == "event" and r["row"]["seq"] == 5)
    event["row"]["actor"] = "mallory"
    _write(tmp_path / "forged.jsonl", records)
    assert _refused(tmp_path / "forged.jsonl", tmp_path / "x", "seq").details["first_bad_seq"] \
        <= event["row"]["seq"]


def test_an_edited_entity_row_is_refused(filled: Any, tmp_path: Path) -> None:
    mem, ids = filled
    mem.export(tmp_path / "b.jsonl")
    records = _records(tmp_path / "b.jsonl")
    row = next(r for r in records if r.get("k") == "entity" and r["row"]["id"] == ids["louvre"])
    row["row"]["rating"] = 1
    _write(tmp_path / "edited.jsonl", records)
    error = _refused(tmp_path / "edited.jsonl", tmp_path / "x", "differs from its last event")
    assert error.details["entity_id"] == ids["louvre"]
    row["row"]["rating"] = 5
    row["row"]["version"] = 7
    _write(tmp_path / "edited.jsonl", records)
    _refused(tmp_path / "edited.jsonl", tmp_path / "x", "version")


def test_edited_ids_and_links_are_refused(filled: Any, tmp_path: Path) -> None:
    mem, ids = filled
    mem.export(tmp_path / "b.jsonl")
    records = _records(tmp_path / "b.jsonl")
    burnt = next(r for r in records if r.get("k") == "id" and r["row"]["id"] == ids["secret"])
    burnt["row"]["erased_seq"] = None  # the erased ID made usable again
    _write(tmp_path / "edited.jsonl", records)
    assert _refused(tmp_path / "edited.jsonl", tmp_path / "x",
                    "ID .* is not as its events").details["entity_id"] == ids["secret"]
    burnt["row"]["erased_seq"] = mem.history(ids["secret"])[-1].seq
    link = next(r for r in records if r.get("k") == "relation")
    link["row"]["to_id"] = ids["gone"]  # a link nobody made
    _write(tmp_path / "edited.jsonl", records)
    _refused(tmp_path / "edited.jsonl", tmp_path / "x", "the link .* is not as its events")


def test_truncated_and_foreign_files_are_refused(filled: Any, tmp_path: Path) -> None:
    mem, _ids = filled
    mem.export(tmp_path / "b.jsonl")
    lines = (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "short.jsonl").write_text("".join(lines[:-1]), encoding="utf-8")
    _refused(tmp_path / "short.jsonl", tmp_path / "x", "truncated")
    (tmp_path / "junk.jsonl").write_text("".join(lines[:3]) + "{not json\n" + "".join(lines[3:]),
                                         encoding="utf-8")
    _refused(tmp_path / "junk.jsonl", tmp_path / "x", "line 4")
    (tmp_path / "other.json").write_text('{"hello": "world"}\n', encoding="utf-8")
    _refused(tmp_path / "other.json", tmp_path / "x", "not a dmf-hybrid bundle")
    _refused(tmp_path / "missing.jsonl", tmp_path / "x", "not a file")
    # a bundle the check passes imports into an empty directory only
    assert check_bundle(tmp_path / "b.jsonl").last_seq == mem.verify_audit().last_seq
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(Conflict):
        Memory.import_bundle(tmp_path / "b.jsonl", tmp_path / "busy", **_open_kwargs())
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"
