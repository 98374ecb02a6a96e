"""Archiving the audit log to Parquet: as_of, history and verify answer exactly as before."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dmf_hybrid import DMFError, HashEmbedder, Memory, NotFound, ValidationError
from dmf_hybrid._internal.store.archive import archive_files
from tests.lifecycle import open_travel, poi, trip
from tests.store.old_snapshot import write_format_1


def build(mem: Memory) -> list[str]:
    """A history with every kind of event: creates, updates, links, rules, delete, restore."""
    t = trip(mem, budget=100)
    a, b = poi(mem, "Tower", 60), poi(mem, "Museum", 50)
    mem.link(t.id, "includes", a.id)
    mem.link(t.id, "includes", b.id)  # over budget: a rule raises a constraint
    mem.update(t.id, {"budget": 300, "notes": "more money"})
    mem.delete(b.id)
    mem.unlink(t.id, "includes", b.id)
    mem.restore(b.id)
    mem.append(mem.create("User", {"handle": "ann", "name": "Ann"}).id, "interests", ["art"])
    return sorted(r[0] for r in mem._store.db.fetchall("SELECT id FROM entity_index"))


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def answers(mem: Memory, ids: list[str], last: int, step: int = 1) -> dict[str, Any]:
    """as_of reads at every ``step``-th seq and the last, every history, the log up to last."""
    out: dict[str, Any] = {}
    for seq in sorted({*range(0, last + 1, step), last}):
        for eid in ids:
            try:
                out[f"get {eid} @{seq}"] = _dump(mem.get(eid, as_of=seq))
            except NotFound as exc:
                out[f"get {eid} @{seq}"] = exc.message
        for t in ("Trip", "PointOfInterest", "Constraint", "User"):
            page = mem.query(t, limit=100, as_of=seq)
            out[f"query {t} @{seq}"] = [_dump(e) for e in page.items]
        trips = [i for i in ids if i.startswith("Trip_")]
        try:
            out[f"related @{seq}"] = [_dump(r) for r in mem.related(trips[0], direction="both",
                                                                     as_of=seq)]
        except NotFound as exc:
            out[f"related @{seq}"] = exc.message
    for eid in ids:
        out[f"history {eid}"] = [_dump(e) for e in mem.history(eid)]
    out["events"] = [_dump(e) for e in mem.events(0, last, limit=10_000)]
    return out


def answers_subset(full: dict[str, Any], last: int, step: int) -> dict[str, Any]:
    """The entries of ``answers(..., step=2)`` that ``answers(..., step)`` also has."""
    keep = {f"@{s}" for s in {*range(0, last + 1, step), last}}
    return {k: v for k, v in full.items() if "@" not in k or k[k.index("@"):] in keep}


def test_archive_round_trip(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        ids = build(mem)
        last = mem.last_seq()
        middle = mem.events(0, last)[last // 2].ts
        before = answers(mem, ids, last, step=2)  # every other seq and the last: fast enough
        report = mem.verify_audit()
        trip_id = next(i for i in ids if i.startswith("Trip_"))
        at_time = _dump(mem.get(trip_id, as_of=middle + dt.timedelta(microseconds=1)))

        first = mem.archive_events(last // 2, tmp_path / "archive")
        second = mem.archive_events(last - 3, tmp_path / "archive")
        assert first.moved == last // 2 - 1 and first.file is not None
        assert second.file is not None and second.file.first_seq == last // 2
        assert mem._store.db.fetchone("SELECT min(seq) FROM events")[0] == last - 3
        assert answers(mem, ids, last, step=2) == before
        assert _dump(mem.get(trip_id, as_of=middle + dt.timedelta(microseconds=1))) == at_time
        after = mem.verify_audit()
        assert after.ok and after.events_checked == report.events_checked + 2
        archive_events = mem.events(last)
        assert [e.op for e in archive_events] == ["archive", "archive"]
        assert archive_events[0].after is not None
        assert archive_events[0].after["last_hash"] == before["events"][last // 2 - 2]["hash"]
    finally:
        mem.close()
    mem = open_travel(tmp_path / "mem")  # reopened: the view is rebuilt from the checkpoints
    try:
        assert answers(mem, ids, last, step=4) == answers_subset(before, last, 4)
        assert mem.verify_audit().ok
        mem.update(trip_id, {"notes": "after reopening"})
        assert mem.verify_audit().ok
    finally:
        mem.close()


def test_archive_everything_keeps_the_head(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        ids = build(mem)
        last = mem.last_seq()
        before = answers(mem, ids, last, step=5)
        result = mem.archive_events(10**9, tmp_path / "archive")
        assert result.moved == last and result.seq == last + 1
        assert mem._store.db.fetchall("SELECT seq FROM events") == [(last + 1,)]
        assert answers(mem, ids, last, step=5) == before
        hits = mem.search("PointOfInterest", "tower", k=2)
        assert hits.receipt.resolved_at_seq == mem.last_seq()
        assert mem.archive_events(10**9, tmp_path / "archive").moved == 1  # the archive event
        assert mem.verify_audit().ok
    finally:
        mem.close()


@pytest.mark.parametrize("fmt", [2, 1])
def test_snapshot_carries_the_archive(tmp_path: Path, fmt: int) -> None:
    """A snapshot restores with the same archive layout (the archived events out of the hot
    table, read from the files it carried); format 1 (DuckDB's own files) still restores."""
    mem = open_travel(tmp_path / "mem")
    try:
        ids = build(mem)
        last = mem.last_seq()
        before = answers(mem, ids, last, step=5)
        mem.archive_events(last - 2, tmp_path / "archive")
        hot = mem._store.db.fetchall("SELECT tenant, seq, hash FROM events ORDER BY pos")
        checkpoints = [f.model_dump(exclude={"file"}) for f in archive_files(mem._store)]
        if fmt == 2:
            assert mem.snapshot(tmp_path / "snap").archives
        else:
            write_format_1(mem, tmp_path / "snap")
    finally:
        mem.close()
    shutil.rmtree(tmp_path / "archive")  # the snapshot must not need the original files
    shutil.rmtree(tmp_path / "mem")
    restored = Memory.restore_snapshot(tmp_path / "snap", tmp_path / "restored",
                                       embedder=HashEmbedder())
    try:
        assert answers(restored, ids, last, step=5) == before
        assert restored.verify_audit().ok
        assert restored._store.db.fetchall(
            "SELECT tenant, seq, hash FROM events ORDER BY pos") == hot
        files = archive_files(restored._store)
        assert [f.model_dump(exclude={"file"}) for f in files] == checkpoints
        assert all(not Path(f.file).is_absolute() for f in files)
        assert all((tmp_path / "restored" / f.file).is_file() for f in files)
    finally:
        restored.close()


def test_a_copied_data_directory_reads_and_verifies_its_own_archives(tmp_path: Path) -> None:
    """Archives under the data directory are recorded relative to it: a copy reads its own
    files, and keeps verifying once the original is gone."""
    mem = open_travel(tmp_path / "mem")
    try:
        ids = build(mem)
        last = mem.last_seq()
        before = answers(mem, ids, last, step=5)
        mem.archive_events(last // 2, tmp_path / "mem" / "archives" / "cold")
        mem.archive_events(last - 2, tmp_path / "mem" / "archives" / "cold")
        entries = [f.file for f in archive_files(mem._store)]
        assert entries and all(e.startswith("archives/cold/events-") for e in entries)
    finally:
        mem.close()
    shutil.copytree(tmp_path / "mem", tmp_path / "copy")
    shutil.rmtree(tmp_path / "mem")
    copy = open_travel(tmp_path / "copy")
    try:
        assert copy.verify_audit().ok
        assert answers(copy, ids, last, step=5) == before
        copy.erase(next(i for i in ids if i.startswith("User_")))  # rewrites a copied archive
        assert copy.verify_audit().ok
        assert all((tmp_path / "copy" / f.file).is_file() for f in archive_files(copy._store))
    finally:
        copy.close()


def test_absolute_archive_entries_inside_the_directory_become_relative(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        build(mem)
        result = mem.archive_events(8, tmp_path / "mem" / "archives" / "a")
        assert result.file is not None
        absolute = str((tmp_path / "mem" / result.file.file).resolve())
        with mem._store.db.write() as con:  # how a store written before this recorded it
            con.execute("UPDATE event_archive SET file = ?", [absolute])
    finally:
        mem.close()
    mem = open_travel(tmp_path / "mem")
    try:
        assert [f.file for f in archive_files(mem._store)] == [result.file.file]
        assert mem.verify_audit().ok
    finally:
        mem.close()


def test_erase_reaches_the_archive(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        secret = poi(mem, "Secret Hideout", 5, description="the password is swordfish")
        mem.update(secret.id, {"estimated_cost": 6})
        seq = mem.last_seq()
        archived = mem.archive_events(seq + 1, tmp_path / "archive")
        assert archived.file is not None
        old_file = Path(archived.file.file)
        assert mem.get(secret.id, as_of=seq).fields()["description"]
        mem.erase(secret.id)
        assert not old_file.exists()
        with pytest.raises(NotFound):
            mem.get(secret.id, as_of=seq)
        assert all(e.redacted for e in mem.history(secret.id) if e.op in ("create", "update"))
        assert mem.verify_audit().ok
        files = list((tmp_path / "archive").glob("*.parquet"))
        assert len(files) == 1
        leaks = duckdb.execute(f"SELECT count(*) FROM read_parquet('{files[0]}') "
                               "WHERE after LIKE '%swordfish%' OR before LIKE '%swordfish%'"
                               ).fetchall()
        assert leaks == [(0,)]
    finally:
        mem.close()


def test_verify_detects_a_tampered_or_missing_archive(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        build(mem)
        result = mem.archive_events(8, tmp_path / "archive")
        assert result.file is not None
        path = Path(result.file.file)
    finally:
        mem.close()
    forged = tmp_path / "forged.parquet"
    duckdb.execute(f"COPY (SELECT * REPLACE (CASE WHEN seq = 3 THEN 'evil' ELSE reason END "
                   f"AS reason) FROM read_parquet('{path}')) TO '{forged}' (FORMAT parquet)")
    original = path.read_bytes()
    shutil.move(forged, path)
    mem = open_travel(tmp_path / "mem")
    try:
        report = mem.verify_audit()
        assert not report.ok and report.first_bad_seq == 3
    finally:
        mem.close()
    path.unlink()
    mem = open_travel(tmp_path / "mem")
    try:
        report = mem.verify_audit()
        assert not report.ok and report.first_bad_seq == 1
    finally:
        mem.close()
    path.write_bytes(original)
    mem = open_travel(tmp_path / "mem")
    try:
        assert mem.verify_audit().ok
    finally:
        mem.close()


def test_archive_bad_input_changes_nothing(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "mem")
    try:
        build(mem)
        seq = mem.last_seq()
        for bad in (0, -1, "5", True, 2.5):
            with pytest.raises(ValidationError) as info:
                mem.archive_events(bad, tmp_path / "archive")  # type: ignore[arg-type]
            assert info.value.field == "before_seq"
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValidationError):
            mem.archive_events(5, tmp_path / "file")
        with pytest.raises(ValidationError):
            mem.archive_events(5, tmp_path / "it's")
        assert mem.archive_events(1, tmp_path / "archive").moved == 0
        assert mem.last_seq() == seq and mem.verify_audit().ok
        assert not (tmp_path / "archive").exists() or not any((tmp_path / "archive").iterdir())
        with pytest.raises(DMFError):
            with mem.transaction():
                mem.archive_events(5, tmp_path / "archive")
                raise DMFError("roll it back")
        assert not any((tmp_path / "archive").glob("*.parquet"))
        assert mem.last_seq() == seq and mem._store.db.fetchone(
            "SELECT min(seq) FROM events") == (1,)
    finally:
        mem.close()
