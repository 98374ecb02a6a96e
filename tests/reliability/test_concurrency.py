"""Concurrency: If-Match writers over HTTP lose nothing; readers never see half a transaction."""

from __future__ import annotations

import threading
from pathlib import Path

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation import reliability
from evaluation.reliability_service import COUNTER_TYPE, run_concurrency


def test_concurrent_if_match_writers_lose_no_update(tmp_path: Path, store_url: str | None
                                                    ) -> None:
    sizes = reliability.SMALL
    figures = run_concurrency(tmp_path, writers=sizes.writers, updates=sizes.updates,
                              transfers=4, readers=2, seed=1, store_url=store_url)
    assert figures.problems == []
    assert figures.lost_updates == 0
    assert figures.successful_updates == sizes.writers * sizes.updates
    assert figures.concurrent_updates == figures.successful_updates + figures.conflicts
    assert figures.transfers == 2 * 4
    assert figures.reader_checks > 0 and figures.reader_violations == 0


def test_last_seq_never_names_an_uncommitted_event(store_url: str | None) -> None:
    """A seq read while another thread's transaction is open must be a stable as_of."""
    mem = Memory.open(store_url, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        mem.define_type(COUNTER_TYPE)
        before = mem.last_seq()
        opened, release = threading.Event(), threading.Event()

        def writer(fail: bool) -> None:
            try:
                with mem.transaction():
                    mem.create("Counter", {"name": f"c-{fail}"})
                    opened.set()
                    release.wait(10)
                    if fail:
                        raise RuntimeError("roll back")
            except RuntimeError:
                pass

        for fail, committed in ((True, before), (False, before + 1)):
            opened.clear()
            release.clear()
            thread = threading.Thread(target=writer, args=(fail,))
            thread.start()
            assert opened.wait(10)
            seen: list[int] = []

            def read(seen: list[int] = seen) -> None:
                seen.append(mem.last_seq())

            reader = threading.Thread(target=read)
            reader.start()
            reader.join(10)
            # answered at once, with the last committed seq, never the open transaction's
            assert seen == [before], "last_seq answered with the open transaction's seq"
            release.set()
            thread.join(10)
            assert mem.last_seq() == committed
            before = committed
    finally:
        mem.close()
