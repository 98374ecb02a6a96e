"""The front doors, from one place: every behaviour test reaches the memory through these.

A door is the embedded ``Memory`` itself (``memory``), a ``MemoryClient`` over the ASGI app
in-process (``asgi``, httpx.ASGITransport) or a ``MemoryClient`` over a real uvicorn server
on 127.0.0.1 (``uvicorn``), each serving one embedded memory. :func:`front` opens one; the
``api`` fixture (tests/api) and ``both_doors`` (tests/store) are built on it.
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
from fastapi import FastAPI

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.client import MemoryClient
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel

KEYS = ("key-admin:default:admin,key-writer:default:writer,key-reader:default:reader,"
        "key-other:other:admin")
KEY_OF_ROLE = {"admin": "key-admin", "writer": "key-writer", "reader": "key-reader"}
START_TIMEOUT = 10.0
#: Seconds a door's client waits for an answer (a bulk write on a busy machine takes a while).
CLIENT_TIMEOUT = START_TIMEOUT * 3


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


def service_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings of a test service in ``tmp_path``: hash embedder, the test keys, no examples."""
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
            c = MemoryClient(base_url, api_key=api_key, timeout=CLIENT_TIMEOUT,
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


@contextmanager
def front(kind: str, memory: Memory, settings: Settings) -> Iterator[Front]:
    """``memory`` behind door ``kind`` (``memory``, ``asgi`` or ``uvicorn``); a service door
    serves it with ``settings``. The memory stays open afterwards."""
    if kind == "memory":
        yield Front("memory", memory, memory.for_tenant("other"), embedded=memory)
        return
    with http_front(kind, create_app(settings, memory), memory) as door:
        yield door
