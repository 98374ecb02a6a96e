"""Snapshots: a bundle of the whole store, its archive files and its embedding cache in one
directory, restored checked into a new store (the PostgreSQL side is in test_postgres)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from dmf_hybrid import Conflict, Memory, ValidationError
from dmf_hybrid._internal.store.snapshot import BUNDLE, MANIFEST
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.counting import CountingEmbedder
from tests.conftest import tenant_like
from tests.store import dump_rows, open_memory
from tests.store.old_snapshot import write_format_1
from tests.store.test_bundle import DERIVED
from tests.store.test_persistence import _fill, _open_kwargs, _readable_state


@pytest.fixture
def snapshotted(tmp_path: Path) -> Path:
    """A snapshot of a store with a little of everything, in two tenants."""
    mem = open_memory(tmp_path / "m")
    try:
        _fill(mem)
        tenant_like(mem, "acme").create("Poi", {"name": "东方明珠", "city": "上海"})
        mem.snapshot(tmp_path / "snap")
    finally:
        mem.close()
    return tmp_path / "snap"


def _tenant_state(mem: Memory, tenant: str) -> dict[str, object]:
    view = tenant_like(mem, tenant)
    return {"pois": [e.model_dump() for e in view.query("Poi").items],
            "events": [e.model_dump() for e in view.events()]}


def test_snapshot_restores_into_a_new_directory(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        _fill(mem)
        tenant_like(mem, "acme").create("Poi", {"name": "东方明珠", "city": "上海"})
        manifest = mem.snapshot(tmp_path / "snap")
        report = mem.verify_audit()
        assert manifest.format == 2 and manifest.bundle == BUNDLE
        assert (manifest.last_seq, manifest.last_hash) == (report.last_seq, report.last_hash)
        # 26 made, the erased one has no row; one model cached
        assert manifest.counts["entity"] == 25 and len(manifest.embeddings) == 1
        state, tables = _readable_state(mem), dump_rows(mem)
        acme = _tenant_state(mem, "acme")
        with pytest.raises(Conflict):
            mem.snapshot(tmp_path / "snap")  # never overwrites
        assert json.loads((tmp_path / "snap" / MANIFEST).read_text())["last_seq"] \
            == manifest.last_seq
    finally:
        mem.close()
    embedder = CountingEmbedder()
    restored = Memory.restore_snapshot(tmp_path / "snap", tmp_path / "restored",
                                       embedder=embedder, vector_index=ExactIndex())
    try:
        assert embedder.texts == 0  # the vector index is rebuilt from the carried cache
        assert _readable_state(restored) == state  # IDs, versions, seqs, hashes, types
        assert _tenant_state(restored, "acme") == acme
        rows = dump_rows(restored)
        assert {t: r for t, r in rows.items() if t not in DERIVED} \
            == {t: r for t, r in tables.items() if t not in DERIVED}
        assert rows["embeddings"] == tables["embeddings"]
        assert restored.search("Poi", "Louvre", k=1).hits[0].entity.data.name == "Louvre"
        assert restored.verify_audit().ok
        # it continues from the same head
        trip = restored.query("Trip", {"destination": "Paris"}).items[0].id
        restored.update(trip, {"budget": 1})
        assert restored.verify_audit().last_seq == manifest.last_seq + 1
    finally:
        restored.close()
    with pytest.raises(Conflict):
        Memory.restore_snapshot(tmp_path / "snap", tmp_path / "restored", **_open_kwargs())
    with pytest.raises(ValidationError, match="not a dmf-hybrid snapshot"):
        Memory.restore_snapshot(tmp_path / "m", tmp_path / "elsewhere", **_open_kwargs())
    assert not (tmp_path / "elsewhere").exists()


def _refused(snap: Path, match: str) -> ValidationError:
    with pytest.raises(ValidationError, match=match) as caught:
        Memory.restore_snapshot(snap, snap.parent / "restored", **_open_kwargs())
    assert not (snap.parent / "restored").exists()  # nothing written
    return caught.value


def _edit_manifest(snap: Path, **changes: object) -> None:
    path = snap / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_tampered_manifest_is_refused(snapshotted: Path) -> None:
    original = (snapshotted / MANIFEST).read_text()
    manifest = json.loads(original)
    cases = [({"last_seq": manifest["last_seq"] + 1}, "does not match the snapshot manifest"),
             ({"last_hash": "0" * 64}, "does not match the snapshot manifest"),
             ({"bundle": "../m/dmf.duckdb"}, "outside the snapshot"),
             ({"format": 3}, "snapshot format 3"),
             ({"last_seq": "many"}, "unreadable"),
             ({"embeddings": {"embeddings-0.npz": "0" * 64}}, "embedding cache file")]
    for changes, match in cases:
        _edit_manifest(snapshotted, **changes)
        _refused(snapshotted, match)
        (snapshotted / MANIFEST).write_text(original)
    (snapshotted / MANIFEST).write_text("{")
    _refused(snapshotted, "unreadable")


def test_a_tampered_bundle_or_cache_is_refused(snapshotted: Path) -> None:
    manifest = json.loads((snapshotted / MANIFEST).read_text())
    with gzip.open(snapshotted / BUNDLE, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    number, event = next((i, json.loads(line)) for i, line in enumerate(lines)
                         if '"k": "event"' in line and '"op": "update"' in line)
    after = json.loads(event["row"]["after"])
    after["data"]["budget"] = 1_000_000
    event["row"]["after"] = json.dumps(after)
    edited = [*lines[:number], json.dumps(event), *lines[number + 1:]]
    with gzip.open(snapshotted / BUNDLE, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(edited) + "\n")
    error = _refused(snapshotted, "payload_hash")
    assert error.details["first_bad_seq"] == event["row"]["seq"]
    # the cache: its file is checked against the manifest before anything is written
    cache = snapshotted / next(iter(manifest["embeddings"]))
    with np.load(cache) as data:
        parts = {k: data[k] for k in data.files}
    parts["vectors"][0] *= -1
    with cache.open("wb") as out:
        np.savez(out, **parts)
    _refused(snapshotted, "embedding cache file")


def test_a_format_1_snapshot_still_restores(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        _fill(mem)
        state = _readable_state(mem)
        write_format_1(mem, tmp_path / "snap")
    finally:
        mem.close()
    restored = Memory.restore_snapshot(tmp_path / "snap", tmp_path / "restored",
                                       **_open_kwargs())
    try:
        assert _readable_state(restored) == state and restored.verify_audit().ok
    finally:
        restored.close()
