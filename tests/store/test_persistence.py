"""Reopen, migrations of older stores, and the one-process-per-directory lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dmf_hybrid import Conflict, DMFError, HashEmbedder, Memory, StoreLocked, ValidationError
from dmf_hybrid._internal.ids import type_key
from dmf_hybrid._internal.store.tables import STORE_FORMAT, table_name
from dmf_hybrid._internal.vector.base import collection_name
from tests.conftest import define_travel, tenant_like
from tests.store import audit_seqs, dump_rows, open_memory
from tests.store.old_chain import to_one_chain
from tests.store.test_schema import PoiV2

ROOT = Path(__file__).resolve().parents[2]


def _fill(mem: Memory) -> dict[str, str]:
    """A little of everything: creates, updates, links, a delete, an erase, a migration."""
    define_travel(mem)
    trip = mem.create("Trip", {"destination": "Paris", "tags": ["art"]}).id
    rome = mem.create("Trip", {"destination": "Rome"}).id
    louvre = mem.create("Poi", {"name": "Louvre", "city": "Paris", "rating": 5}).id
    gone = mem.create("Poi", {"name": "Gone", "city": "Paris"}).id
    secret = mem.create("Poi", {"name": "Secret", "city": "Nowhere"}).id
    mem.create_many("Poi", [{"name": f"p{i}", "city": "Rome"} for i in range(20)])
    mem.update(trip, {"budget": 900}, actor="ana")
    mem.append(trip, "tags", ["food"])
    mem.link(trip, "includes", louvre)
    mem.link(trip, "next", rome)
    mem.delete(gone)
    mem.erase(secret)
    mem.define(PoiV2, name="Poi", identity=["name", "city"], embed="{name} in {city}")
    return {"trip": trip, "rome": rome, "louvre": louvre, "gone": gone, "secret": secret}


def _readable_state(mem: Memory) -> dict[str, object]:
    """Everything a caller can read, without internal bookkeeping."""
    return {
        "types": [(t.name, t.version, t.typedef) for t in mem.types()],
        "trips": [e.model_dump() for e in mem.query("Trip", limit=1000).items],
        "pois": [e.model_dump() for e in mem.query("Poi", limit=1000).items],
        "events": [e.model_dump() for e in mem.events(limit=10_000)],
        "related": [r.model_dump() for r in mem.related(mem.query("Trip", {
            "destination": "Paris"}).items[0].id, depth=2, direction="both")],
    }


def test_everything_is_there_after_reopening(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    ids = _fill(mem)
    state, tables = _readable_state(mem), dump_rows(mem)
    seq = mem.last_seq()
    mem.close()

    again = open_memory(tmp_path / "m")
    try:
        assert _readable_state(again) == state
        assert dump_rows(again) == tables
        assert again.last_seq() == seq
        report = again.verify_audit()
        assert report.ok and report.events_checked == seq
        # seq continues gap-free and the chain links to the old tail
        again.update(ids["trip"], {"status": "booked"})
        assert again.last_seq() == seq + 1
        assert audit_seqs(again) == list(range(1, seq + 2))
        assert again.events(since_seq=seq)[0].prev_hash == report.last_hash
        assert again.verify_audit().ok
        # identities still dedupe, deleted stays deleted, the erased ID stays burnt
        assert again.create("Trip", {"destination": "Paris"}).created is False
        with pytest.raises(Conflict):
            again.create("Poi", {"name": "Gone", "city": "Paris"})
        with pytest.raises(Conflict):
            again.create("Poi", {"name": "Secret", "city": "Nowhere"})
        assert again.get(ids["louvre"]).data.country == "FR"
    finally:
        again.close()


def _open_kwargs() -> dict[str, object]:
    from dmf_hybrid import HashEmbedder
    from dmf_hybrid._internal.vector.exact import ExactIndex

    return {"embedder": HashEmbedder(), "vector_index": ExactIndex()}


def test_opening_a_directory_held_by_another_process_names_url(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        define_travel(mem)
        script = textwrap.dedent(f"""
            from dmf_hybrid import HashEmbedder, Memory, StoreLocked
            from dmf_hybrid._internal.vector.exact import ExactIndex
            try:
                Memory.open({str(tmp_path / "m")!r}, embedder=HashEmbedder(),
                            vector_index=ExactIndex())
            except StoreLocked as exc:
                print(exc.code, exc.status_code)
                print(exc.message)
            else:
                print("opened")
        """)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        assert out.splitlines()[0] == "store_locked 423"
        assert "--url" in out and "another process" in out
        # the holder is unaffected
        assert mem.create("Trip", {"destination": "Paris"}).created
        assert mem.verify_audit().ok
    finally:
        mem.close()


def test_opening_a_directory_twice_in_one_process_is_refused(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        define_travel(mem)
        with pytest.raises(StoreLocked, match="already open in this process"):
            open_memory(tmp_path / "m")
        with pytest.raises(StoreLocked):
            open_memory(tmp_path / "m" / ".." / "m")  # the same directory by another name
        assert mem.create("Trip", {"destination": "Paris"}).created
    finally:
        mem.close()
    # once closed it can be opened again
    again = open_memory(tmp_path / "m")
    assert again.count("Trip") == 1
    again.close()


def test_in_memory_store(tmp_path: Path) -> None:
    mem = Memory.open(None, **_open_kwargs())  # type: ignore[arg-type]
    try:
        define_travel(mem)
        trip = mem.create("Trip", {"destination": "Paris"}).id
        assert mem.get(trip).version == 1 and mem.verify_audit().ok
        other = Memory.open(None, **_open_kwargs())  # type: ignore[arg-type]
        assert other.types() == []  # in-memory stores are independent
        other.close()
    finally:
        mem.close()


def test_open_refuses_a_file_as_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ValidationError, match="not a directory"):
        open_memory(target)


# ---------------------------------------------------------------- store format migrations


def _to_format_1(path: Path) -> None:
    """Rewrite a closed memory into store format 1: one audit chain over all tenants
    (:func:`.old_chain.to_one_chain`), every type shared by all tenants (one
    table each, as before format 4), entity_index keyed by ID alone, and the vectors of every
    tenant under bare entity IDs in the shared type's collection (as format 1 kept them)."""
    import duckdb

    con = duckdb.connect(str(path / "memory.duckdb"))
    moved: dict[str, str] = {}  # a tenant's collection -> the shared type's
    model = HashEmbedder().model_id
    try:
        con.execute("BEGIN TRANSACTION")
        to_one_chain(con)
        for tenant, name in con.execute("SELECT DISTINCT tenant, name FROM schema_types "
                                        "WHERE tenant <> 'default'").fetchall():
            own = table_name(type_key(tenant, name))
            columns = ", ".join(f'"{r[0]}"' for r in con.execute(f"DESCRIBE {own}").fetchall())
            con.execute(f"INSERT INTO {table_name(name)} ({columns}) SELECT {columns} "
                        f"FROM {own}")
            con.execute(f"DROP TABLE {own}")
            moved[collection_name("dmf", type_key(tenant, name), model)] = collection_name(
                "dmf", name, model)
        con.execute("CREATE TABLE schema_types_v3 (name VARCHAR NOT NULL, version INTEGER NOT "
                    "NULL, definition VARCHAR NOT NULL, seq BIGINT NOT NULL, created_at "
                    "TIMESTAMP NOT NULL, PRIMARY KEY (name, version))")
        con.execute("INSERT INTO schema_types_v3 SELECT name, version, definition, seq, "
                    "created_at FROM schema_types WHERE tenant = 'default'")
        con.execute("DROP TABLE schema_types")
        con.execute("ALTER TABLE schema_types_v3 RENAME TO schema_types")
        con.execute("CREATE TABLE entity_index_v1 (id VARCHAR PRIMARY KEY, type VARCHAR NOT "
                    "NULL, tenant VARCHAR NOT NULL, erased_seq BIGINT)")
        con.execute("INSERT INTO entity_index_v1 SELECT id, type, tenant, erased_seq "
                    "FROM entity_index")
        con.execute("DROP TABLE entity_index")
        con.execute("ALTER TABLE entity_index_v1 RENAME TO entity_index")
        if con.execute("SELECT 1 FROM information_schema.tables WHERE table_name = "
                       "'dmf_rules'").fetchone() is not None:  # rules: shared too, no tenant
            con.execute("CREATE TABLE dmf_rules_v3 AS SELECT name, version, definition, seq, "
                        "created_at FROM dmf_rules WHERE tenant = 'default'")
            con.execute("DROP TABLE dmf_rules")
            con.execute("ALTER TABLE dmf_rules_v3 RENAME TO dmf_rules")
        con.execute("UPDATE meta SET value = '1' WHERE key = 'store_format'")
        con.execute("COMMIT")
    finally:
        con.close()
    from dmf_hybrid._internal.ids import split_vector_id
    from dmf_hybrid._internal.vector.chroma import ChromaIndex

    chroma = ChromaIndex.persistent(str(path / "chroma"))
    try:
        for name in chroma.collections():
            records = chroma.records(name)
            qualified = sorted(v for v in records if split_vector_id(v)[0] != "default")
            chroma.delete(name, qualified)
            vectors = np.ones((len(qualified), HashEmbedder().dim), dtype=np.float32)
            chroma.upsert(moved.get(name, name), [split_vector_id(v)[1] for v in qualified],
                          vectors, [records[v] for v in qualified])
    finally:
        chroma.close()


def _format_of(mem: Memory) -> tuple[str, list[str]]:
    db = mem._store.db
    row = db.fetchone("SELECT value FROM meta WHERE key = 'store_format'")
    keys = [r[0] for r in db.fetchall(
        "SELECT constraint_text FROM duckdb_constraints() WHERE table_name = 'entity_index' "
        "AND constraint_type = 'PRIMARY KEY'")]
    return str(row[0] if row else None), keys


def test_a_format_1_store_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "m"
    mem = Memory.open(path, embedder=HashEmbedder())
    ids = _fill(mem)
    alpha = tenant_like(mem, "alpha")
    given = alpha.create("Poi", {"name": "Pantheon", "city": "Rome"}, id="poi-1").id
    plan = alpha.create("Trip", {"destination": "Rome"}, id="plan-1").id
    alpha.link(plan, "includes", given)
    gone = alpha.create("Poi", {"name": "Erased", "city": "Rome"}, id="poi-2").id
    alpha.erase(gone)
    states = {"default": _readable_state(mem),
              "alpha": [r.model_dump() for r in alpha.related(plan)]}
    seq, total, alpha_seq = mem.last_seq(), mem.verify_audit().events_checked, alpha.last_seq()
    mem.close()
    _to_format_1(path)

    again = Memory.open(path, embedder=HashEmbedder())
    try:
        assert _format_of(again) == (str(STORE_FORMAT), ["PRIMARY KEY(tenant, id)"])
        assert not again._store.reconcile_pending  # the open reconciled the vector IDs
        assert again.last_seq() == seq + 1  # the migration's own event
        # one migrate event per tenant, and alpha's copies of Poi and Trip, audited
        assert again.for_tenant("alpha").last_seq() == alpha_seq + 3
        report = again.verify_audit()
        assert report.ok and report.events_checked == total + 4 and report.chains == 2
        # the same events, each in its tenant's chain now (other hashes), then the migration's
        moved = _readable_state(again)
        events = moved.pop("events")
        assert events[-1]["op"] == "migrate" and events[-1]["meta"]["old_last_seq"] == total
        unhashed = {"prev_hash", "hash"}
        assert [{k: v for k, v in e.items() if k not in unhashed} for e in events[:-1]] == [
            {k: v for k, v in e.items() if k not in unhashed} for e in states["default"]["events"]]
        assert moved == {k: v for k, v in states["default"].items() if k != "events"}
        alpha = again.for_tenant("alpha")
        assert [r.model_dump() for r in alpha.related(plan)] == states["alpha"]
        # alpha owns its copies of the shared types now, its vectors in their collections
        assert [t.name for t in alpha.types()] == ["Poi", "Trip"]
        assert alpha.get_type("Poi").fields == again.get_type("Poi").fields
        records = again.engine.vectors.records(again.engine.indexer.collection(
            alpha.get_type("Poi").key))
        assert "alpha\x1fpoi-1" in records and "poi-1" not in records
        shared = again.engine.vectors.records(again.engine.indexer.collection("Poi"))
        assert not any(v.startswith("alpha") for v in shared)
        moved = [e for e in alpha.events() if e.op == "define" and e.actor == "dmf-store"]
        # one of alpha's Poi was erased: its row is gone
        assert [(e.type, e.meta["rows_moved"]) for e in moved] == [("Poi", 1), ("Trip", 1)]
        assert {k: getattr(again.reconcile(), k) for k in ("missing", "stale", "orphan")} == {
            "missing": 0, "stale": 0, "orphan": 0}
        for mode in ("vector", "keyword", "hybrid"):
            assert alpha.search("Poi", "Pantheon in Rome", mode=mode).hits[0].entity.id == given
        assert again.get(ids["louvre"]).data.country == "FR"
        with pytest.raises(Conflict):  # the erased ID stays retired in its tenant
            alpha.create("Poi", {"name": "again", "city": "Rome"}, id=gone)
        # the new key: another tenant may now hold the same caller-given ID
        beta = tenant_like(again, "beta")
        assert beta.create("Poi", {"name": "Other", "city": "Oslo"}, id=given).tenant == "beta"
        assert alpha.get(given).data.name == "Pantheon"
        assert again.verify_audit().ok
    finally:
        again.close()
    again = Memory.open(path, embedder=HashEmbedder())  # format 2 opens as it is
    try:
        assert _format_of(again) == (str(STORE_FORMAT), ["PRIMARY KEY(tenant, id)"])
        assert again.for_tenant("beta").get(given).data.name == "Other"
    finally:
        again.close()


def test_a_store_of_a_newer_format_is_refused_untouched(tmp_path: Path) -> None:
    import duckdb

    mem = open_memory(tmp_path / "m")
    _fill(mem)
    mem.close()
    con = duckdb.connect(str(tmp_path / "m" / "memory.duckdb"))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'store_format'")
    con.close()
    with pytest.raises(DMFError, match="format 99, newer than"):
        open_memory(tmp_path / "m")
    con = duckdb.connect(str(tmp_path / "m" / "memory.duckdb"))
    try:
        assert con.execute("SELECT value FROM meta WHERE key = 'store_format'").fetchone() == (
            "99",)
    finally:
        con.close()
