"""No index is trusted blindly: after an unclean shutdown the store rebuilds its indexes
before anything reads, and verify / reconcile find (and reconcile repairs) entities that a
filter finds but a lookup by ID does not.

The damage is real: duckdb 1.4.4 writes 400 notes of 60 KB through this checkout's write
path while a read transaction holds off its checkpoints (a busy server), dies, and a second
1.4.4 process replays the 48 MB WAL and commits, which loses their ID-index entries; that
process dies too, leaving a WAL. 20 notes of tenant "other" were checkpointed before and
keep theirs.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from dmf_hybrid import AuditReport, HashEmbedder, Memory, MemoryAPI, NotFound, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.store.db import Database
from dmf_hybrid._internal.store.integrity import rebuild_table, unreachable_by_id
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel
from tests.doors import http_front
from tests.reliability.duckdb_144 import ROOT, last_json, run_python

DB_FILE = "memory.duckdb"
NOTES = 400
NOTE = {"name": "Note", "identity": ["title"], "embed": "{title}",
        "fields": {"title": {"type": "str", "required": True, "nullable": False},
                   "body": {"type": "str"}}}

DAMAGE = """
    import json, os, sys, threading
    from pathlib import Path
    import duckdb
    assert duckdb.__version__ == "1.4.4", duckdb.__version__
    path, step = Path(sys.argv[1]), sys.argv[2]
    if step == "write":
        from dmf_hybrid import HashEmbedder, Memory
        from dmf_hybrid._internal.vector.exact import ExactIndex
        mem = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
        other = mem.for_tenant("other")
        for m in (mem, other):
            m.define_type(json.loads(sys.argv[3]))
        other.create_many("Note", [{"title": f"other {i}", "body": "y"} for i in range(20)])
        mem._store.db.checkpoint()
        held, hold = threading.Event(), threading.Event()

        def reader():  # an open read transaction: DuckDB skips its automatic checkpoints
            cur = mem._store.db.reader()
            cur.execute("BEGIN")
            cur.execute("SELECT 1 FROM meta").fetchall()
            held.set()
            hold.wait()

        threading.Thread(target=reader, daemon=True).start()
        held.wait()
        ids = []
        for j in range(0, int(sys.argv[4]), 50):
            rows = [{"title": f"note {i}", "body": "x" * 60000} for i in range(j, j + 50)]
            ids += [e.id for e in mem.create_many("Note", rows)]
        print(json.dumps({"ids": ids, "wal": os.path.getsize(path / "memory.duckdb.wal")}))
        sys.stdout.flush()
        os._exit(0)  # killed: no checkpoint
    if step == "replay":  # the next start: replay, commit, and die again
        con = duckdb.connect(str(path / "memory.duckdb"))
        con.execute("INSERT INTO meta VALUES ('replayed', '1') ON CONFLICT DO NOTHING")
        con.execute("INSERT INTO meta VALUES ('replayed-again', '1') ON CONFLICT DO NOTHING")
        print(json.dumps({}))
        sys.stdout.flush()
        os._exit(0)
"""


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, old_duckdb: Path
            ) -> tuple[Path, list[str]]:
    """A memory directory whose ID indexes duckdb 1.4.4 damaged, left with a WAL."""
    import json

    path = tmp_path_factory.mktemp("damaged") / "mem"
    made = last_json(run_python(DAMAGE, str(path), "write", json.dumps(NOTE), str(NOTES),
                                old_duckdb=old_duckdb))
    assert made["wal"] > 16 * 2**20
    last_json(run_python(DAMAGE, str(path), "replay", old_duckdb=old_duckdb))
    assert (path / f"{DB_FILE}.wal").is_file()
    return path, made["ids"]


def copy_of(source: Path, dest: Path, wal: bool = True) -> Path:
    shutil.copytree(source, dest)
    if not wal:
        (dest / f"{DB_FILE}.wal").unlink()
    return dest


def open_notes(path: Path) -> Memory:
    return Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())


pytestmark = pytest.mark.slow


def test_the_damage_is_there_for_a_plain_duckdb(damaged: tuple[Path, list[str]],
                                                tmp_path: Path) -> None:
    """The control: the pinned duckdb reads the damaged file as it is (nothing repairs it)."""
    path, ids = damaged
    db = Database(copy_of(path, tmp_path / "plain") / DB_FILE)
    try:
        lost = unreachable_by_id(db)
        assert sorted(lost) == ["ent_Note", "entity_index"]
        assert set(lost["ent_Note"]) == set(ids) == set(lost["entity_index"])
        assert unreachable_by_id(db, tenant="other") == {}
    finally:
        db.close()


def test_an_unclean_shutdown_rebuilds_the_indexes_at_open(
        damaged: tuple[Path, list[str]], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    path, ids = damaged
    with caplog.at_level(logging.WARNING, logger="dmf_hybrid._internal.store.integrity"):
        mem = open_notes(copy_of(path, tmp_path / "mem"))
    try:
        assert "unclean shutdown" in caplog.text and "all complete" in caplog.text
        # entity_index, the two tenants' Note tables, embeddings
        assert "rebuilt 4 indexes" in caplog.text
        for eid in ids:
            assert mem.get(eid).data.title.startswith("note ")
        again = mem.create("Note", {"title": "note 7", "body": "x"})  # not a duplicate key
        assert (again.id, again.created) == (ids[7], False)
        report = mem.verify_audit()
        assert report.ok and report.unreachable_by_id == 0
        assert mem.query("Note", {"title": "note 399"}).items[0].id == ids[399]
        assert mem.search("Note", "note 123", k=1, mode="keyword").hits[0].entity.id == ids[123]
    finally:
        mem.close()


@pytest.fixture(params=["memory", "asgi", "uvicorn"])
def door(request: pytest.FixtureRequest, damaged: tuple[Path, list[str]], tmp_path: Path
         ) -> Iterator[tuple[Memory, MemoryAPI, Callable[[], AuditReport]]]:
    """The damaged store without its WAL (so nothing repairs it at open), behind a front
    door: (the embedded memory, an admin of tenant default, verify as a reader of tenant
    other sees it)."""
    mem = open_notes(copy_of(damaged[0], tmp_path / "mem", wal=False))
    try:
        if request.param == "memory":
            other = mem.for_tenant("other")
            yield mem, mem, lambda: other.reads.tenant_report()
            return
        keys = "key-admin:default:admin,key-other:other:reader"
        settings = Settings(data_dir=tmp_path / "data", embedder="hash", api_keys=keys,
                            load_examples=False)
        with http_front(request.param, create_app(settings, mem), mem) as front:
            assert front.with_key is not None
            yield mem, front.mem, front.with_key("key-other").verify_audit
    finally:
        mem.close()


def test_verify_and_reconcile_find_entities_unreachable_by_id(
        door: tuple[Memory, MemoryAPI, Callable[[], AuditReport]],
        damaged: tuple[Path, list[str]]) -> None:
    embedded, admin, verify_other = door
    ids = damaged[1]
    with pytest.raises(NotFound):
        admin.get(ids[0])
    assert admin.count("Note") == NOTES  # a filter (a scan) still finds them
    report = admin.verify_audit()
    assert (report.ok, report.unreachable_by_id, report.first_bad_seq) == (False, NOTES, None)
    assert "not by their ID" in str(report.problem)
    mine = verify_other()  # the tenant's own entities are all reachable
    assert (mine.ok, mine.unreachable_by_id, mine.scope) == (True, 0, "tenant")
    counts = admin.reconcile()
    assert counts.unreachable_by_id == NOTES
    assert admin.get(ids[0]).id == ids[0]
    assert admin.verify_audit().ok
    assert admin.reconcile().unreachable_by_id == 0
    assert unreachable_by_id(embedded._store.db) == {}  # noqa: SLF001


def test_a_table_whose_key_lost_rows_is_rebuilt_whole(tmp_path: Path) -> None:
    """The rebuild that a key found incomplete gets: same rows, key and indexes."""
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(mem)
    pois = [mem.create("Poi", {"name": f"p{i}", "city": "Rome"}).id for i in range(30)]
    mem.link(mem.create("Trip", {"destination": "Rome"}).id, "includes", pois[0])
    mem.close()
    db = Database(tmp_path / "mem" / DB_FILE)
    try:
        before = {t: db.fetchall(f"SELECT * FROM {t} ORDER BY ALL") for t in
                  ("entity_index", "events")}
        for table in before:
            rebuild_table(db, table)
            assert db.fetchall(f"SELECT * FROM {table} ORDER BY ALL") == before[table]
        indexes = {r[0] for r in db.fetchall("SELECT index_name FROM duckdb_indexes()")}
        assert "entity_index_id" in indexes
        with pytest.raises(duckdb.ConstraintException), db.write() as con:
            con.execute("INSERT INTO entity_index SELECT * FROM entity_index LIMIT 1")
        assert unreachable_by_id(db) == {}
    finally:
        db.close()
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        assert mem.verify_audit().ok and mem.get(pois[29]).data.name == "p29"
    finally:
        mem.close()


def test_only_an_unclean_shutdown_triggers_the_repair(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "mem"
    script = textwrap.dedent(f"""
        import os
        from dmf_hybrid import HashEmbedder, Memory
        from dmf_hybrid._internal.vector.exact import ExactIndex
        from tests.conftest import define_travel
        mem = Memory.open({str(path)!r}, embedder=HashEmbedder(), vector_index=ExactIndex())
        define_travel(mem)
        mem.create("Poi", {{"name": "killed", "city": "Rome"}})
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=300)
    assert (path / f"{DB_FILE}.wal").is_file()
    with caplog.at_level(logging.WARNING, logger="dmf_hybrid._internal.store.integrity"):
        mem = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
        mem.close()
    assert "unclean shutdown" in caplog.text and "all complete" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dmf_hybrid._internal.store.integrity"):
        mem = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
        assert mem.query("Poi", {"name": "killed"}).items
        mem.close()
    assert "unclean shutdown" not in caplog.text
