"""Fixtures for the HTTP service: the same memory behind three front doors.

``api`` is parametrised over (a) the embedded Memory, (b) MemoryClient over the ASGI app
in-process (httpx.ASGITransport) and (c) MemoryClient over a real uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, Settings
from dmf_hybrid.api import create_app
from dmf_hybrid.api.server import serve_in_thread
from dmf_hybrid.client import MemoryClient
from dmf_hybrid.vector.exact import ExactIndex
from tests.conftest import define_travel

KEYS = ("key-admin:default:admin,key-writer:default:writer,key-reader:default:reader,"
        "key-other:other:admin")
KEY_OF_ROLE = {"admin": "key-admin", "writer": "key-writer", "reader": "key-reader"}
START_TIMEOUT = 10.0


class _AsyncStream(httpx.AsyncByteStream):
    """A synchronous request body (e.g. a generator) as the async stream ASGITransport reads."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._stream:
            yield chunk


class SyncASGITransport(httpx.BaseTransport):
    """httpx.ASGITransport driven from synchronous code by a private event loop thread."""

    def __init__(self, app: FastAPI) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.AsyncByteStream):
            request.stream = _AsyncStream(request.stream)

        async def call() -> httpx.Response:
            response = await self._inner.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers,
                                  content=content)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(START_TIMEOUT * 3)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT)
        self._loop.close()


def serve(app: FastAPI) -> AbstractContextManager[str]:
    """Run ``app`` under uvicorn on a free 127.0.0.1 port in a thread; yields its base URL."""
    return serve_in_thread(app, timeout=START_TIMEOUT)


def open_memory(path: Path | None, **kwargs: Any) -> Memory:
    """A fresh memory with the hash embedder, exact vectors and the test travel types, for
    both tenants of the test keys (each tenant owns its types)."""
    kwargs.setdefault("vector_index", ExactIndex())
    mem = Memory.open(path, embedder=HashEmbedder(), **kwargs)
    define_travel(mem)
    define_travel(mem.for_tenant("other"))
    return mem


@dataclass
class Front:
    """One front door: ``mem`` (tenant "default", admin), ``other`` (tenant "other").

    ``embedded`` is the Memory behind every front door (tenant "default"): a test compares what
    a front door answers with what the embedded Memory answers for the same state.
    """

    kind: str
    mem: MemoryAPI
    other: MemoryAPI
    as_role: Callable[[str | None], MemoryClient] | None = None
    with_key: Callable[[str | None], MemoryClient] | None = None
    base_url: str | None = None
    transport: httpx.BaseTransport | None = None
    embedded: Memory | None = None

    @property
    def http(self) -> bool:
        return self.kind != "memory"

    def raw(self, api_key: str | None = "key-admin") -> httpx.Client:
        """A plain httpx client on the same server (for status codes and headers)."""
        assert self.base_url is not None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.Client(base_url=self.base_url, transport=self.transport, headers=headers,
                            timeout=START_TIMEOUT)


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"data_dir": tmp_path / "data", "embedder": "hash",
                              "api_keys": KEYS, "load_examples": False}
    values.update(overrides)
    return Settings(**values)


@contextmanager
def http_front(kind: str, app: FastAPI, mem: Memory) -> Iterator[Front]:
    """MemoryClients for ``app`` served in-process (asgi) or by uvicorn; closed afterwards."""
    clients: list[MemoryClient] = []
    transports: list[SyncASGITransport] = []

    def make(base_url: str) -> Callable[[str | None], MemoryClient]:
        def client(api_key: str | None) -> MemoryClient:
            transport = None
            if kind == "asgi":
                transport = SyncASGITransport(app)
                transports.append(transport)
            c = MemoryClient(base_url, api_key=api_key, timeout=START_TIMEOUT,
                             transport=transport)
            clients.append(c)
            return c
        return client

    @contextmanager
    def base() -> Iterator[str]:
        if kind == "asgi":
            yield "http://testserver"
        else:
            with serve(app) as url:
                yield url

    with base() as url:
        factory = make(url)
        raw_transport = SyncASGITransport(app) if kind == "asgi" else None
        if raw_transport is not None:
            transports.append(raw_transport)
        front = Front(kind, factory("key-admin"), factory("key-other"),
                      as_role=lambda role: factory(KEY_OF_ROLE[role] if role else None),
                      with_key=factory,
                      base_url=url, transport=raw_transport, embedded=mem)
        try:
            yield front
        finally:
            for c in clients:
                c.close()
            for t in transports:
                t.close()


@pytest.fixture(params=["memory", "asgi", "uvicorn", "uvicorn-postgresql"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Front]:
    """The same memory behind each front door (see the module docstring); the last, the
    service on the PostgreSQL engine."""
    door, mem = _door(request)
    try:
        if door == "memory":
            yield Front("memory", mem, mem.for_tenant("other"), embedded=mem)
            return
        app = create_app(_settings(tmp_path), mem)
        with http_front(door, app, mem) as front:
            yield front
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
        app = create_app(_settings(tmp_path, max_body_bytes=64 * 1024), mem)
        with http_front(door, app, mem) as front:
            yield front
    finally:
        mem.close()


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """Settings for a test server in ``tmp_path`` (hash embedder, test keys) with overrides."""
    return lambda **overrides: _settings(tmp_path, **overrides)
