"""A pytest plugin that runs LangGraph's published store tests against ``DMFStore``.

Loaded with ``-p evaluation.langgraph_plugin`` (see :mod:`evaluation.langgraph_suite`), it
puts a ``DMFStore`` where LangGraph's tests construct their reference ``InMemoryStore``
(``langgraph.store.memory.InMemoryStore``, replaced before their module is imported), so
their test module runs as published. Each store gets a fresh memory through the door named
by ``--dmf-door``: ``memory`` (an embedded ``Memory``) or ``http`` (a ``MemoryClient`` on a
real uvicorn server on 127.0.0.1 serving that memory). The memory embeds with the test's
``index["embed"]`` (a ``CallerEmbedder``), or the hash embedder when there is no index.

Every test records ``dmf_stores``, how many stores it built, so the report can tell the
tests of a store from those of LangGraph's helpers alone.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, MemoryClient, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.vector.exact import ExactIndex
from dmf_hybrid.integrations.embedder import CallerEmbedder
from dmf_hybrid.integrations.langgraph import DMFStore

DOORS = ("memory", "http")
START_TIMEOUT = 10.0

_opened = ExitStack()
_built = [0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dmf-door", choices=DOORS, default="memory",
                     help="the front door DMFStore reaches its memory by")


def _memory_for(door: str, index: dict[str, Any] | None) -> MemoryAPI:
    """A fresh memory through ``door``, closed when the test ends."""
    embedder = (HashEmbedder() if index is None
                else CallerEmbedder(index["embed"], dim=index.get("dims")))
    memory = _opened.enter_context(Memory.open(None, embedder=embedder,
                                               vector_index=ExactIndex()))
    if door == "memory":
        return memory
    data = Path(tempfile.mkdtemp(prefix="dmf-suite-"))
    _opened.callback(shutil.rmtree, data, True)
    settings = Settings(data_dir=data, embedder="hash", load_examples=False)
    url = _opened.enter_context(serve_in_thread(create_app(settings, memory),
                                                timeout=START_TIMEOUT))
    return _opened.enter_context(MemoryClient(url, timeout=START_TIMEOUT * 3))


def store_class(door: str) -> type[DMFStore]:
    """A ``DMFStore`` constructed as LangGraph's tests construct ``InMemoryStore``."""

    class SuiteStore(DMFStore):
        def __init__(self, *, index: Any = None) -> None:
            _built[0] += 1
            super().__init__(_memory_for(door, index), index=index)

    SuiteStore.__name__ = SuiteStore.__qualname__ = "InMemoryStore"
    return SuiteStore


def pytest_configure(config: pytest.Config) -> None:
    import langgraph.store.memory as reference

    reference.InMemoryStore = store_class(  # type: ignore[misc, assignment]
        config.getoption("--dmf-door"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    before = _built[0]
    try:
        return (yield)
    finally:
        item.user_properties.append(("dmf_stores", _built[0] - before))


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    _opened.close()
