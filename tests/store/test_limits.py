"""Size limits enforced before any write: one field value, fields per type, a type definition
and its defaults; DuckDB's memory limit; one tenant's large value does not slow another's
updates (the ratio is measured inside the test, both sides in the same run)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, LimitExceeded, Memory, MemoryAPI, Settings
from dmf_hybrid._internal.checks import MAX_DEFAULT_BYTES, MAX_TYPE_FIELDS, MAX_VALUE_BYTES
from dmf_hybrid._internal.config import default_duckdb_memory_limit
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import tenant_like
from tests.store import assert_unchanged, both_doors

mem = both_doors()

#: The value the hostile client stored (1.9 MB), and the largest one a field now holds.
HUGE = "x" * 1_900_000
LARGEST = "y" * MAX_VALUE_BYTES


def test_a_field_value_over_the_limit_is_refused_before_any_write(mem: MemoryAPI) -> None:
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"})
    trip = mem.create("Trip", {"destination": "Rome"})
    too_big = "z" * (MAX_VALUE_BYTES + 1)
    cases: dict[str, Callable[[], Any]] = {
        "data.name": lambda: mem.create("Poi", {"name": too_big, "city": "Paris"}),
        "changes.city": lambda: mem.update(poi.id, {"city": too_big}),
        "values.tags": lambda: mem.append(trip.id, "tags", ["a" * 40_000, "b" * 40_000]),
        "data.name (row 1)": lambda: mem.create_many("Poi", [{"name": "ok", "city": "c"},
                                                {"name": "中" * (MAX_VALUE_BYTES // 3 + 1),
                                                 "city": "c"}]),
    }
    for field, call in cases.items():
        error = assert_unchanged(mem, call, LimitExceeded).value
        assert isinstance(error, LimitExceeded)
        assert error.details["field"] == field.split(" ")[0], field
        assert str(MAX_VALUE_BYTES) in error.message
    assert mem.create("Poi", {"name": LARGEST, "city": "Paris"}).version == 1


def test_type_definitions_over_the_limits_are_refused(mem: MemoryAPI) -> None:
    many = {f"f{i}": {"type": "str"} for i in range(MAX_TYPE_FIELDS + 1)}
    wide = {f"f{i}": {"type": "str", "description": "d" * 2000} for i in range(40)}
    big_default = {"a": {"type": "str", "default": "d" * (MAX_DEFAULT_BYTES + 1)}}
    for fields, where in ((many, "fields"), (wide, "definition"),
                          (big_default, "fields.a.default")):
        error = assert_unchanged(mem, lambda f=fields: mem.define_type(
            {"name": "Wide", "fields": f}), LimitExceeded).value
        assert isinstance(error, LimitExceeded) and error.details["field"] == where


def test_limits_and_the_duckdb_memory_limit_are_settings(tmp_path: Path) -> None:
    settings = Settings(max_value_bytes=1000, duckdb_memory_limit="512MB")
    with Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex(),
                     settings=settings) as m:
        m.define_type({"name": "Note", "fields": {"text": {}}})
        with pytest.raises(LimitExceeded):
            m.create("Note", {"text": "t" * 1001})
        limit = m._store.db.fetchone("SELECT current_setting('memory_limit')")
        assert limit is not None and limit[0] in ("488.2 MiB", "512.0 MB")
    default = default_duckdb_memory_limit()
    assert default.endswith("MB") and 256 <= int(default[:-2]) <= 4096


def _update_seconds(m: Memory, eid: str, i: int) -> float:
    start = time.perf_counter()
    m.update(eid, {"city": f"c{i}"})
    return time.perf_counter() - start


def test_one_tenants_largest_value_does_not_slow_another_tenants_updates(
        tmp_path: Path) -> None:
    """The hostile scenario: one tenant stores a huge value, another then creates 3,000 rows
    and updates them. The huge value is refused; the largest allowed one leaves the other
    tenant's update time within 2x of the same updates on a store without it (the two stores
    are updated in turns, so a busy machine slows both alike)."""
    stores = {}
    for name, value in (("baseline", None), ("large", LARGEST)):
        m = Memory.open(tmp_path / name, embedder=HashEmbedder(), vector_index=ExactIndex())
        m.define_type({"name": "Poi", "fields": {"name": {}, "city": {}}})
        if value is not None:
            mallory = tenant_like(m, "mallory")
            with pytest.raises(LimitExceeded):
                mallory.create("Poi", {"name": HUGE, "city": "x"})
            mallory.create("Poi", {"name": value, "city": "x"})
        other = tenant_like(m, "alice")
        ids = [e.id for e in other.create_many(
            "Poi", [{"name": f"p{i}", "city": "c"} for i in range(3000)])]
        stores[name] = (m, other, ids)
    try:
        times: dict[str, list[float]] = {"baseline": [], "large": []}
        for i in range(45):
            for name, (_, other, ids) in stores.items():
                seconds = _update_seconds(other, ids[(i * 61) % len(ids)], i)
                if i >= 5:  # the first rounds warm caches up
                    times[name].append(seconds)
        baseline, large = (statistics.median(times[n]) for n in ("baseline", "large"))
        assert large <= 2 * baseline, (large, baseline)
    finally:
        for m, _, _ in stores.values():
            m.close()
