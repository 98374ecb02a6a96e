"""The index bug of issue 32, as its three-step repro: rows written before a kill stay
reachable through the index after the WAL is replayed and the next commit checkpoints.

Each step runs in its own process, as in the issue. On duckdb 1.4.4 the same steps leave
rows that a scan sees and `WHERE id = ?` does not (the control below); on the pinned duckdb
none.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.reliability.duckdb_144 import OLD_DUCKDB, last_json, run_python

ROWS = 1000
VALUE_BYTES = 60_000

REPRO = """
    import duckdb, json, os, sys
    con = duckdb.connect("s.duckdb")
    step = sys.argv[1]
    if step == "1":
        con.execute("CREATE TABLE t (tenant VARCHAR NOT NULL, id VARCHAR NOT NULL, "
                    "body VARCHAR, PRIMARY KEY (tenant, id))")
        con.execute("CREATE INDEX t_id ON t (id)")
        con.execute("CHECKPOINT")
        for i in range(int(sys.argv[2])):
            con.execute("INSERT INTO t VALUES ('a', ?, ?)", [f"id{i}", "x" * int(sys.argv[3])])
        print(json.dumps({"wal_bytes": os.path.getsize("s.duckdb.wal")}))
        sys.stdout.flush()
        os._exit(0)  # a crash: no checkpoint
    if step == "2":
        con.execute("CREATE TABLE IF NOT EXISTS m (k VARCHAR PRIMARY KEY)")
        con.execute("INSERT INTO m VALUES ('x') ON CONFLICT DO NOTHING")
        con.close()
        print(json.dumps({}))
    if step == "3":
        n = con.execute("SELECT count(*) FROM t").fetchall()[0][0]
        missing = [i for i in range(n)
                   if not con.execute("SELECT 1 FROM t WHERE id = ?", [f"id{i}"]).fetchall()]
        print(json.dumps({"version": duckdb.__version__, "rows": n, "missing": len(missing)}))
"""


def run_repro(directory: Path, old_duckdb: Path | None = None) -> dict[str, int | str]:
    directory.mkdir()
    step1 = last_json(run_python(REPRO, "1", str(ROWS), str(VALUE_BYTES), cwd=directory,
                                 old_duckdb=old_duckdb))
    last_json(run_python(REPRO, "2", cwd=directory, old_duckdb=old_duckdb))
    found: dict[str, int | str] = last_json(run_python(REPRO, "3", cwd=directory,
                                                       old_duckdb=old_duckdb))
    return {**found, **step1}


def test_the_issue_repro_loses_no_index_entry(tmp_path: Path) -> None:
    found = run_repro(tmp_path / "pinned")
    assert found["version"] == duckdb.__version__
    assert int(found["wal_bytes"]) > 8 * 2**20  # the replay had a WAL of some size to read
    assert (found["rows"], found["missing"]) == (ROWS, 0)


@pytest.mark.slow
def test_the_repro_sees_the_bug_on_duckdb_1_4_4(tmp_path: Path, old_duckdb: Path) -> None:
    """The control: the measurement above would see lost entries if there were any."""
    found = run_repro(tmp_path / "old", old_duckdb)
    assert found["version"] == OLD_DUCKDB and found["rows"] == ROWS
    assert int(found["missing"]) > 0
