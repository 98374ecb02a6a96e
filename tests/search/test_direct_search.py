"""A type whose mirrors would not fit ``mirror_budget_mb`` is searched from the store directly:
nothing of it is loaded, the vector leg's answers are the mirrored search's, and every write is
found at once (both engines, real Chroma)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.errors import ServiceUnavailable
from tests.doors import front, service_settings

ROWS = 400
TOPICS = ("art", "food", "sport", "travel")
WORDS = ("amber birch cedar dahlia elm fern ginkgo hazel iris juniper kale lotus maple nettle "
         "olive peony quince rowan sage tulip umber violet willow yarrow").split()
#: Far below what 400 vectors of 64 floats take: the type is searched directly.
TINY_MB = 0.01
QUERIES = ("Note7", "amber birch Note141", "willow", "Note333 tulip")


def fill(mem: Memory) -> None:
    rng = random.Random(11)
    mem.define_type({"name": "Note", "embed": "{title}", "fields": {
        "title": {}, "topic": {"type": "enum", "values": list(TOPICS)}}})
    mem.create_many("Note", [{"title": " ".join(rng.choices(WORDS, k=4)) + f" Note{i}",
                              "topic": TOPICS[i % 4]} for i in range(ROWS)])


def open_memory(path: Path, store_url: str | None, budget_mb: float = 0,
                exact_threshold: int | None = None) -> Memory:
    extra: dict[str, Any] = {} if exact_threshold is None else {
        "exact_threshold": exact_threshold}
    return Memory.open(path, embedder=HashEmbedder(), settings=Settings(
        store_url=store_url, mirror_budget_mb=budget_mb, **extra))


def answers(mem: Memory, mode: str, where: dict[str, Any] | None = None) -> list[Any]:
    out = []
    for query in QUERIES:
        res = mem.search("Note", query, mode=mode, k=5, where=where)
        out.append([(h.entity.id, round(h.score, 6)) for h in res.hits])
    return out


@pytest.fixture
def mirrored(tmp_path: Path, store_url: str | None) -> dict[str, Any]:
    """The store, filled, and its answers with every mirror loaded (no budget)."""
    mem = open_memory(tmp_path / "m", store_url)
    fill(mem)
    found = {(mode, str(where)): answers(mem, mode, where)
             for mode in ("vector", "keyword", "hybrid")
             for where in (None, {"topic": "food"})}
    mem.close()
    return {"path": tmp_path / "m", "store_url": store_url, "answers": found}


@pytest.mark.parametrize("indexed_max", [1000, 50])
def test_a_type_over_the_budget_is_searched_from_the_store(
        mirrored: dict[str, Any], monkeypatch: pytest.MonkeyPatch, indexed_max: int) -> None:
    """Candidates' vectors looked up by text hash (up to INDEXED_MAX) or joined (more)."""
    monkeypatch.setattr("dmf_hybrid._internal.search.direct.INDEXED_MAX", indexed_max)
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB)
    try:
        indexer = mem.engine.indexer
        for where in (None, {"topic": "food"}):
            # the vector leg scores the candidates' cached vectors exactly: the same answers
            assert answers(mem, "vector", where) == mirrored["answers"][("vector", str(where))]
            res = mem.search("Note", "Note7", k=3, where=where)
            assert res.receipt.direct and res.receipt.plan == "exact"
            assert res.receipt.candidates == (ROWS if where is None else ROWS // 4)
        # BM25 over the rows it ranks: the named note still comes first
        for mode in ("keyword", "hybrid"):
            top = mem.search("Note", "Note141", mode=mode, k=1).hits[0].entity
            assert top.data.title.endswith(" Note141")
        assert mem.search("Note", "Note141", mode="keyword", where={"topic": "art"}
                          ).hits == []  # Note141 is "food": never outside the filter
        assert set(indexer.loaded.nbytes()) == set() and indexer.local("Note") is None
        mem.engine.warm()  # the service's warm-up loads nothing of it either
        assert set(indexer.loaded.nbytes()) == set()
    finally:
        mem.close()


def test_large_scopes_take_the_vector_index_proposals(mirrored: dict[str, Any]) -> None:
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB, exact_threshold=20)
    try:
        for where in (None, {"topic": "food"}):
            res = mem.search("Note", "willow", mode="vector", k=5, where=where)
            assert res.receipt.direct and res.receipt.plan == "ann"
            # 400 vectors: the HNSW graph finds the true neighbours; scored from the cache
            assert [(h.entity.id, round(h.score, 6)) for h in res.hits] \
                == mirrored["answers"][("vector", str(where))][2]
            assert all(h.entity.data.topic == "food" for h in res.hits if where)
        # the keyword leg ranks the rows holding the query's words, which the store finds
        res = mem.search("Note", "Note333 tulip", mode="keyword", k=3)
        assert res.hits[0].entity.data.title.endswith(" Note333") and res.receipt.direct
        assert [h.entity.id for h in res.hits] == [
            eid for eid, _ in mirrored["answers"][("keyword", "None")][3][:3]]
        # fused from both legs (BM25's statistics are the rows it ranked: not the mirror's)
        hybrid = mem.search("Note", "Note333 tulip", mode="hybrid", k=3).hits
        vector = mem.search("Note", "Note333 tulip", mode="vector", k=3).hits
        assert {h.entity.id for h in hybrid} <= {h.entity.id for h in res.hits + vector}
        assert all(h.legs for h in hybrid)
    finally:
        mem.close()


def test_writes_are_found_at_once_and_deletes_never(mirrored: dict[str, Any]) -> None:
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB)
    try:
        made = mem.create("Note", {"title": "zebra crossing", "topic": "travel"})
        for mode in ("vector", "keyword", "hybrid"):
            assert mem.search("Note", "zebra crossing", mode=mode, k=1).hits[0].entity.id \
                == made.id
        mem.update(made.id, {"title": "giraffe bridge"})
        assert mem.search("Note", "giraffe bridge", mode="keyword", k=1).hits[0].entity.id \
            == made.id
        mem.delete(made.id)
        for mode in ("vector", "keyword", "hybrid"):
            hits = mem.search("Note", "giraffe bridge", mode=mode, k=ROWS).hits
            assert made.id not in {h.entity.id for h in hits}
    finally:
        mem.close()


def test_an_unreachable_vector_index_scores_every_candidate(
        mirrored: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB, exact_threshold=20)
    try:
        def down(*_args: Any, **_kwargs: Any) -> Any:
            raise ServiceUnavailable("the vector index is down")

        monkeypatch.setattr(mem.engine.vectors, "query", down)
        monkeypatch.setattr("dmf_hybrid._internal.search.direct.CHUNK", 64)  # several chunks
        for where in (None, {"topic": "food"}):
            res = mem.search("Note", "willow", mode="vector", k=5, where=where)
            assert res.receipt.index_unavailable and res.receipt.plan == "exact"
            assert [(h.entity.id, round(h.score, 6)) for h in res.hits] \
                == mirrored["answers"][("vector", str(where))][2]
    finally:
        mem.close()


def test_a_type_that_fits_is_mirrored_as_before(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m", None, budget_mb=64)
    try:
        fill(mem)
        res = mem.search("Note", "Note7", k=3)
        assert not res.receipt.direct and set(mem.engine.indexer.loaded.nbytes()) == {"Note"}
    finally:
        mem.close()


def test_the_vector_estimate_decides_before_anything_is_loaded(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m", None)
    fill(mem)
    rows_bytes = HashEmbedder().dim * 4 * ROWS
    mem.close()
    for budget, direct in ((rows_bytes / 2 / 2**20, True), (rows_bytes * 8 / 2**20, False)):
        mem = open_memory(tmp_path / "m", None, budget)
        try:
            assert mem.engine.indexer.direct(mem.get_type("Note")) is direct
            assert mem.search("Note", "Note7", k=1).receipt.direct is direct
        finally:
            mem.close()


def test_over_http_the_receipt_says_direct(mirrored: dict[str, Any], tmp_path: Path) -> None:
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB)
    try:
        with front("uvicorn", mem, service_settings(tmp_path)) as door:
            for mode in ("vector", "keyword", "hybrid"):
                over_http = door.mem.search("Note", "amber birch Note141", mode=mode, k=5)
                here = mem.search("Note", "amber birch Note141", mode=mode, k=5)
                assert over_http.receipt.direct
                assert [h.model_dump(mode="json") for h in over_http.hits] \
                    == [h.model_dump(mode="json") for h in here.hits]
    finally:
        mem.close()


@pytest.mark.parametrize("indexed_max", [1000, 50])
def test_vectors_the_cache_lacks_are_embedded(mirrored: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch,
                                              indexed_max: int) -> None:
    monkeypatch.setattr("dmf_hybrid._internal.search.direct.INDEXED_MAX", indexed_max)
    mem = open_memory(mirrored["path"], mirrored["store_url"], TINY_MB)
    try:
        db = mem._store.db
        with db.write() as con:  # a cache that lost vectors (it is derived: nothing else)
            con.execute("DELETE FROM embeddings WHERE text_hash IN (SELECT text_hash FROM "
                        '"ent_Note" WHERE id IN (SELECT id FROM "ent_Note" ORDER BY id '
                        "LIMIT 150))")
        assert answers(mem, "vector") == mirrored["answers"][("vector", "None")]
    finally:
        mem.close()
