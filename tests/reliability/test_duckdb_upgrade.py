"""Stores written before the DuckDB upgrade open with the pinned DuckDB, whole and reachable.

A subprocess running duckdb 1.4.4 writes a store through this checkout's write path (the
1.4.4 storage format), closes it, writes more and dies without a checkpoint (a 1.4.4 WAL).
The pinned DuckDB then opens it: every entity answers by ID, by filter and by search, the
audit chain verifies and nothing is unreachable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from dmf_hybrid import HashEmbedder, Memory
from tests.reliability.duckdb_144 import OLD_DUCKDB, last_json, run_python

pytestmark = pytest.mark.slow

WRITER = """
    import json, os, sys
    from pathlib import Path
    import duckdb
    assert duckdb.__version__ == "1.4.4", duckdb.__version__
    from dmf_hybrid import HashEmbedder, Memory
    from tests.conftest import define_travel

    path, phase = Path(sys.argv[1]), sys.argv[2]
    mem = Memory.open(path, embedder=HashEmbedder())
    define_travel(mem)
    made = {}
    for i in range(40):
        word = "q" + "".join(chr(97 + int(d)) for d in f"{i:02d}")  # one word per entity
        name = f"{phase} garden {word} " + ("long text " * 300 if i % 4 == 0 else "")
        poi = mem.create("Poi", {"name": name, "city": f"{phase}ville", "cost": i})
        made[poi.id] = {"name": name, "version": 1}
    first, second = sorted(made)[:2]
    mem.update(first, {"cost": 1000})
    made[first]["version"] = 2
    mem.delete(second)
    made.pop(second)
    print(json.dumps(made))
    sys.stdout.flush()
    if phase == "crash":
        os._exit(0)  # no close, no checkpoint: the WAL stays for the next open
    mem.close()
"""


@pytest.fixture
def old_store(tmp_path: Path, old_duckdb: Path) -> Iterator[tuple[Path, dict[str, dict]]]:
    path = tmp_path / "mem"
    made = last_json(run_python(WRITER, str(path), "clean", old_duckdb=old_duckdb))
    made |= last_json(run_python(WRITER, str(path), "crash", old_duckdb=old_duckdb))
    assert (path / "memory.duckdb.wal").is_file()  # the second phase died with a WAL
    yield path, made


def test_a_store_written_by_duckdb_1_4_4_opens_whole(old_store: tuple[Path, dict[str, dict]]
                                                       ) -> None:
    assert duckdb.__version__ != OLD_DUCKDB
    path, made = old_store
    mem = Memory.open(path, embedder=HashEmbedder())
    try:
        for eid, want in made.items():
            entity = mem.get(eid)
            assert (entity.data.name, entity.version) == (want["name"], want["version"])
        for phase in ("clean", "crash"):
            page = mem.query("Poi", {"city": f"{phase}ville"}, limit=100)
            assert {e.id for e in page.items} == {e for e, w in made.items()
                                                  if w["name"].startswith(phase)}
            for i in (3, 17, 39):
                word = "q" + "".join(chr(97 + int(d)) for d in f"{i:02d}")
                hits = mem.search("Poi", word, k=3, mode="keyword",
                                  where={"city": f"{phase}ville"})
                assert hits.hits[0].entity.data.name.startswith(f"{phase} garden {word}")
                hits = mem.search("Poi", f"{phase} garden {word}", k=3, mode="vector")
                assert hits.hits[0].entity.data.name.startswith(f"{phase} garden {word}")
        assert mem.verify_audit().ok
        assert mem.reconcile().missing == 0
        again = mem.create("Poi", {"name": "after the upgrade", "city": "cleanville"})
        assert mem.get(again.id).version == 1
    finally:
        mem.close()


def test_long_strings_are_stored_without_zstd(tmp_path: Path) -> None:
    """DuckDB 2.0 would zstd-compress values of 4 KB or more, and a point read of one row
    then decompresses its segment (a get 7x slower at 20 KB values)."""
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder())
    try:
        mem.define_type({"name": "Note", "identity": ["title"], "fields": {
            "title": {"type": "str", "required": True}, "body": {"type": "str"}}})
        mem.create_many("Note", [{"title": f"n{i}", "body": f"{i} " + "lorem ipsum " * 2000}
                                 for i in range(50)])
        mem._store.db.checkpoint()  # noqa: SLF001 - compression is chosen at checkpoint
        methods = {r[0] for r in mem._store.db.fetchall(  # noqa: SLF001
            "SELECT compression FROM pragma_storage_info('ent_Note') WHERE column_name = "
            "'body' AND segment_type = 'VARCHAR'")}
        assert methods and "ZSTD" not in {m.upper() for m in methods}
    finally:
        mem.close()
