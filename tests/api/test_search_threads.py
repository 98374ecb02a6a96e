"""The service runs at most ``search_threads`` searches at once; the others wait their turn.

A real uvicorn server on 127.0.0.1 serves a memory whose (deterministic) embedder notes how
many query embeddings run at the same moment and holds each for a while, so concurrent
searches overlap inside it whenever the service lets them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.config import usable_cpus
from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel
from tests.doors import open_memory, serve, service_settings

CLIENTS = 8
#: how long the embedder holds each query: long enough that 8 clients always overlap
HOLD_S = 0.05


class OverlapCountingEmbedder(HashEmbedder):
    """The hash embedder, holding each call for ``HOLD_S`` and counting calls that overlap."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.hold = 0.0

    def embed(self, texts: list[str]) -> Any:
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(self.hold)
            return super().embed(texts)
        finally:
            with self._lock:
                self.running -= 1


def search_body(i: int) -> dict[str, Any]:
    # distinct texts: the query cache never answers for the model
    return {"type": "Poi", "text": f"night view number {i}", "mode": "vector", "k": 3}


def key_headers(i: int) -> list[tuple[str, str]]:
    """The reader's key, once (the fast path) for even ``i``, twice (the route) for odd."""
    return [("X-API-Key", "key-reader")] * (1 + i % 2)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_no_more_searches_run_at_once_than_search_threads(tmp_path: Path, threads: int
                                                          ) -> None:
    embedder = OverlapCountingEmbedder()
    mem = Memory.open(tmp_path / "mem", embedder=embedder, vector_index=ExactIndex(),
                      settings=Settings(query_batch_size=0))
    try:
        define_travel(mem)
        for name in ("Din Tai Fung", "外滩 night view", "Yu Garden", "Jade Buddha Temple"):
            mem.create("Poi", {"name": name, "city": "Shanghai"})
        expected = []
        for i in range(CLIENTS * 2):
            body = search_body(i)
            found = mem.search(body.pop("type"), body.pop("text"), **body)
            expected.append(found.model_dump(mode="json", exclude={"receipt"}))
        mem.engine._query_cache.clear()  # noqa: SLF001 - the server embeds every query again
        embedder.peak, embedder.hold = 0, HOLD_S
        settings = service_settings(tmp_path, search_threads=threads, query_batch_size=0)
        with serve(create_app(settings, mem)) as url:

            def search(i: int) -> dict[str, Any]:
                with httpx.Client(base_url=url, timeout=30.0) as client:
                    response = client.post("/search", json=search_body(i),
                                           headers=key_headers(i))
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                body.pop("receipt")
                return body

            with ThreadPoolExecutor(CLIENTS) as pool:
                got = list(pool.map(search, range(CLIENTS * 2)))
        assert embedder.peak == threads  # never more, and the service did use them all
        assert got == expected
    finally:
        mem.close()


def test_search_threads_default_to_the_usable_cpus_and_refuse_nonsense(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().search_thread_count() == usable_cpus() >= 1
    assert Settings(search_threads=5).search_thread_count() == 5
    monkeypatch.setenv("DMF_SEARCH_THREADS", "3")
    assert Settings().search_thread_count() == 3
    for bad in (0, -1, "two"):
        with pytest.raises((ValueError, ValidationError), match="search_threads"):
            Settings(search_threads=bad)


def test_a_search_after_the_service_closed_is_a_clear_503(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "mem")
    try:
        mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"})
        app = create_app(service_settings(tmp_path), mem)
        with serve(app) as url, httpx.Client(base_url=url, timeout=30.0) as client:
            for i in range(2):  # the fast path, the route
                response = client.post("/search", json=search_body(i), headers=key_headers(i))
                assert response.status_code == 200
            app.state.dmf.close()  # the pool stops; the memory stays (the app does not own it)
            for i in range(2):
                response = client.post("/search", json=search_body(i), headers=key_headers(i))
                assert response.status_code == 503
                assert response.json()["error"] == "unavailable"
                assert "shutting down" in response.json()["message"]
            assert mem.search("Poi", "garden").hits  # the memory itself still answers
    finally:
        mem.close()
