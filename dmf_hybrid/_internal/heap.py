"""Giving memory that bulk work freed back to the operating system.

Indexing large texts allocates and frees a lot (the texts, their terms, the tokenizer's
buffers, numpy's temporaries). glibc's allocator keeps freed memory in the process's heap for
reuse, and a heap fragmented by a few long-lived objects is never shrunk by itself: 600 texts
of 120 KB left the service ~70 MB larger than what it still used
(``evaluation/bench_keyword_memory.py``). After every :data:`TRIM_AFTER` characters of text handled,
:func:`handled` asks glibc to return its free pages (``malloc_trim``, a few milliseconds).
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

#: Characters of text handled between two trims.
TRIM_AFTER = 8_000_000

_lock = threading.Lock()
_since_trim = 0
_libc: Any = None
_looked_up = False


def _malloc_trim() -> Any:
    global _libc, _looked_up
    if not _looked_up:
        _looked_up = True
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            _libc = libc if libc is not None and hasattr(libc, "malloc_trim") else None
        except OSError:
            _libc = None
    return None if _libc is None else _libc.malloc_trim


def trim() -> bool:
    """Return the heap's free memory to the operating system now; False where it cannot."""
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return False
    started = time.perf_counter()
    malloc_trim(0)
    log.debug("heap trimmed in %.1f ms", 1000 * (time.perf_counter() - started))
    return True


def handled(chars: int) -> bool:
    """Count ``chars`` characters of text handled; trim once :data:`TRIM_AFTER` have been since
    the last trim. Whether it trimmed."""
    global _since_trim
    with _lock:
        _since_trim += chars
        if _since_trim < TRIM_AFTER:
            return False
        _since_trim = 0
    return trim()
