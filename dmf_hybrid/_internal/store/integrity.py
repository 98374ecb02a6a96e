"""The store's indexes after an unclean shutdown, and the check that every entity is
reachable by ID.

DuckDB keeps each index (an ART) beside its table; a row whose ID the index lost is still
found by a scan (a filter) but not by ``WHERE id = ?``, so reads by ID answer 404 and a
create of the same identity fails on the key. DuckDB 1.4.4 did exactly that when it replayed
a large write-ahead log (WAL) after a crash. The store does not trust an index blindly: when
a WAL is left beside the database file (DuckDB removes it at every clean close and
checkpoint), :func:`repair_indexes` runs before anything reads:

* every key (PRIMARY KEY or UNIQUE) is probed: inserting its columns again must conflict
  for every row, which DuckDB decides through the key's index; a table whose key misses
  rows is rebuilt (a new table filled from a scan replaces it);
* every other index (the ID indexes of ``entity_index`` and the entity tables, the
  embedding cache's ``text_hash``) is rebuilt: dropping and creating one costs a fraction of
  checking it row by row (docs/crash-integrity.md has the figures).

:func:`unreachable_by_id` is that row-by-row check, for ``verify`` and ``reconcile``.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..errors import DMFError
from .sql import q
from .txn import Connection, Transactions

log = logging.getLogger(__name__)

#: Rows looked up through an index in one statement: DuckDB answers ``id IN (...)`` from the
#: index only while it yields at most ``index_scan_max_count`` (2048) rows.
LOOKUP_CHUNK = 2048
_CREATE_TABLE = re.compile(r'CREATE TABLE (?:"(?:[^"]|"")+"|[^\s("]+)\(')


class _RollBack(Exception):
    """Ends a probe's write transaction without committing it."""


@dataclass
class IndexRepair:
    """What :func:`repair_indexes` found and did."""

    keys_checked: list[str] = field(default_factory=list)
    #: tables whose key missed rows (how many) and were rebuilt
    rebuilt_tables: dict[str, int] = field(default_factory=dict)
    rebuilt_indexes: list[str] = field(default_factory=list)
    probe_seconds: float = 0.0  # probing the keys
    seconds: float = 0.0  # the whole repair


def wal_of(path: Path) -> Path:
    """The write-ahead log DuckDB keeps beside the database file ``path``."""
    return path.with_name(path.name + ".wal")


def unclean_shutdown(path: Path | None) -> bool:
    """True if ``path`` has a WAL before DuckDB opens it: the last process that wrote the
    file did not close it, and opening it replays the log into the tables and indexes."""
    return path is not None and wal_of(path).exists()


def repair_indexes(db: Transactions) -> IndexRepair:
    """Probe every key and rebuild every other index (see the module docstring)."""
    start = time.perf_counter()
    repair = IndexRepair()
    for table, columns in _keys(db):
        repair.keys_checked.append(f"{table}({', '.join(columns)})")
        missed = _key_misses(db, table, columns)
        if missed:
            repair.rebuilt_tables[table] = missed
    repair.probe_seconds = round(time.perf_counter() - start, 3)
    with db.write() as con:
        for table, missed in repair.rebuilt_tables.items():
            log.error("the key of %s missed %d of its rows after the WAL replay: rebuilding "
                      "the table", table, missed)
            _rebuild_table(con, table)
        for table, name, sql in _plain_indexes(con):
            if table not in repair.rebuilt_tables:  # rebuilt with its table
                rebuild_index(con, name, sql)
                repair.rebuilt_indexes.append(name)
    repair.seconds = round(time.perf_counter() - start, 3)
    log.warning("unclean shutdown of %s: probed %d keys (%s), rebuilt %d indexes in %.2f s",
                db.path, len(repair.keys_checked),
                "all complete" if not repair.rebuilt_tables
                else f"rebuilt {', '.join(sorted(repair.rebuilt_tables))}",
                len(repair.rebuilt_indexes), repair.seconds)
    return repair


def rebuild_index(con: Connection, name: str, sql: str) -> None:
    """Drop the index ``name`` and create it again from its ``CREATE INDEX`` statement."""
    con.execute(f"DROP INDEX {q(name)}")
    con.execute(sql)


def rebuild_table(db: Transactions, table: str) -> None:
    """Replace ``table`` by a copy (same definition, key and indexes) filled from a scan."""
    with db.write() as con:
        _rebuild_table(con, table)


def unreachable_by_id(db: Transactions, tenant: str | None = None) -> dict[str, list[str]]:
    """Per table with an index on ``id`` (``entity_index`` and the entity tables), the IDs
    that a scan finds (of ``tenant``, or of every tenant) but the index does not."""
    out: dict[str, list[str]] = {}
    if db.dialect.name != "duckdb":  # the index replay fault is DuckDB's (see the module doc)
        return out
    con = db.reader()
    own = not db.in_transaction  # else the caller's write transaction is the one state read
    if own:  # one snapshot for the scan and the lookups (a row erased between them is no loss)
        con.execute("BEGIN TRANSACTION")
    try:
        for table in _id_indexed_tables(con):
            where, params = ("WHERE tenant = ?", [tenant]) if tenant is not None else ("", [])
            scanned = sorted({r[0] for r in con.execute(
                f"SELECT id FROM {q(table)} {where}", params).fetchall()})
            lost = _not_found(con, table, scanned)
            if lost:
                out[table] = lost
    finally:
        if own:
            con.execute("ROLLBACK")
    return out


def unreachable_count(lost: dict[str, list[str]]) -> int:
    """How many distinct IDs :func:`unreachable_by_id` found, over all tables."""
    return len({eid for ids in lost.values() for eid in ids})


def unreachable_problem(count: int) -> str:
    """What ``verify`` says when ``count`` entities are not reachable by ID."""
    return (f"{count} entities are found by a filter but not by their ID (an index lost "
            "them); reconcile rebuilds the indexes")


def rebuild_id_indexes(db: Transactions, tables: list[str]) -> list[str]:
    """Rebuild every plain index of ``tables`` (after :func:`unreachable_by_id` found rows
    they miss); the names of the indexes rebuilt."""
    rebuilt = []
    with db.write() as con:
        for table, name, sql in _plain_indexes(con):
            if table in tables:
                rebuild_index(con, name, sql)
                rebuilt.append(name)
    log.warning("rebuilt the indexes %s: rows were reachable by scan but not by ID", rebuilt)
    return rebuilt


# ---------------------------------------------------------------------------- details


def _keys(db: Transactions) -> list[tuple[str, list[str]]]:
    rows = db.fetchall(
        "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE') AND database_name = "
        "current_database() AND schema_name = 'main' ORDER BY table_name, constraint_index")
    return [(str(t), [str(c) for c in cols]) for t, cols in rows]


def _plain_indexes(con: Connection) -> list[tuple[str, str, str]]:
    rows = con.execute(
        "SELECT table_name, index_name, sql FROM duckdb_indexes() WHERE NOT is_unique "
        "AND NOT is_primary AND database_name = current_database() AND schema_name = 'main' "
        "ORDER BY table_name, index_name").fetchall()
    return [(str(t), str(n), str(s)) for t, n, s in rows]


def _id_indexed_tables(con: Connection) -> list[str]:
    rows = con.execute(
        "SELECT DISTINCT table_name FROM duckdb_indexes() WHERE expressions = '[id]' "
        "AND database_name = current_database() AND schema_name = 'main' "
        "ORDER BY table_name").fetchall()
    return [str(r[0]) for r in rows]


def _key_misses(db: Transactions, table: str, columns: list[str]) -> int:
    """How many rows of ``table`` its key's index does not hold (0: complete).

    Inserting the key columns of every row again conflicts, through the index, for each row
    the index holds; any row that does not conflict is one it lost. The probe never commits.
    """
    cols = ", ".join(q(c) for c in columns)
    for probe in (f"INSERT INTO {q(table)} ({cols}) SELECT {cols} FROM {q(table)}",
                  f"INSERT INTO {q(table)} SELECT * FROM {q(table)}"):
        try:
            with db.write() as con:
                try:
                    row = con.execute(probe + " ON CONFLICT DO NOTHING").fetchall()
                except duckdb.ConstraintException:
                    # a lost row came through with NULL in a NOT NULL column: count it with
                    # whole rows (a slower probe that only this case needs)
                    raise _RollBack(None) from None
                raise _RollBack(int(row[0][0]) if row else 0)
        except _RollBack as done:
            if done.args[0] is not None:
                return int(done.args[0])
    raise DMFError(f"cannot probe the key of {table}")


def _rebuild_table(con: Connection, table: str) -> None:
    row = con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = ? AND "
                      "database_name = current_database() AND schema_name = 'main'",
                      [table]).fetchall()
    copy = f"{table}__rebuilt"
    ddl, found = _CREATE_TABLE.subn(f"CREATE TABLE {q(copy)}(", str(row[0][0]) if row else "",
                                    count=1)
    if not found:
        raise DMFError(f"cannot rebuild {table}: its definition was not found")
    indexes = [(n, s) for t, n, s in _plain_indexes(con) if t == table]
    con.execute(ddl)
    try:
        con.execute(f"INSERT INTO {q(copy)} SELECT * FROM {q(table)}")
    except duckdb.ConstraintException as exc:
        raise DMFError(f"{table} holds rows with the same key (its index let a duplicate in): "
                       "restore it from a snapshot", table=table, cause=str(exc)) from None
    for name, _sql in indexes:  # DuckDB refuses to drop or rename a table an index needs
        con.execute(f"DROP INDEX {q(name)}")
    con.execute(f"DROP TABLE {q(table)}")
    con.execute(f"ALTER TABLE {q(copy)} RENAME TO {q(table)}")
    for _name, sql in indexes:
        con.execute(sql)


def _not_found(con: Connection, table: str, ids: list[str]) -> list[str]:
    """The IDs of ``ids`` that ``WHERE id IN (...)`` through the index does not find.

    DuckDB decides while it runs: if the index yields more than ``LOOKUP_CHUNK`` rows it
    scans the table instead (and a scan finds every row). So a statement asks for at most
    ``LOOKUP_CHUNK`` rows' worth of IDs (an ID may have a row in each tenant), and the first
    one's plan is read back to be sure.
    """
    row = con.execute(f"SELECT max(n) FROM (SELECT count(*) AS n FROM {q(table)} "
                      "GROUP BY id)").fetchall()
    chunk = max(1, LOOKUP_CHUNK // max(1, int(row[0][0] or 1) if row else 1))
    lost: list[str] = []
    planned = False
    i = 0
    while i < len(ids):
        part = ids[i:i + chunk]
        sql = f"SELECT DISTINCT id FROM {q(table)} WHERE id IN ({', '.join('?' * len(part))})"
        if not planned and chunk > 1:
            if not _uses_index(con, sql, part):
                chunk //= 2
                continue
            planned = True
        found = {r[0] for r in con.execute(sql, part).fetchall()}
        lost += [x for x in part if x not in found]
        i += len(part)
    return lost


def _uses_index(con: Connection, sql: str, params: list[str]) -> bool:
    plan = con.execute("EXPLAIN ANALYZE " + sql, params).fetchall()
    return "Index Scan" in "\n".join(str(r[1]) for r in plan)
