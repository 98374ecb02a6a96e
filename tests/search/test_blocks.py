"""Blocks: the gathered vectors of a repeated candidate list, scored instead of the rows.

A block is a copy, so the tests check what a copy could get wrong: a vector that changed
since (in place, or rows that moved), the byte bound, and that a search answers exactly
what it answers without blocks.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.mirrors.vectors import BLOCK_MIN_ROWS, LocalVectors
from dmf_hybrid._internal.search.ranking import ranked
from dmf_hybrid._internal.vector.exact import ExactIndex

DIM = 16
ROWS = 3 * BLOCK_MIN_ROWS + 300


def mirror(rows: int = ROWS, block_bytes: int = 2**24, seed: int = 3
           ) -> tuple[LocalVectors, np.ndarray]:
    """A mirror of ``rows`` random vectors of one tenant (IDs e00000...)."""
    vectors = np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)
    local = LocalVectors(DIM, block_bytes)
    ids = [f"e{i:05d}" for i in range(rows)]
    local.upsert(ids, list(range(1, rows + 1)), vectors, ["default"] * rows, ["h"] * rows)
    return local, vectors


def unit(vector: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.asarray(vector, dtype=np.float64)
    return out / np.linalg.norm(out)


def candidates(local: LocalVectors) -> np.ndarray:
    """Every third row: a candidate set the exact plan gathers (not a full scan)."""
    return np.arange(0, len(local), 3, dtype=np.intp)


def test_a_repeated_list_keeps_a_block_and_answers_the_same(tmp_path: Path) -> None:
    local, vectors = mirror()
    rows = candidates(local)
    memo: dict[str, Any] = {}
    query = unit(vectors[7] + vectors[9])
    first = local.top(query, 10, lambda: rows, memo)
    assert local.blocks.held == 0  # a list seen once is not worth a copy
    second = local.top(query, 10, lambda: rows, memo)
    assert local.blocks.held == len(rows) * DIM * 4
    third = local.top(query, 10, lambda: rows, memo)  # scored from the block
    plain = local.top(query, 10, lambda: rows)  # no memo: gathered
    assert first is not None and second is not None and third is not None
    assert plain is not None
    for found in (second, third, plain):
        assert found[0] == first[0]
        assert found[1].tolist() == first[1].tolist()


def test_a_vector_changed_in_place_is_never_scored_from_an_old_block() -> None:
    local, vectors = mirror()
    rows = candidates(local)
    memo: dict[str, Any] = {}
    query = unit(vectors[1])
    for _ in range(2):
        local.top(query, 5, lambda: rows, memo)
    assert local.blocks.held
    # the same entity, same row (no row moves, so the row memo stays): a new vector that is
    # the query itself must rank first
    target = int(rows[len(rows) // 2])
    local.upsert([f"e{target:05d}"], [target + 1], query[None, :].astype(np.float32),
                 ["default"], ["h2"])
    assert local.blocks.held == 0
    found = local.top(query, 5, lambda: rows, memo)
    assert found is not None
    best = ranked(*found, 5)[0]
    assert best[0] == f"e{target:05d}"
    assert best[1] == pytest.approx(1.0)


def test_rows_that_moved_are_found_again() -> None:
    local, vectors = mirror()
    memo: dict[str, Any] = {}
    query = unit(vectors[4])

    def find() -> np.ndarray:
        return local.rows_of_ids("default", [f"e{i:05d}" for i in range(0, ROWS, 3)
                                             if i != 0])

    for _ in range(2):
        local.top(query, 5, find, memo)
    local.delete([("default", "e00003")])  # the last row moves into its place
    found = local.top(query, 5, find, memo)
    assert found is not None and "e00003" not in found[0]
    exact = sorted(((float(unit(vectors[i]) @ query), f"e{i:05d}")
                    for i in range(6, ROWS, 3)), reverse=True)[:5]
    assert [eid for eid, _ in ranked(*found, 5)] == [eid for _, eid in exact]


def test_changes_that_move_no_row_of_a_list_keep_its_block() -> None:
    local, vectors = mirror()
    listed = [f"e{i:05d}" for i in range(0, ROWS - 1, 3)]  # not the last row

    def find() -> np.ndarray:
        return local.rows_of_ids("default", listed)

    memo: dict[str, Any] = {}
    query = unit(vectors[2])
    for _ in range(2):
        local.top(query, 5, find, memo)
    held, version = local.blocks.held, local.version
    assert held
    # an update that keeps its vector, a new row, the removal of that (last) row
    local.upsert(["e00000"], [1], vectors[:1], ["default"], ["h2"])
    local.upsert(["new"], [10**6], vectors[1:2], ["default"], ["h"])
    local.delete([("default", "new")])
    assert (local.blocks.held, local.version) == (held, version)
    served = []
    get = local.blocks.get
    local.blocks.get = lambda *a: served.append(get(*a)) or served[-1]  # type: ignore[method-assign]
    kept = local.top(query, 5, find, memo)  # the rows are found again: the same ones
    assert served and served[0] is not None  # scored from the block
    plain = local.top(query, 5, find)
    assert kept is not None and plain is not None
    assert kept[0] == plain[0] and kept[1].tolist() == plain[1].tolist()


def test_the_key_index_follows_every_change_as_a_rebuild_would() -> None:
    rng = np.random.default_rng(5)
    local, _ = mirror(rows=200)
    probe = np.arange(0, 600, dtype=np.uint64)  # keys present and absent
    assert local.rows_of_keys(probe) is not None  # builds the index
    fresh = 200
    for _ in range(80):
        op = int(rng.integers(3))
        if op == 0:  # two new rows and an existing one
            ids = [f"e{fresh:05d}", f"e{fresh + 1:05d}", local._ids[0]]
            keys = [fresh + 1, fresh + 2, int(local._keys[0])]
            fresh += 2
            local.upsert(ids, keys, rng.standard_normal((3, DIM)).astype(np.float32),
                         ["default"] * 3, ["h"] * 3)
        else:  # the last row, or one another row moves into
            at = len(local) - 1 if op == 1 else int(rng.integers(len(local)))
            local.delete([("default", local._ids[at])])
        assert local._by_key is not None  # kept up to date, not dropped for a rebuild
        expected = np.flatnonzero(np.isin(local._keys[:len(local)], probe))
        got = local.rows_of_keys(probe)
        assert got is not None and got.tolist() == expected.tolist()
    local.upsert(["twin"], [int(local._keys[0])], np.ones((1, DIM), dtype=np.float32),
                 ["default"], ["h"])  # another entity with the same key
    assert local.rows_of_keys(probe) is None and local.collided


def test_blocks_stay_within_their_bound() -> None:
    rows_per_block = BLOCK_MIN_ROWS + 10
    local, vectors = mirror(rows=3 * rows_per_block, block_bytes=rows_per_block * DIM * 4 * 2)
    query = unit(vectors[0])
    memos: list[dict[str, Any]] = [{} for _ in range(3)]
    for at, memo in enumerate(memos):
        rows = np.arange(at, 3 * rows_per_block, 3, dtype=np.intp)
        for _ in range(2):
            local.top(query, 5, partial(np.copy, rows), memo)
    assert local.blocks.held == 2 * rows_per_block * DIM * 4  # the oldest one went out
    assert local.blocks.get(memos[0], local.version) is None
    assert local.blocks.get(memos[2], local.version) is not None


def test_a_block_larger_than_the_bound_or_small_sets_are_not_kept() -> None:
    local, vectors = mirror(block_bytes=1024)
    memo: dict[str, Any] = {}
    for _ in range(2):
        local.top(unit(vectors[0]), 5, lambda: candidates(local), memo)
    assert local.blocks.held == 0
    small, vectors = mirror(rows=3 * (BLOCK_MIN_ROWS - 1))
    for _ in range(2):
        small.top(unit(vectors[0]), 5, lambda: candidates(small), memo)
    assert small.blocks.held == 0


class Item(BaseModel):
    name: str
    group: str


def test_search_with_blocks_answers_what_it_answers_without(tmp_path: Path) -> None:
    rows = [{"name": f"item {i} of the {'red' if i % 2 else 'blue'} kind", "group":
             "a" if i % 3 else "b"} for i in range(3 * BLOCK_MIN_ROWS)]
    answers = []
    for mb in (64, 0):
        mem = Memory.open(tmp_path / f"m{mb}", embedder=HashEmbedder(dim=32),
                          settings=Settings(block_cache_mb=mb), vector_index=ExactIndex())
        mem.define(Item, identity=["name"], embed="{name}")
        mem.create_many("Item", rows)
        answers.append([[(h.entity.data.name, h.score) for h in mem.search(
            "Item", text, where={"group": "b"}, k=10, mode="vector").hits]
            for text in ("red kind", "item 42", "red kind", "blue item 7", "item 42")])
        held = mem.engine.indexer.local("Item").blocks.held  # type: ignore[union-attr]
        assert (held > 0) == (mb > 0)
        mem.close()
    assert answers[0] == answers[1]
    assert all(len(hits) == 10 for hits in answers[0])


def test_the_bound_is_a_setting_and_refuses_a_negative_one() -> None:
    assert Settings().block_cache_mb > 0
    with pytest.raises(ValueError, match="block_cache_mb"):
        Settings(block_cache_mb=-1)
