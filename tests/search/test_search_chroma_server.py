"""Search through a real ``chroma run`` server (``Settings.chroma_url``), as on embedded Chroma
(the test session's server, on 127.0.0.1; each test empties it first)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.config import Settings
from dmf_hybrid._internal.vector.chroma import ChromaIndex
from evaluation.chromaserver import ChromaServer, chroma_executable
from tests.conftest import define_travel
from tests.search.test_search import (
    SELECTIVITY,
    WORDS,
    Item,
    brute_force,
    item_rows,
    summary,
)

pytestmark = pytest.mark.slow  # starts a server

MODES = ("vector", "keyword", "hybrid")


@pytest.fixture
def chroma_url(chroma_server: ChromaServer) -> str:
    return chroma_server.url


@pytest.fixture
def server_mem(chroma_url: str, tmp_path: Path) -> Iterator[Memory]:
    """A travel memory whose vectors live on the server (emptied first)."""
    host, port = chroma_url.removeprefix("http://").split(":")
    index = ChromaIndex.http(host, int(port))
    for name in index.collections():
        index.drop(name)
    index.close()
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(),
                      settings=Settings(chroma_url=chroma_url))
    define_travel(mem)
    yield mem
    mem.close()


def test_the_index_lives_on_the_server(server_mem: Memory, chroma_url: str) -> None:
    mem = server_mem
    poi = mem.create("Poi", {"name": "Colosseum", "city": "Rome"})
    host, port = chroma_url.removeprefix("http://").split(":")
    other = ChromaIndex.http(host, int(port))
    assert poi.id in other.records(mem.engine.indexer.collection("Poi"))
    other.close()
    assert not (mem.path / "chroma").exists()  # type: ignore[operator]


@pytest.mark.parametrize("mode", MODES)
def test_updates_deletes_and_erasure_show_through(server_mem: Memory, mode: str) -> None:
    mem = server_mem
    # a caller-chosen ID: the test renames it (an ID derived from the name could not change)
    louvre = mem.create("Poi", {"name": "Louvre museum", "city": "Paris"}, id="louvre")
    tower = mem.create("Poi", {"name": "Eiffel tower", "city": "Paris"})
    mem.update(louvre.id, {"name": "Pompidou centre"})
    res = mem.search("Poi", "Louvre museum", mode=mode)
    assert all(h.entity.fields()["name"] != "Louvre museum" for h in res.hits)
    assert mem.search("Poi", "Pompidou centre", mode=mode).hits[0].entity.version == 2
    mem.delete(tower.id)
    assert tower.id not in [h.entity.id for h in mem.search("Poi", "Eiffel", mode=mode).hits]
    mem.restore(tower.id)
    mem.erase(tower.id)
    assert tower.id not in [h.entity.id for h in mem.search("Poi", "Eiffel", mode=mode).hits]


def test_a_failed_upsert_is_replayed_on_reopen(chroma_url: str, tmp_path: Path) -> None:
    settings = Settings(chroma_url=chroma_url)
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), settings=settings)
    define_travel(mem)
    mem.create("Poi", {"name": "Colosseum", "city": "Rome"})

    def crash(stage: str) -> None:
        if stage == "before_vector_upsert":
            raise RuntimeError("indexer killed")

    mem.engine.indexer.fault = crash
    new = mem.create("Poi", {"name": "Trevi fountain", "city": "Rome"})
    assert mem.engine.indexer.pending() == 1
    assert new.id not in mem.engine.vectors.records(mem.engine.indexer.collection("Poi"))
    mem.close()
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), settings=settings)
    assert mem.engine.indexer.pending() == 0
    assert mem.search("Poi", "Trevi fountain").hits[0].entity.id == new.id
    counts = mem.reconcile()
    assert (counts.missing, counts.stale, counts.orphan) == (0, 0, 0)
    mem.close()


def test_filtered_recall_and_determinism_on_the_ann_path(chroma_url: str,
                                                          tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(),
                      settings=Settings(chroma_url=chroma_url, exact_threshold=5))
    mem.define(Item, identity=["code"], embed="{title} {colour}")
    rows = item_rows(1000)
    ids = [e.id for e in mem.create_many("Item", rows)]
    rng = random.Random(5)
    for label, where in SELECTIVITY.items():
        text = " ".join(rng.sample(WORDS, 3))
        res = mem.search("Item", text, where=where, mode="vector")
        assert [h.entity.id for h in res.hits] == brute_force(rows, ids, text, where), label
        for mode in MODES:
            once = summary(mem.search("Item", text, where=where, mode=mode))
            assert summary(mem.search("Item", text, where=where, mode=mode)) == once
    mem.close()


def test_writes_commit_and_searches_answer_while_the_server_is_down(tmp_path: Path) -> None:
    exe = chroma_executable()
    assert exe is not None
    server = ChromaServer(exe)  # its own: this test stops it
    try:
        mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(),
                          settings=Settings(chroma_url=server.url, exact_threshold=2))
        define_travel(mem)
        for i in range(6):
            mem.create("Poi", {"name": f"Spot {i}", "city": "Oslo"})
        assert mem.search("Poi", "Spot 3", mode="vector").receipt.plan == "ann"
        server.stop(remove=False)
        late = mem.create("Poi", {"name": "Munch museum", "city": "Oslo"})  # acknowledged
        assert mem.get(late.id).version == 1 and mem.engine.indexer.pending() == 1
        for mode in MODES:
            res = mem.search("Poi", "Munch museum", mode=mode, k=3)
            assert res.hits[0].entity.id == late.id, mode
            # the vector leg could not ask the index, and says so; the keyword leg never does
            assert res.receipt.index_unavailable is (mode != "keyword"), mode
        server.start()  # the same port and data: the pending row is applied on the next drain
        assert mem.flush() == 1 and mem.engine.indexer.pending() == 0
        res = mem.search("Poi", "Munch museum", mode="vector", k=3)
        assert res.hits[0].entity.id == late.id and not res.receipt.index_unavailable
        counts = mem.reconcile()
        assert (counts.checked, counts.missing + counts.stale + counts.orphan) == (7, 0)
        mem.close()
    finally:
        server.stop()
