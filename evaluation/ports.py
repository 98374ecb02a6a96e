"""Free TCP ports on 127.0.0.1 for the servers the tests and benchmarks start.

A port found free is closed again before the server binds it, so two processes looking at
the same moment could both be handed it. Under pytest-xdist (``PYTEST_XDIST_WORKER`` set),
each worker therefore takes its ports from a range of its own, below the kernel's ephemeral
range (where ``bind(("127.0.0.1", 0))`` picks them), and never hands out one port twice;
anywhere else the kernel picks.
"""

from __future__ import annotations

import itertools
import os
import socket

#: First port of worker 0's range, and the size of each worker's range.
BASE, SPAN = 12_000, 2_000
#: Workers the ranges leave room for below 32768 (Linux's default ephemeral range).
MAX_WORKERS = 10

_handed: set[int] = set()
_next = itertools.count(os.getpid() % SPAN)  # a rerun starts elsewhere (TIME_WAIT)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return _bound(0)
    start = BASE + (int(worker[2:]) % MAX_WORKERS) * SPAN
    for _ in range(SPAN):
        port = start + next(_next) % SPAN
        if port in _handed:
            continue
        try:
            _handed.add(_bound(port))
        except OSError:  # in use, or lingering from an earlier run
            continue
        return port
    raise RuntimeError(f"no free port left in {start}-{start + SPAN - 1}")


def _bound(port: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])
