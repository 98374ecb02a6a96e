"""Fixtures for the HTTP service: the same memory behind each front door (tests/doors.py).

``api`` is parametrised over (a) the embedded Memory, (b) MemoryClient over the ASGI app
in-process (httpx.ASGITransport), (c) MemoryClient over a real uvicorn server on 127.0.0.1
and (d) that on the PostgreSQL engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dmf_hybrid import Memory, Settings
from tests.doors import Front, front, open_memory, service_settings


@pytest.fixture(params=["memory", "asgi", "uvicorn", "uvicorn-postgresql"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Front]:
    """The same memory behind each front door (see the module docstring); the last, the
    service on the PostgreSQL engine."""
    door, mem = _door(request)
    try:
        with front(door, mem, service_settings(tmp_path)) as opened:
            yield opened
    finally:
        mem.close()


def _door(request: pytest.FixtureRequest) -> tuple[str, Memory]:
    """The door a fixture's parameter names ("uvicorn-postgresql": uvicorn, the store in the
    test session's PostgreSQL) and a fresh memory behind it."""
    door, _, engine = str(request.param).partition("-")
    if engine:
        url = request.getfixturevalue("pg_server").fresh()
        return door, open_memory(None, settings=Settings(store_url=url))
    return door, open_memory(None)  # in-memory DuckDB: writes are ~3x faster than on a file


@pytest.fixture(params=["asgi", "uvicorn", "uvicorn-postgresql"])
def http_api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Front]:
    """Only the HTTP front doors (auth, status codes, limits); the last, on PostgreSQL."""
    door, mem = _door(request)
    try:
        with front(door, mem, service_settings(tmp_path, max_body_bytes=64 * 1024)) as opened:
            yield opened
    finally:
        mem.close()


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """Settings for a test server in ``tmp_path`` (hash embedder, test keys) with overrides."""
    return lambda **overrides: service_settings(tmp_path, **overrides)
