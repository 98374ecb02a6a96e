"""Each tenant has its own audit seqs and hash chain (both engines): seqs 1, 2, 3... per
tenant whatever the others write, reads pinned to a tenant's own seq, a tenant's chain that
verifies on its own, a store-wide check naming the tenant of a bad event, archives per
tenant, and stores of one chain (format 4 and older) re-chained when opened."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dmf_hybrid import DMFError, HashEmbedder, Memory, NotFound, ValidationError
from dmf_hybrid._internal.store.audit import GENESIS_HASH
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import tenant_like
from tests.store.old_chain import to_one_chain


def _interleaved(mem: Memory) -> tuple[Memory, Memory]:
    """Two tenants writing in turns: a (default) and b."""
    b = tenant_like(mem, "b")
    for i in range(6):
        mem.create("Poi", {"name": f"a{i}", "city": "Paris"})
        b.create("Poi", {"name": f"b{i}", "city": "上海"})
        b.create("Poi", {"name": f"b{i}x", "city": "上海"})
    return mem, b


def test_each_tenant_numbers_its_own_events_and_chains_them(mem: Memory) -> None:
    a, b = _interleaved(mem)
    for view in (a, b):
        events = view.events(limit=1000)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert view.last_seq() == view.seen_seq() == len(events)
        assert events[0].prev_hash == GENESIS_HASH
        assert all(e.prev_hash == p.hash for p, e in zip(events, events[1:], strict=False))
        assert {e.tenant for e in events} == {view.tenant}
    # b wrote twice as many entities, and neither seq tells of the other's writes
    assert len(b.events(limit=1000)) - len(a.events(limit=1000)) == 6
    a_seq = a.last_seq()
    b.create("Poi", {"name": "later", "city": "上海"})
    assert a.last_seq() == a_seq
    # a store-wide check covers both chains
    report = a.verify_audit()
    assert report.ok and report.chains == 2
    assert report.events_checked == a_seq + b.last_seq()


def test_reads_are_pinned_to_the_tenants_own_seq(mem: Memory) -> None:
    a, b = _interleaved(mem)
    first = a.query("Poi", {"name": "a0"}).items[0]
    at = next(e.seq for e in a.events(limit=1000) if e.entity_id == first.id)
    assert [e.data.name for e in a.query("Poi", as_of=at).items] == ["a0"]
    assert a.get(first.id, as_of=at).version == 1
    assert a.search("Poi", "a0 Paris", as_of=at).receipt.resolved_at_seq == at
    assert a.search("Poi", "a0 Paris").receipt.resolved_at_seq == a.last_seq()
    assert b.search("Poi", "b0").receipt.resolved_at_seq == b.last_seq()
    # a seq only the other tenant has reached is past this tenant's newest event
    assert b.last_seq() > a.last_seq()
    with pytest.raises(ValidationError, match="past the newest event") as err:
        a.query("Poi", as_of=b.last_seq())
    assert err.value.field == "as_of"
    with pytest.raises(NotFound):
        b.get(first.id, as_of=b.last_seq())  # never b's


def test_a_bad_event_fails_its_tenants_chain_only(mem: Memory) -> None:
    a, b = _interleaved(mem)
    store = mem._store
    target = b.events(limit=1000)[3]
    with store.db.write() as con:
        con.execute("UPDATE events SET reason = 'edited' WHERE tenant = ? AND seq = ?",
                    [b.tenant, target.seq])
    assert a.reads.tenant_report().ok
    mine = b.reads.tenant_report()
    assert not mine.ok and mine.scope == "tenant" and mine.first_bad_seq == target.seq
    whole = a.verify_audit()
    assert not whole.ok and whole.tenant == "b" and whole.first_bad_seq == target.seq
    assert "hash does not match" in str(whole.problem)


def test_a_tenants_last_events_cut_off_are_found(mem: Memory) -> None:
    a, b = _interleaved(mem)
    last = b.last_seq()
    with mem._store.db.write() as con:
        con.execute("DELETE FROM events WHERE tenant = ? AND seq = ?", [b.tenant, last])
    report = b.reads.tenant_report()
    assert not report.ok and report.first_bad_seq == last and "removed" in str(report.problem)
    whole = a.verify_audit()
    assert not whole.ok and whole.tenant == "b"


def test_archives_are_per_tenant(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        from tests.conftest import define_travel

        define_travel(m)
        a, b = _interleaved(m)
        b_events = b.events(limit=1000)
        erased = a.query("Poi", {"name": "a1"}).items[0].id
        result = a.archive_events(5, tmp_path / "archive")
        assert result.moved == 4 and result.file is not None and result.file.tenant == "default"
        assert result.file.first_seq == 1 and result.file.last_seq == 4
        assert b.events(limit=1000) == b_events  # another tenant's log is not touched
        assert [e.seq for e in a.events(limit=1000)] == list(range(1, a.last_seq() + 1))
        a.erase(erased)  # reaches a's archive file
        assert all(e.redacted for e in a.history(erased) if e.op == "create")
        assert m.verify_audit().ok and a.reads.tenant_report().ok


def _old_store(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A store of two tenants rewritten as format 4 kept it (one chain), and what it held."""
    path = tmp_path / "m"
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        from tests.conftest import define_travel

        define_travel(m)
        a, b = _interleaved(m)
        gone = b.query("Poi", {"name": "b2"}).items[0].id
        b.erase(gone)
        trip = a.create("Trip", {"destination": "Paris"})
        a.link(trip.id, "includes", a.query("Poi", {"name": "a0"}).items[0].id)
        a.delete(a.query("Poi", {"name": "a3"}).items[0].id)
        held = {"a": [e.model_dump() for e in a.query("Poi", limit=100).items],
                "b": [e.model_dump() for e in b.query("Poi", limit=100).items],
                "related": [r.model_dump() for r in a.related(trip.id)],
                "counts": (len(a.events(limit=1000)), len(b.events(limit=1000))),
                "trip": trip.id}
    con = duckdb.connect(str(path / "memory.duckdb"))
    con.execute("BEGIN TRANSACTION")
    held["total"] = to_one_chain(con)
    con.execute("UPDATE meta SET value = '4' WHERE key = 'store_format'")
    con.execute("COMMIT")
    con.close()
    return path, held


def test_a_store_of_one_chain_is_rechained_per_tenant_when_opened(tmp_path: Path) -> None:
    path, held = _old_store(tmp_path)
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        a, b = m, m.for_tenant("b")
        assert [e.model_dump() for e in a.query("Poi", limit=100).items] == held["a"]
        assert [e.model_dump() for e in b.query("Poi", limit=100).items] == held["b"]
        assert [r.model_dump() for r in a.related(held["trip"])] == held["related"]
        report = m.verify_audit()
        assert report.ok and report.chains == 2 and report.events_checked == held["total"] + 2
        for view, count in zip((a, b), held["counts"], strict=True):
            events = view.events(limit=1000)
            assert [e.seq for e in events] == list(range(1, count + 2))
            migrate = events[-1]
            assert migrate.op == "migrate" and migrate.meta is not None
            assert migrate.meta["old_last_seq"] == held["total"]
            # every pinned read of the old events works in the tenant's own seqs
            assert len(view.query("Poi", as_of=count).items) == len(held[
                "a" if view is a else "b"])
        # deletions and erasures keep their (re-numbered) seqs
        assert all(e.redacted for e in b.events(limit=1000) if e.op == "create"
                   and e.after is None)
        a.create("Poi", {"name": "new", "city": "Nice"})
        assert a.reads.tenant_report().ok and m.verify_audit().ok


def test_a_tampered_store_of_one_chain_is_not_rechained(tmp_path: Path) -> None:
    path, _held = _old_store(tmp_path)
    con = duckdb.connect(str(path / "memory.duckdb"))
    con.execute("UPDATE events SET actor = 'mallory' WHERE seq = 7")
    before = con.execute("SELECT count(*), max(seq) FROM events").fetchall()
    con.close()
    with pytest.raises(DMFError, match="does not verify at seq 7"):
        Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
    con = duckdb.connect(str(path / "memory.duckdb"))
    try:  # as it was: the old layout, the old format
        assert con.execute("SELECT count(*), max(seq) FROM events").fetchall() == before
        assert con.execute("SELECT value FROM meta WHERE key = 'store_format'").fetchall() == [
            ("4",)]
    finally:
        con.close()


def test_a_bundle_of_one_chain_imports_rechained(tmp_path: Path) -> None:
    """A one-tenant store's chain is the same in both layouts (same seqs, same hashes): its
    bundle, marked as store format 4, is what that version wrote."""
    with Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        from tests.conftest import define_travel

        define_travel(m)
        for i in range(5):
            m.create("Poi", {"name": f"p{i}", "city": "Paris"})
        m.export(tmp_path / "b.jsonl.gz")
        events = m.events(limit=1000)
    with gzip.open(tmp_path / "b.jsonl.gz", "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    records[0]["store_format"] = 4
    for record in records[1:]:
        if record["k"] == "event":
            del record["row"]["pos"]
    (tmp_path / "old.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    with Memory.import_bundle(tmp_path / "old.jsonl", tmp_path / "imported",
                              embedder=HashEmbedder(), vector_index=ExactIndex()) as imported:
        again = imported.events(limit=1000)
        assert again[:-1] == events and again[-1].op == "migrate"
        assert imported.verify_audit().ok


def test_a_postgresql_store_of_one_chain_is_rechained_when_opened(pg_server: Any) -> None:
    url = pg_server.fresh()
    m = Memory.open(url, embedder=HashEmbedder(), vector_index=ExactIndex())
    from tests.conftest import define_travel

    define_travel(m)
    a, b = _interleaved(m)
    held = {"a": [e.model_dump() for e in a.query("Poi", limit=100).items],
            "b": [e.model_dump() for e in b.query("Poi", limit=100).items],
            "counts": (a.last_seq(), b.last_seq())}
    with m._store.db.write() as con:  # the layout of format 4: one chain for the store
        total = to_one_chain(con)
        con.execute("UPDATE meta SET value = '4' WHERE key = 'store_format'")
    m.close()
    with Memory.open(url, embedder=HashEmbedder(), vector_index=ExactIndex()) as again:
        report = again.verify_audit()
        assert report.ok and report.chains == 2 and report.events_checked == total + 2
        for view, key, count in ((again, "a", held["counts"][0]),
                                 (again.for_tenant("b"), "b", held["counts"][1])):
            assert [e.model_dump() for e in view.query("Poi", limit=100).items] == held[key]
            assert [e.seq for e in view.events(limit=1000)] == list(range(1, count + 2))
            assert view.events(limit=1000)[-1].op == "migrate"
