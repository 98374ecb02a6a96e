"""The heap trim after bulk indexing: it runs past its bound, not before, and frees memory."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from dmf_hybrid._internal import heap

GLIBC = sys.platform.startswith("linux") and ctypes.util.find_library("c") is not None


def rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_small_blocks_go_back_to_the_system() -> None:
    # many small blocks (below the mmap threshold) with a survivor at the heap's top: glibc
    # keeps the freed pages until asked
    blocks = [ctypes.create_string_buffer(8_000) for _ in range(20_000)]
    keep = blocks[-1]
    del blocks
    before = rss_kb()
    assert heap.trim()
    assert rss_kb() < before - 50_000  # at least 50 of the ~160 MB freed
    assert keep.raw[:1] == b"\0"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_it_trims_once_enough_text_was_handled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_since_trim", 0)
    assert not heap.handled(heap.TRIM_AFTER - 1)
    assert heap.handled(1)
    assert not heap.handled(heap.TRIM_AFTER // 2)  # counted afresh from the trim
