"""Tests of the core store; shared helpers: both front doors, table dumps, a reference filter
evaluator, a clock.

The behaviour tests (CRUD, versions, relations, pagination, transactions, bad input) run
through both front doors: their ``mem`` is :func:`both_doors`, the embedded ``Memory`` or a
``MemoryClient`` on a real uvicorn server on 127.0.0.1 serving that same memory (the doors of
tests/doors.py, which the API tests' ``api`` fixture opens too). Helpers that
look at the tables (``dump``, ``assert_unchanged``) read the memory behind either door.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import DMFError, HashEmbedder, Memory, MemoryAPI, Settings
from dmf_hybrid._internal.clock import set_clock
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel
from tests.doors import front

#: The two front doors every behaviour test goes through.
DOORS = ("memory", "http")
_BEHIND: dict[int, Memory] = {}  # id(MemoryClient) -> the memory its server serves


def open_memory(path: Path) -> Memory:
    """A memory in ``path`` with the test embedder and the exact in-memory vector index."""
    return Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())


def behind(mem: MemoryAPI) -> Memory:
    """The embedded memory behind a front door (itself, for a Memory)."""
    return mem if isinstance(mem, Memory) else _BEHIND[id(mem)]


@contextmanager
def open_door(kind: str, path: Path, define: Callable[[MemoryAPI], None] = define_travel
              ) -> Iterator[MemoryAPI]:
    """A fresh memory in ``path`` with the travel types (or what ``define`` defines), through
    front door ``kind`` (``http``: a uvicorn server on 127.0.0.1; tests/doors.py)."""
    memory = open_memory(path)
    settings = Settings(data_dir=path.parent / f"{path.name}-server", embedder="hash",
                        load_examples=False)
    try:
        with front("uvicorn" if kind == "http" else kind, memory, settings) as door:
            _BEHIND[id(door.mem)] = memory
            try:
                define(door.mem)
                yield door.mem
            finally:
                _BEHIND.pop(id(door.mem), None)
    finally:
        memory.close()


def both_doors(name: str = "mem", define: Callable[[MemoryAPI], None] = define_travel) -> Any:
    """A fixture for a test module: each test using it runs through both front doors."""

    @pytest.fixture(params=DOORS, name=name)
    def through_a_door(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryAPI]:
        with open_door(request.param, tmp_path / "mem", define) as door:
            yield door

    return through_a_door


def dump_rows(mem: MemoryAPI) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the memory's store, fully ordered."""
    db = behind(mem)._store.db
    duck = db.dialect.name == "duckdb"
    # vectors compare by hash: converting every float to Python costs more than the test
    columns = {"embeddings": "model_id, text_hash, dim, "
                             + ("hash(vector)" if duck else "md5(vector)")}
    order = "ALL" if duck else "CAST(r AS text)"
    return {t: db.fetchall(f'SELECT {columns.get(t, "*")} FROM "{t}" AS r ORDER BY {order}')
            for t in db.tables()}


def dump(mem: MemoryAPI) -> dict[str, Any]:
    """A fingerprint of the whole store: per table (rows, sum of row hashes), chain, registry.

    One query instead of one per table keeps the many before/after comparisons cheap; the
    per-table entries say which table changed when two fingerprints differ.
    """
    store = behind(mem)._store
    tables = store.db.tables()
    row_hash = ("hash(r)" if store.db.dialect.name == "duckdb"
                else "hashtextextended(CAST(r AS text), 0)")
    sql = " UNION ALL ".join(
        f"SELECT '{t}', count(*), sum({row_hash}) FROM \"{t}\" AS r" for t in tables)
    return {
        "tables": {t: (n, h) for t, n, h in store.db.fetchall(sql)},
        "seq": store.log.pos,
        "heads": dict(store.log._heads),
        "types": {t.name: (t.version, t.typedef) for t in store.types()},
    }


def assert_unchanged(mem: MemoryAPI, call: Callable[[], Any],
                     error: type[BaseException] = DMFError, match: str | None = None
                     ) -> pytest.ExceptionInfo[BaseException]:
    """Run a bad ``call``: it must raise ``error`` and leave every table exactly as it was."""
    before = dump(mem)
    with pytest.raises(error, match=match) as info:
        call()
    after = dump(mem)
    assert after == before, f"{call} changed the store"
    assert mem.verify_audit().ok
    return info


def audit_seqs(mem: MemoryAPI) -> list[int]:
    """Every audit seq in the events table, ascending."""
    return [r[0] for r in behind(mem)._store.db.fetchall("SELECT seq FROM events ORDER BY seq")]


@contextmanager
def ticking_clock(start: dt.datetime | None = None,
                  step: dt.timedelta = dt.timedelta(milliseconds=1)) -> Iterator[None]:
    """Freeze the package clock so each reading is ``step`` later than the previous one."""
    origin = start or dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    counter = itertools.count()
    set_clock(lambda: origin + step * next(counter))
    try:
        yield
    finally:
        set_clock(None)


# ---------------------------------------------------------------- reference filter semantics


def _like(value: Any, operand: Any) -> Any:
    """``operand`` parsed the way the filter language coerces text to dates and datetimes."""
    if isinstance(operand, (list, tuple)):
        return [_like(value, o) for o in operand]
    if isinstance(operand, str) and isinstance(value, dt.datetime):
        return dt.datetime.fromisoformat(operand)
    if isinstance(operand, str) and isinstance(value, dt.date):
        return dt.date.fromisoformat(operand)
    return operand


def _matches_cmp(value: Any, op: str, operand: Any) -> bool:
    if op != "$contains":
        operand = _like(value, operand)
    if operand is None:
        return value is None if op == "$eq" else value is not None
    if op == "$eq":
        return value is not None and value == operand
    if op == "$ne":  # IS DISTINCT FROM: null != x is true
        return value is None or value != operand
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if value is None:  # comparisons with null are false
            return False
        return {"$gt": value > operand, "$gte": value >= operand, "$lt": value < operand,
                "$lte": value <= operand}[op]
    if op == "$in":
        return value is not None and value in operand
    if op == "$nin":  # null is "not in" any list
        return value is None or value not in operand
    if op == "$contains":
        if value is None:
            return False
        return operand in value  # list: element; str: substring
    raise AssertionError(f"unknown op {op}")


def evaluate(where: Mapping[str, Any] | None, row: Mapping[str, Any]) -> bool:
    """The pure-Python meaning of a ``where`` filter on one entity's data."""
    if not where:
        return True
    for key, value in where.items():
        if key == "$and":
            if not all(evaluate(sub, row) for sub in value):
                return False
        elif key == "$or":
            if not any(evaluate(sub, row) for sub in value):
                return False
        elif isinstance(value, Mapping):
            if not all(_matches_cmp(row[key], op, operand) for op, operand in value.items()):
                return False
        elif not _matches_cmp(row[key], "$eq", value):
            return False
    return True


def all_pages(mem: MemoryAPI, type_name: str, **query: Any) -> list[list[str]]:
    """The entity IDs of every page of a query, following cursors to the end."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = mem.query(type_name, cursor=cursor, **query)
        pages.append([e.id for e in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return pages
