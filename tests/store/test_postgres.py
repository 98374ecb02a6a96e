"""The PostgreSQL engine: opening by URL, clear errors, another process on the same store, what
stays DuckDB's, a bundle that moves a store between the engines, and no acknowledged write lost
to kill -9.

The behaviour suites run on both engines through the ``mem`` fixture; these are the things
only the shared engine has.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dmf_hybrid import Conflict, HashEmbedder, Memory, Settings, ValidationError
from dmf_hybrid._internal.errors import ServiceUnavailable
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.counting import CountingEmbedder
from evaluation.pgserver import PgServer, binaries
from evaluation.ports import free_port
from tests.conftest import define_travel, tenant_like
from tests.store import dump_rows
from tests.store.old_snapshot import write_format_1
from tests.store.test_bundle import DERIVED, fill_mixed
from tests.store.test_persistence import _fill, _readable_state

ROOT = Path(__file__).resolve().parents[2]


def _open(url: str, path: Path | None = None) -> Memory:
    return Memory.open(url if path is None else path, embedder=HashEmbedder(),
                       vector_index=ExactIndex(),
                       settings=Settings(store_url=url) if path is not None else None)


def test_a_store_opened_by_url_keeps_everything_across_reopening(pg_server: PgServer,
                                                                  tmp_path: Path) -> None:
    url = pg_server.fresh()
    mem = _open(url)
    ids = _fill(mem)
    state, seq = _readable_state(mem), mem.last_seq()
    mem.close()
    # the same store through settings.store_url, with a directory for what stays local
    again = _open(url, tmp_path / "local")
    try:
        assert _readable_state(again) == state and again.last_seq() == seq
        assert again.verify_audit().ok
        assert again.search("Poi", "Louvre in Paris", k=1).hits[0].entity.id == ids["louvre"]
        again.update(ids["trip"], {"budget": 1})  # the chain goes on from the stored head
        assert again.last_seq() == seq + 1 and again.verify_audit().ok
        assert not (tmp_path / "local" / "memory.duckdb").exists()
    finally:
        again.close()


@pytest.mark.parametrize("url", ["postgresql://", "postgresql://u@127.0.0.1:notaport/db"])
def test_a_malformed_store_url_is_a_clear_error(url: str) -> None:
    with pytest.raises((ValidationError, ServiceUnavailable), match="store_url"):
        _open(url)


def test_an_unreachable_store_url_names_the_setting(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(ServiceUnavailable, match="store_url") as exc:
        _open(url, tmp_path)
    assert exc.value.details["field"] == "store_url"


def test_a_store_url_of_another_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="store_url must be a postgresql:// URL"):
        Memory.open(tmp_path, settings=Settings(store_url="mysql://x@localhost/db"))
    assert not (tmp_path / "memory.duckdb").exists()


def test_another_process_opens_the_same_store(pg_server: PgServer) -> None:
    url = pg_server.fresh()
    mem = _open(url)
    try:
        define_travel(mem)
        poi = mem.create("Poi", {"name": "Yu Garden", "city": "上海"})
        script = textwrap.dedent(f"""
            from dmf_hybrid import HashEmbedder, Memory
            from dmf_hybrid._internal.vector.exact import ExactIndex
            with Memory.open({url!r}, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
                print("read:", m.get({poi.id!r}).data.name)
                print("wrote:", m.create("Poi", {{"name": "Bund", "city": "上海"}}).id)
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert "read: Yu Garden" in out.stdout, out.stderr
        theirs = out.stdout.split("wrote: ")[1].strip()
        assert mem.get(theirs).data.name == "Bund"
        assert mem.verify_audit().ok
    finally:
        mem.close()


def test_archiving_says_it_needs_duckdb_files_and_changes_nothing(pg_server: PgServer,
                                                                   tmp_path: Path) -> None:
    mem = _open(pg_server.fresh())
    try:
        define_travel(mem)
        mem.create("Trip", {"destination": "Paris"})
        before = dump_rows(mem)
        with pytest.raises(Conflict, match="PostgreSQL"):
            mem.archive_events(2, tmp_path / "archive")
        assert dump_rows(mem) == before
        assert not (tmp_path / "archive").exists()
    finally:
        mem.close()


def test_a_snapshot_of_postgresql_restores_on_either_engine(pg_server: PgServer,
                                                            tmp_path: Path) -> None:
    mem = _open(pg_server.fresh())
    try:
        ids = _fill(mem)
        tenant_like(mem, "acme").create("Poi", {"name": "东方明珠", "city": "上海", "rating": 4})
        state, rows = _readable_state(mem), dump_rows(mem)
        manifest = mem.snapshot(tmp_path / "snap")
        assert manifest.format == 2 and manifest.last_seq == mem.verify_audit().last_seq
    finally:
        mem.close()
    same = {t: r for t, r in rows.items() if t not in DERIVED | {"dmf_rules"}}
    for target in (str(tmp_path / "duck"), pg_server.fresh()):
        embedder = CountingEmbedder()
        restored = Memory.restore_snapshot(tmp_path / "snap", target, embedder=embedder,
                                           vector_index=ExactIndex())
        try:
            assert embedder.texts == 0  # the cache came along
            assert _readable_state(restored) == state  # IDs, versions, seqs, hashes, types
            assert restored.verify_audit().ok
            assert {t: r for t, r in dump_rows(restored).items() if t in same} == same
            assert restored.search("Poi", "Louvre in Paris", k=1).hits[0].entity.id \
                == ids["louvre"]
        finally:
            restored.close()
    # into a database that holds a store: refused, left as it was
    url = pg_server.fresh()
    held = _open(url)
    define_travel(held)
    before = dump_rows(held)
    held.close()
    with pytest.raises(Conflict, match="not empty"):
        Memory.restore_snapshot(tmp_path / "snap", url, **_kwargs())
    again = _open(url)
    assert dump_rows(again) == before
    again.close()


def test_a_format_1_snapshot_is_not_restored_into_postgresql(pg_server: PgServer,
                                                             tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "duck", **_kwargs())
    try:
        define_travel(mem)
        write_format_1(mem, tmp_path / "snap")
    finally:
        mem.close()
    url = pg_server.fresh()
    with pytest.raises(ValidationError, match="format 1"):
        Memory.restore_snapshot(tmp_path / "snap", url, **_kwargs())
    empty = _open(url)
    assert empty.types() == []
    empty.close()


def _kwargs() -> dict[str, object]:
    return {"embedder": HashEmbedder(), "vector_index": ExactIndex()}


def test_a_bundle_moves_a_store_from_postgresql_to_duckdb(pg_server: PgServer,
                                                           tmp_path: Path) -> None:
    mem = _open(pg_server.fresh())
    try:
        ids = _fill(mem)
        tenant_like(mem, "acme").create("Poi", {"name": "东方明珠", "city": "上海", "rating": 4})
        fill_mixed(mem)  # every kind of column, with empty lists and missing values
        state, rows = _readable_state(mem), dump_rows(mem)
        mixed = [e.model_dump() for e in mem.query("Mixed", order_by="n").items]
        manifest = mem.export(tmp_path / "store.jsonl.gz")
    finally:
        mem.close()
    moved = Memory.import_bundle(tmp_path / "store.jsonl.gz", tmp_path / "duck",
                                 embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        assert _readable_state(moved) == state  # IDs, versions, seqs, hashes, types
        assert [e.model_dump() for e in moved.query("Mixed", order_by="n").items] == mixed
        assert moved.verify_audit().ok and moved.verify_audit().last_seq == manifest.last_seq
        same = {t: r for t, r in rows.items() if t not in DERIVED | {"dmf_rules"}}
        assert {t: r for t, r in dump_rows(moved).items() if t in same} == same
        assert moved.search("Poi", "Louvre in Paris", k=1).hits[0].entity.id == ids["louvre"]
    finally:
        moved.close()


_WRITER = textwrap.dedent("""
    import sys
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.vector.exact import ExactIndex
    from tests.conftest import define_travel
    mem = Memory.open(sys.argv[1], embedder=HashEmbedder(), vector_index=ExactIndex())
    if not mem.types():
        define_travel(mem)
    round_ = sys.argv[2]
    for i in range(100_000):
        poi = mem.create("Poi", {"name": f"r{round_} n{i} lighthouse", "city": f"c{round_}"})
        print(poi.id, flush=True)  # acknowledged: the call returned
""")


def test_kill_9_loses_no_acknowledged_write(pg_server: PgServer) -> None:
    url = pg_server.fresh()
    acked: dict[str, str] = {}
    for round_ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, url, str(round_)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout is not None
        for _ in range(60):
            line = proc.stdout.readline()
            assert line, "the writer stopped early"
            acked[line.strip()] = str(round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    mem = _open(url)  # the killed writers' lock went with their sessions
    try:
        assert mem.verify_audit().ok
        for eid, round_ in acked.items():
            assert mem.get(eid).data.city == f"c{round_}"  # by ID
        for round_ in ("0", "1"):
            found = {e.id for e in mem.query("Poi", {"city": f"c{round_}"}, limit=1000).items}
            assert {e for e, r in acked.items() if r == round_} <= found  # by filter
        for eid in list(acked)[::15]:
            name = mem.get(eid).data.name
            assert eid in {h.entity.id for h in mem.search("Poi", name, k=5).hits}  # by search
        assert json.loads(mem.verify_audit().model_dump_json())["ok"]
    finally:
        mem.close()


def test_connections_the_server_dropped_are_made_again(pg_server: PgServer) -> None:
    import psycopg

    url = pg_server.fresh()
    mem = _open(url)
    try:
        define_travel(mem)
        first = mem.create("Trip", {"destination": "Paris"})
        mem.get(first.id)
        with psycopg.connect(url, autocommit=True) as admin:  # what a restart does to them
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "datname = current_database() AND pid <> pg_backend_pid()")
        second = mem.create("Trip", {"destination": "Rome"})  # the writer comes back
        assert [mem.get(e.id).id for e in (first, second)] == [first.id, second.id]
        assert mem.verify_audit().ok and mem.last_seq() == second_seq(mem)
    finally:
        mem.close()


def test_a_server_restart_loses_nothing_and_the_store_goes_on() -> None:
    bin_dir = binaries()
    assert bin_dir is not None
    server = PgServer(bin_dir)  # its own: the test restarts it
    try:
        mem = _open(server.fresh())
        try:
            define_travel(mem)
            names = ("Oslo Bergen Lima Cusco Quito Rome Turin Nice Lyon Porto Faro Braga Evora "
                     "Sintra Tavira").split()
            made = [mem.create("Trip", {"destination": name}).id for name in names[:10]]
            assert mem.search("Trip", "Lima", mode="keyword").hits
            server.restart()
            # the writer connects again at its next transaction, each reader at its next read
            made += [mem.create("Trip", {"destination": name}).id for name in names[10:]]
            assert sorted(e.id for e in mem.query("Trip", limit=100).items) == sorted(made)
            for eid in made:
                name = mem.get(eid).data.destination
                assert mem.search("Trip", name, mode="keyword", k=1).hits[0].entity.id == eid
            assert mem.verify_audit().ok and mem.last_seq() == second_seq(mem)
        finally:
            mem.close()
    finally:
        server.stop()


def second_seq(mem: Memory) -> int:
    """The seq of the newest event, read from the log itself."""
    return mem.events(since_seq=0, limit=10_000)[-1].seq


def test_dmf_migrate_moves_a_store_to_postgresql_and_back(pg_server: PgServer,
                                                          tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dmf_hybrid._internal.cli import app

    source = Memory.open(tmp_path / "duck", embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        ids = _fill(source)
        acme = tenant_like(source, "acme")
        acme.create("Trip", {"destination": "Paris", "budget": 3})  # the same ID, another tenant
        acme.create("Poi", {"name": "东方明珠", "city": "上海", "rating": 4})
        state, rows = _readable_state(source), dump_rows(source)
        acme_pois = [e.model_dump() for e in acme.query("Poi").items]
    finally:
        source.close()
    url = pg_server.fresh()
    runner = CliRunner()
    env = {"DMF_EMBEDDER": "hash", "DMF_DATA_DIR": None, "DMF_STORE_URL": None}
    there = runner.invoke(app, ["migrate", "--from", str(tmp_path / "duck"), "--to", url,
                                "--json"], env=env)
    assert there.exit_code == 0, there.output
    back = runner.invoke(app, ["migrate", "--from", url, "--to", str(tmp_path / "back"),
                               "--json"], env=env)
    assert back.exit_code == 0, back.output
    assert json.loads(there.output)["last_hash"] == json.loads(back.output)["last_hash"]
    for where in (url, tmp_path / "back"):
        mem = _open(url) if where == url else Memory.open(
            where, embedder=HashEmbedder(), vector_index=ExactIndex())
        try:
            assert _readable_state(mem) == state  # IDs, versions, seqs, hashes, types
            assert [e.model_dump() for e in mem.for_tenant("acme").query("Poi").items] \
                == acme_pois
            same = {t: sorted(map(repr, r)) for t, r in rows.items()
                    if t not in DERIVED - {"events"}}  # in the order of neither engine
            assert "events" in same and "relations" in same
            assert {t: sorted(map(repr, r)) for t, r in dump_rows(mem).items()
                    if t in same} == same
            assert mem.verify_audit().ok
            assert mem.search("Poi", "Louvre in Paris", k=1).hits[0].entity.id == ids["louvre"]
        finally:
            mem.close()
    again = runner.invoke(app, ["migrate", "--from", str(tmp_path / "duck"), "--to", url],
                          env=env)  # the target holds a store now: refused, left as it was
    assert again.exit_code != 0 and "not empty" in again.output
    missing = runner.invoke(app, ["migrate", "--from", str(tmp_path / "nothing"), "--to", url],
                            env=env)
    assert missing.exit_code == 2 and "no memory directory" in missing.output
    assert not (tmp_path / "nothing").exists()


def test_an_index_made_on_a_field_changes_no_answer(pg_server: PgServer) -> None:
    """docs/postgresql.md tells users to index the fields they filter by: the store's writes,
    type changes, searches and verify go on as before, and the index stays."""
    import psycopg
    from pydantic import BaseModel

    class Place(BaseModel):
        name: str
        city: str

    class PlaceV2(BaseModel):
        name: str
        city: str
        stars: int = 0

    url = pg_server.fresh()
    mem = _open(url)
    try:
        mem.define(Place, identity=["name"], embed="{name} in {city}")
        ids = [e.id for e in mem.create_many("Place", [
            {"name": f"place {i}", "city": ("Paris", "Shanghai", "Lyon")[i % 3]}
            for i in range(90)])]
        before = [(h.entity.id, h.score) for h in
                  mem.search("Place", "place in Lyon", where={"city": "Lyon"}, k=5).hits]
        with psycopg.connect(url, autocommit=True) as con:
            con.execute('CREATE INDEX place_city ON "ent_Place" (city)')
        mem.close()
        mem = _open(url)
        assert [(h.entity.id, h.score) for h in mem.search(
            "Place", "place in Lyon", where={"city": "Lyon"}, k=5).hits] == before
        mem.define(PlaceV2, name="Place", identity=["name"], embed="{name} in {city}")
        mem.update(ids[2], {"city": "Paris", "stars": 3})
        mem.delete(ids[5])
        lyon = mem.query("Place", {"city": "Lyon"}, limit=100).items
        assert len(lyon) == 28 and ids[2] not in {e.id for e in lyon}
        assert mem.get(ids[2]).data.stars == 3 and mem.verify_audit().ok
        with psycopg.connect(url) as con:
            assert con.execute("SELECT count(*) FROM pg_indexes WHERE indexname = "
                               "'place_city'").fetchone() == (1,)
    finally:
        mem.close()
