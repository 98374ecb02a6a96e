"""Shared fixtures: a fresh memory on real DuckDB (file or in-memory) with the test embedder."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI
from dmf_hybrid.vector.exact import ExactIndex

INDEXES = Path(__file__).resolve().parent.parent / "indexes"


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


def travel_memory(path: Path) -> Iterator[Memory]:
    """A memory in ``path``: DuckDB file, in-memory exact vectors, hash embedder, travel types."""
    m = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(m)
    yield m
    m.close()


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    """A memory in a temp directory: DuckDB file, in-memory exact vectors, hash embedder."""
    yield from travel_memory(tmp_path / "mem")


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
