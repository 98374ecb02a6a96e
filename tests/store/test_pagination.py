"""Cursor pagination: every row exactly once, in order, also while rows are being inserted."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import FilterError, Memory, MemoryAPI, ValidationError
from dmf_hybrid._internal.filters import parse_order
from dmf_hybrid._internal.store.sql import encode_cursor, query_fingerprint
from tests.store import DOORS, all_pages, assert_unchanged, behind, both_doors, open_door

mem = both_doors()

CITIES = ["Paris", "Rome", "Oslo"]
RATINGS = [None, 1, 2, 2, 3, 3, 3, None, 5]


def poi_rows(n: int, prefix: str = "p", seed: int = 7) -> list[dict[str, Any]]:
    """Pois with many duplicate and null ratings and duplicate costs."""
    rng = random.Random(seed)
    return [{"name": f"{prefix}{i:03d}", "city": rng.choice(CITIES),
             "rating": rng.choice(RATINGS), "cost": float(rng.randint(0, 4))} for i in range(n)]


def expected_order(mem: Memory, order: list[str]) -> list[str]:
    """IDs of every live Poi in ``order`` (nulls last, ID as the final key), sorted in Python."""
    rows = [(e.id, {**e.fields(), "created_at": e.created_at, "version": e.version})
            for e in _everything(mem)]
    rows.sort(key=lambda r: r[0])
    for key in reversed(order):
        desc, name = key.startswith("-"), key.lstrip("-")
        present = [r for r in rows if r[1][name] is not None]
        missing = [r for r in rows if r[1][name] is None]
        rows = sorted(present, key=lambda r: r[1][name], reverse=desc) + missing
    return [r[0] for r in rows]


def _everything(mem: Memory) -> list[Any]:
    return list(mem.query("Poi", limit=1000).items)


@pytest.fixture(scope="module", params=DOORS)
def pois(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[MemoryAPI]:
    """57 Pois written in three batches (so created_at has ties and distinct values), through
    each front door."""
    with open_door(request.param, Path(tmp_path_factory.mktemp("pages")) / "mem") as mem:
        rows = poi_rows(57)
        for part in (rows[:20], rows[20:21], rows[21:]):
            mem.create_many("Poi", part)
        yield mem


ORDERS = [[], ["rating"], ["-rating"], ["city", "-rating"], ["rating", "-cost", "city"],
          ["-created_at", "-rating"]]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: ",".join(o) or "id")
@pytest.mark.parametrize("limit", [1, 19, 57])
def test_pages_cover_every_row_once_in_order(pois: Memory, order: list[str],
                                             limit: int) -> None:
    pages = all_pages(pois, "Poi", order_by=order or None, limit=limit)
    flat = [i for page in pages for i in page]
    assert flat == expected_order(pois, order)
    assert len(flat) == len(set(flat)) == 57
    assert all(len(p) == limit for p in pages[:-1])
    assert 1 <= len(pages[-1]) <= limit  # a full last page has no empty page after it


def test_pages_with_a_filter(pois: Memory) -> None:
    where = {"$or": [{"rating": None}, {"rating": {"$gte": 3}}]}
    pages = all_pages(pois, "Poi", where=where, order_by="-rating", limit=4)
    flat = [i for page in pages for i in page]
    full = [e.id for e in pois.query("Poi", where, order_by="-rating", limit=1000).items]
    assert flat == full
    assert {pois.get(i).data.rating for i in flat} <= {None, 3, 5}


def _page_while_writing(mem: Memory, order: list[str], write: Any) -> tuple[list[str], list[str]]:
    """(IDs before paging in expected order, IDs seen across pages) with ``write`` between."""
    before = expected_order(mem, order)
    seen: list[str] = []
    cursor = None
    step = 0
    while True:
        page = mem.query("Poi", order_by=order or None, limit=8, cursor=cursor)
        seen.extend(e.id for e in page.items)
        if page.next_cursor is None:
            return before, seen
        write(step)
        step += 1
        cursor = page.next_cursor


@pytest.mark.parametrize("order", [[], ["rating"], ["-rating", "city"]],
                         ids=lambda o: ",".join(o) or "id")
def test_inserts_between_pages_never_repeat_or_skip_existing_rows(mem: Memory,
                                                                  order: list[str]) -> None:
    mem.create_many("Poi", poi_rows(40))
    extra = iter(poi_rows(200, prefix="new", seed=11))

    def write(step: int) -> None:
        mem.create_many("Poi", [next(extra) for _ in range(2)])
        mem.create("Poi", {"name": f"solo{step}", "city": "Aachen", "rating": 1})

    before, seen = _page_while_writing(mem, order, write)
    assert len(seen) == len(set(seen)), "a row was returned twice"
    existing = [i for i in seen if i in set(before)]
    assert existing == before, "a pre-existing row was skipped or moved"


def test_deletes_between_pages_skip_only_the_deleted_rows(mem: Memory) -> None:
    mem.create_many("Poi", poi_rows(40))
    order = ["rating"]
    before = expected_order(mem, order)
    doomed: list[str] = []
    seen: list[str] = []
    cursor = None
    while True:
        page = mem.query("Poi", order_by=order, limit=6, cursor=cursor)
        seen.extend(e.id for e in page.items)
        if page.next_cursor is None:
            break
        not_yet = [i for i in before if i not in seen and i not in doomed]
        doomed.append(not_yet[-1])  # delete a row the pages have not reached yet
        mem.delete(not_yet[-1])
        cursor = page.next_cursor
    assert seen == [i for i in before if i not in doomed]


def test_paging_while_another_thread_inserts(mem: Memory) -> None:
    mem.create_many("Poi", poi_rows(60))
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        rows = iter(poi_rows(5000, prefix="bg", seed=3))
        try:
            while not stop.is_set():
                mem.create("Poi", next(rows))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        before, seen = _page_while_writing(mem, ["-rating", "name"], lambda step: None)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors
    assert len(seen) == len(set(seen))
    assert [i for i in seen if i in set(before)] == before
    assert mem.verify_audit().ok


def test_as_of_pages_are_stable_while_writing(mem: Memory) -> None:
    mem.create_many("Poi", poi_rows(30))
    seq = mem.last_seq()
    frozen = [e.id for e in mem.query("Poi", order_by="rating", limit=1000).items]
    seen: list[str] = []
    cursor = None
    extra = iter(poi_rows(100, prefix="late"))
    while True:
        page = mem.query("Poi", order_by="rating", limit=4, cursor=cursor, as_of=seq)
        assert page.as_of_seq == seq
        seen.extend(e.id for e in page.items)
        if page.next_cursor is None:
            break
        mem.create("Poi", next(extra))
        mem.update(seen[0], {"rating": 1})
        cursor = page.next_cursor
    assert seen == frozen


def test_a_cursor_only_works_for_its_own_query(pois: Memory) -> None:
    page = pois.query("Poi", {"city": "Paris"}, order_by="rating", limit=3)
    cursor = page.next_cursor
    assert cursor is not None
    assert pois.query("Poi", {"city": "Paris"}, order_by="rating", limit=5, cursor=cursor).items
    others: list[dict[str, Any]] = [
        {"where": {"city": "Rome"}, "order_by": "rating"},
        {"where": {"city": "Paris"}, "order_by": "-rating"},
        {"where": {"city": "Paris"}, "order_by": ["rating", "name"]},
        {"where": {"city": "Paris"}},
        {"where": {"city": "Paris"}, "order_by": "rating", "as_of": pois.last_seq()},
    ]
    for other in others:
        assert_unchanged(pois, partial(pois.query, "Poi", cursor=cursor, **other),
                         FilterError, match="different query")
    assert pois.query("Trip").items == []
    assert_unchanged(pois, lambda: pois.query("Trip", cursor=cursor), FilterError)  # other type


@pytest.mark.parametrize("cursor", [
    "garbage", "!!!", "", "e30", "W10", 42, ["x"],
    encode_cursor(b"k" * 64, "0" * 16, [1], "Poi_x"),  # sealed with another store's key
])
def test_malformed_cursors_are_refused(pois: Memory, cursor: Any) -> None:
    if cursor == "":
        # an empty cursor means "first page"
        assert pois.query("Poi", cursor=cursor).items
        return
    assert_unchanged(pois, lambda: pois.query("Poi", order_by="rating", cursor=cursor),
                     FilterError)


def test_forged_cursor_values_are_refused(pois: Memory) -> None:
    """A cursor is caller input: even sealed with the store's own key (as if it leaked), order
    values of the wrong type are a FilterError, not a 500."""
    page = pois.query("Poi", order_by=["rating", "-created_at"], limit=2)
    assert page.next_cursor
    store = behind(pois)._store
    fingerprint = query_fingerprint("Poi", None, parse_order(
        store.type_of("Poi", "default"), ["rating", "-created_at"]), None)
    key = store.cursor_key
    for values in (["abc", None], [{"a": 1}, None], [[1], None], [10**30, None],
                   [1, "not a time"], [True, None], [1, 5]):
        forged = encode_cursor(key, fingerprint, values, "Poi_x")
        assert_unchanged(pois, partial(pois.query, "Poi", order_by=["rating", "-created_at"],
                                       limit=2, cursor=forged), FilterError)
    short = encode_cursor(key, fingerprint, [1], "Poi_x")
    assert_unchanged(pois, lambda: pois.query("Poi", order_by=["rating", "-created_at"],
                                              cursor=short), FilterError)


@pytest.mark.parametrize("limit", [0, -1, 1001, "10", 2.5, True, None])
def test_bad_limits_are_refused(pois: Memory, limit: Any) -> None:
    assert_unchanged(pois, lambda: pois.query("Poi", limit=limit), ValidationError,
                     match="limit")
