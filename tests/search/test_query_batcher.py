"""Query embedding shared across concurrent searches: same answers, errors to all, no hang."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.embeddings.batching import QueryBatcher, make_query_batcher
from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel

JOIN_TIMEOUT = 60.0  # a liveness bound (a hang fails the test), not a speed assertion
CITIES = ("Rome", "Paris", "Naples", "Berlin", "Kyoto", "Lima")
WORDS = ("museum", "tower", "garden", "market", "bridge", "temple", "harbour", "castle")


class HeldEmbedder(HashEmbedder):
    """The hash embedder whose first call waits until ``release`` is set.

    While the first model call is held, the other callers queue up behind it, so the test
    knows they form one batch. ``fail_on`` makes a call fail if it contains that text.
    """

    def __init__(self, fail_on: str | None = None) -> None:
        super().__init__(dim=32)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls: list[list[str]] = []
        self.fail_on = fail_on
        self._first = True

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self._first:
            self._first = False
            self.entered.set()
            assert self.release.wait(JOIN_TIMEOUT)
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError(f"model crashed on {self.fail_on!r}")
        return super().embed(texts)


def run_threads(target: Callable[[int], Any], count: int) -> list[Any]:
    """``target(i)`` for i in range(count), each in its own thread; results or exceptions."""
    results: list[Any] = [None] * count

    def one(i: int) -> None:
        try:
            results[i] = target(i)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return results


def wait_queued(batcher: QueryBatcher, count: int) -> None:
    """Until ``count`` callers wait in the batcher's queue (bounded)."""
    with batcher._cond:  # noqa: SLF001 - the test observes the queue it fills
        assert batcher._cond.wait_for(lambda: len(batcher._queue) >= count, JOIN_TIMEOUT)  # noqa: SLF001


def queries(n: int) -> list[str]:
    return [f"{WORDS[i % len(WORDS)]} near the {WORDS[(i * 3 + 1) % len(WORDS)]} {i}"
            for i in range(n)]


# ---------------------------------------------------------------- the batcher alone


def test_concurrent_callers_share_calls_and_get_their_own_vectors() -> None:
    model = HeldEmbedder()
    batcher = QueryBatcher(model, max_batch=64, max_wait_ms=0)
    texts = queries(12) + queries(3)  # three texts asked twice
    first = threading.Thread(target=batcher.embed, args=("the first caller",))
    first.start()
    assert model.entered.wait(JOIN_TIMEOUT)

    def ask(i: int) -> np.ndarray:
        return batcher.embed(texts[i])

    pending = threading.Thread(target=lambda: results.extend(run_threads(ask, len(texts))))
    results: list[Any] = []
    pending.start()
    wait_queued(batcher, len(texts))
    model.release.set()
    pending.join(JOIN_TIMEOUT)
    first.join(JOIN_TIMEOUT)
    assert not pending.is_alive() and not first.is_alive()
    alone = HashEmbedder(dim=32)
    for text, vector in zip(texts, results, strict=True):
        np.testing.assert_array_equal(vector, alone.embed([text])[0])
    # one held call, then one call for all the queued callers, each distinct text once
    assert [len(c) for c in model.calls] == [1, 12]
    assert batcher.stats.largest == len(texts)
    assert batcher.stats.requests == len(texts) + 1


def test_a_model_error_reaches_every_caller_of_the_batch() -> None:
    model = HeldEmbedder(fail_on="boom")
    batcher = QueryBatcher(model, max_batch=64, max_wait_ms=0)
    first = threading.Thread(target=batcher.embed, args=("held",))
    first.start()
    assert model.entered.wait(JOIN_TIMEOUT)
    texts = ["boom", *queries(6)]
    holder: list[Any] = []
    waiting = threading.Thread(
        target=lambda: holder.extend(run_threads(lambda i: batcher.embed(texts[i]), 7)))
    waiting.start()
    wait_queued(batcher, len(texts))
    model.release.set()
    waiting.join(JOIN_TIMEOUT)
    first.join(JOIN_TIMEOUT)
    assert len(holder) == len(texts)
    for outcome in holder:
        assert isinstance(outcome, ServiceUnavailable)
        assert "model crashed on 'boom'" in outcome.message
        assert outcome.details["cause"] == "RuntimeError"
        assert isinstance(outcome.__cause__, RuntimeError)
    # the batcher is not stuck: the next caller gets its vector
    np.testing.assert_array_equal(batcher.embed("after the error"),
                                  HashEmbedder(dim=32).embed(["after the error"])[0])


def test_close_refuses_new_callers_and_serves_queued_ones() -> None:
    model = HeldEmbedder()
    batcher = QueryBatcher(model, max_batch=4, max_wait_ms=0)
    first = threading.Thread(target=batcher.embed, args=("held",))
    first.start()
    assert model.entered.wait(JOIN_TIMEOUT)
    holder: list[Any] = []
    texts = queries(10)  # more than one batch behind the held call
    waiting = threading.Thread(
        target=lambda: holder.extend(run_threads(lambda i: batcher.embed(texts[i]), 10)))
    waiting.start()
    wait_queued(batcher, len(texts))
    batcher.close()
    with pytest.raises(ServiceUnavailable, match="closed"):
        batcher.embed("too late")
    model.release.set()
    waiting.join(JOIN_TIMEOUT)
    first.join(JOIN_TIMEOUT)
    assert not waiting.is_alive() and not first.is_alive()
    assert all(isinstance(v, np.ndarray) for v in holder)
    assert max(len(c) for c in model.calls) <= 4  # max_batch holds


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValidationError) as info:
        QueryBatcher(HashEmbedder(), max_batch=0)
    assert info.value.field == "query_batch_size"
    with pytest.raises(ValidationError) as info:
        QueryBatcher(HashEmbedder(), max_wait_ms=-1)
    assert info.value.field == "query_batch_wait_ms"
    with pytest.raises(ValidationError):
        QueryBatcher(HashEmbedder()).embed(["a list"])  # type: ignore[arg-type]


class PaddingEmbedder(HashEmbedder):
    """An embedder that does not declare its vectors batch-invariant (like the torch model)."""

    batch_invariant = False


def test_only_batch_invariant_embedders_are_batched() -> None:
    assert make_query_batcher(HashEmbedder(), Settings()) is not None
    assert make_query_batcher(HashEmbedder(), Settings(query_batch_size=0)) is None
    assert make_query_batcher(PaddingEmbedder(), Settings()) is None
    with Memory.open(None, embedder=PaddingEmbedder()) as mem:
        define_travel(mem)
        mem.create("Poi", {"name": "Louvre", "city": "Paris"})
        assert mem.engine.query_batcher is None
        assert mem.search("Poi", "museum", k=1).hits  # each query embedded alone


# ---------------------------------------------------------------- through Memory


def filled_memory(path: Path | None, embedder: Any, settings: Settings | None = None
                  ) -> Memory:
    mem = Memory.open(path, embedder=embedder, vector_index=ExactIndex(),
                      settings=settings or Settings())
    define_travel(mem)
    mem.create_many("Poi", [{"name": f"{WORDS[i % 8]} {WORDS[(i * 5) % 8]} {i}",
                             "city": CITIES[i % len(CITIES)], "cost": i % 7}
                            for i in range(120)])
    mem.flush()
    return mem


def answers(mem: Any, text: str, mode: str) -> list[tuple[str, float, list[str]]]:
    where = {"city": "Rome"} if len(text) % 2 else None
    result = mem.search("Poi", text, k=5, mode=mode, where=where)
    return [(h.entity.id, h.score, sorted(h.legs)) for h in result.hits]


def concurrent_answers(mem: Memory, cases: Sequence[tuple[str, str]], workers: int
                       ) -> list[Any]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda case: answers(mem, *case), cases))


def search_cases(n: int) -> list[tuple[str, str]]:
    return [(text, ("hybrid", "vector", "keyword")[i % 3]) for i, text in enumerate(queries(n))]


def test_many_threads_searching_get_the_answers_they_get_one_at_a_time(tmp_path: Path
                                                                       ) -> None:
    cases = search_cases(60)
    with filled_memory(None, HashEmbedder(), Settings(query_batch_size=0)) as alone:
        expected = [answers(alone, *case) for case in cases]
    with filled_memory(tmp_path / "m", HashEmbedder(),
                       Settings(query_batch_wait_ms=5.0)) as mem:
        assert concurrent_answers(mem, cases, workers=16) == expected
        batcher = mem.engine.query_batcher
        assert batcher is not None and batcher.stats.requests == 40  # keyword ones: none
        # and once more, now answered from the query cache
        assert concurrent_answers(mem, cases, workers=16) == expected
        assert batcher.stats.requests == 40


def test_keyword_searches_do_not_wait_behind_the_model(tmp_path: Path) -> None:
    model = HeldEmbedder()
    with filled_memory(tmp_path / "m", HashEmbedder(dim=32)) as seed:
        seed.flush()
    mem = Memory.open(tmp_path / "m", embedder=model, vector_index=ExactIndex())
    try:
        mem.flush()
        model._first = True  # hold the next model call: the vector search below  # noqa: SLF001
        model.entered.clear()
        held = threading.Thread(target=mem.search, args=("Poi", "a held vector search"),
                                kwargs={"mode": "vector"})
        held.start()
        assert model.entered.wait(JOIN_TIMEOUT)
        # the model is busy (held); keyword searches still answer
        hits = [mem.search("Poi", "museum tower", mode="keyword", k=3).hits for _ in range(3)]
        assert all(hits)
        model.release.set()
        held.join(JOIN_TIMEOUT)
        assert not held.is_alive()
    finally:
        model.release.set()
        mem.close()


def test_closing_the_batcher_while_searches_run_does_not_hang(tmp_path: Path) -> None:
    mem = filled_memory(tmp_path / "m", HashEmbedder())
    started = threading.Barrier(9)

    def searching(i: int) -> int:
        if i == 0:  # the engine's close closes the batcher first; the store stays open here
            started.wait(JOIN_TIMEOUT)
            assert mem.engine.query_batcher is not None
            mem.engine.query_batcher.close()
            return 0
        started.wait(JOIN_TIMEOUT)
        done = 0
        for text, mode in search_cases(200)[i::8]:
            try:
                answers(mem, text + " x", mode)
                done += 1
            except Exception:  # noqa: BLE001 - a closed memory refuses; it must not hang
                return done
        return done

    results = run_threads(searching, 9)
    assert all(isinstance(r, int) for r in results), results
    assert mem.engine.query_batcher is not None and mem.engine.query_batcher.closed
    mem.close()


# ---------------------------------------------------------------- the real model


def concurrent_equals_alone(model: Any, tmp_path: Path) -> None:
    """Searches from 16 threads (batched) answer exactly as one at a time (unbatched)."""
    cases = search_cases(48)
    with filled_memory(tmp_path / "alone", model, Settings(query_batch_size=0)) as alone:
        expected = [answers(alone, *case) for case in cases]
    with filled_memory(tmp_path / "together", model, Settings(query_batch_wait_ms=5.0)) as mem:
        assert concurrent_answers(mem, cases, workers=16) == expected
        batcher = mem.engine.query_batcher
        assert batcher is None or batcher.stats.largest > 1  # calls were shared


@pytest.mark.slow
def test_the_torch_model_is_not_batched_and_answers_the_same_concurrently(tmp_path: Path
                                                                          ) -> None:
    from dmf_hybrid import SentenceTransformerEmbedder

    model = SentenceTransformerEmbedder()
    texts = [f"{text} and {WORDS[i % 8]}" * (1 + i % 3) for i, text in enumerate(queries(40))]
    alone = np.vstack([model.embed([text]) for text in texts])
    # batched, sentence-transformers moves vectors by float noise: so it is not batched
    assert not np.array_equal(model.embed(texts), alone)
    assert make_query_batcher(model, Settings()) is None
    cases = search_cases(48)
    with filled_memory(tmp_path / "alone", model, Settings(query_batch_size=0)) as one:
        expected = [answers(one, *case) for case in cases]
    with filled_memory(tmp_path / "together", model) as mem:
        assert concurrent_answers(mem, cases, workers=16) == expected


def test_concurrent_http_searches_answer_as_one_at_a_time(tmp_path: Path) -> None:
    from dmf_hybrid._internal.api import create_app
    from dmf_hybrid._internal.api.server import serve_in_thread
    from dmf_hybrid._internal.client import MemoryClient

    cases = search_cases(48)
    mem = filled_memory(None, HashEmbedder())
    try:
        expected = [answers(mem, *case) for case in cases]
        mem.engine._query_cache.clear()  # noqa: SLF001 - make the server embed every query again
        batcher = mem.engine.query_batcher
        assert batcher is not None
        before = batcher.stats.requests
        settings = Settings(data_dir=tmp_path / "data", embedder="hash", load_examples=False)
        with serve_in_thread(create_app(settings, mem), timeout=10.0) as url:
            clients = [MemoryClient(url, timeout=30.0) for _ in range(8)]
            try:
                with ThreadPoolExecutor(max_workers=8) as pool:
                    got = list(pool.map(lambda i: answers(clients[i % 8], *cases[i]),
                                        range(len(cases))))
            finally:
                for client in clients:
                    client.close()
        assert got == expected
        assert batcher.stats.requests - before == 32  # every vector or hybrid query went through it
    finally:
        mem.close()
