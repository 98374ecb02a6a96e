"""Shared fixtures: a fresh memory on a real engine (DuckDB, file or in-memory, and the test
session's own PostgreSQL) with the test embedder."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, Settings
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.chromaserver import ChromaServer, chroma_executable
from evaluation.pgserver import PgServer, binaries

INDEXES = Path(__file__).resolve().parent.parent / "indexes"


@pytest.fixture(autouse=True)
def _package_logger_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that runs ``dmf serve`` in-process sets the package's logger up as the service
    does (INFO records to stderr); the tests after it in the same process (any of them, under
    pytest-xdist) get it back as it was, so another command's output holds only its own."""
    package = logging.getLogger("dmf_hybrid")
    monkeypatch.setattr(package, "handlers", list(package.handlers))
    for attribute in ("level", "propagate"):
        monkeypatch.setattr(package, attribute, getattr(package, attribute))


class Trip(BaseModel):
    """A planned trip."""

    destination: str
    budget: float = 0
    status: Literal["planned", "booked", "done"] = "planned"
    tags: list[str] = Field(default_factory=list)
    start: dt.date | None = None


class Poi(BaseModel):
    """A point of interest."""

    name: str
    city: str
    cost: float = 0
    rating: int | None = None


def define_travel(mem: MemoryAPI) -> None:
    """Register the small travel types the tests use."""
    mem.define(Poi, identity=["name", "city"], embed="{name} in {city}")
    mem.define(Trip, identity=["destination"], embed="Trip to {destination} {tags}",
               relations={"includes": {"target": "Poi"}, "next": {"target": "Trip",
                                                                  "cardinality": "one"}})


def tenant_like(mem: Memory, tenant: str, **kwargs: Any) -> Memory:
    """The memory of ``tenant`` with the types and rules of ``mem``'s tenant defined for it
    too (each tenant owns its types); ``kwargs`` go to ``for_tenant``."""
    other = mem.for_tenant(tenant, **kwargs)
    with other.transaction():
        for etype in mem.types():
            other.define_type(etype.typedef)
        for rule in mem.rules():
            other.define_rule(rule.model_dump(exclude={"version", "dependencies"}))
    return other


def travel_memory(path: Path, store_url: str | None = None) -> Iterator[Memory]:
    """A memory in ``path`` (DuckDB file; or, given ``store_url``, that PostgreSQL database),
    in-memory exact vectors, hash embedder, travel types."""
    m = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex(),
                    settings=Settings(store_url=store_url))
    define_travel(m)
    yield m
    m.close()


#: The engines the engine-parametrized fixtures run on (DMF_TEST_ENGINES narrows them).
ENGINES = os.environ.get("DMF_TEST_ENGINES", "duckdb,postgresql").split(",")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The test session's PostgreSQL server (started on first use)."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.fail("PostgreSQL's server binaries are missing: `make test` installs them "
                    "(apt-get install postgresql, as root)")
    server = PgServer(bin_dir)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaServer]:
    """The test session's ``chroma run`` server (started on first use; collections are
    named apart by each test, or dropped by it first)."""
    exe = chroma_executable()
    if exe is None:
        pytest.fail("the `chroma` executable (from the chromadb package) is missing")
    server = ChromaServer(exe)
    yield server
    server.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses ``engine`` (through ``mem`` or ``store_url`` too) runs on each."""
    if "engine" in metafunc.fixturenames:
        metafunc.parametrize("engine", ENGINES, indirect=True)


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    """The engine a test runs on (DuckDB when a fixture asks for it by name at run time)."""
    return str(getattr(request, "param", "duckdb"))


@pytest.fixture
def store_url(engine: str, request: pytest.FixtureRequest) -> str | None:
    """None on DuckDB; on PostgreSQL the URL of a fresh database."""
    if engine == "duckdb":
        return None
    server: PgServer = request.getfixturevalue("pg_server")
    return server.fresh()


@pytest.fixture
def mem(tmp_path: Path, store_url: str | None) -> Iterator[Memory]:
    """A memory on each engine: in-memory exact vectors, hash embedder, travel types."""
    yield from travel_memory(tmp_path / "mem", store_url)


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    """Like ``mem``, always embedded (for modules whose ``mem`` goes through both doors)."""
    yield from travel_memory(tmp_path / "memory")


@pytest.fixture
def chroma_mem(tmp_path: Path) -> Iterator[Memory]:
    """A memory in a temp directory with the real embedded Chroma."""
    m = Memory.open(tmp_path / "mem", embedder=HashEmbedder())
    define_travel(m)
    yield m
    m.close()


class LoadsOnFirstUse(HashEmbedder):
    """The test embedder, reporting itself unloaded until it has embedded once (as the real
    model does before it is loaded)."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = False

    def embed(self, texts: list[str]) -> Any:
        self.loaded = True
        return super().embed(texts)


def host_of(embedder: Any) -> Any:
    """An object with ``engine.embedder``: what the model-load helpers look at."""
    return type("Host", (), {"engine": type("Engine", (), {"embedder": embedder})()})()
