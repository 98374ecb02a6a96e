"""Embedding happens outside the store's write lock.

A drain claims the entities it applies and embeds with no lock held, so while one tenant's
batch is embedding, another tenant's writes commit, are embedded and become searchable; a
write of an entity that is being embedded waits for that drain only, and the entity ends with
the vector of its newest text. The embedder is a real one (HashEmbedder) behind a gate that
holds the texts of one tenant until the test opens it: the thing under test is the locking.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel, tenant_like

#: Generous bound for a thread that must finish: only a deadlock or a lock held by the gated
#: drain makes it run out (the assertions never depend on speed).
FINISH = 60.0
GATED = "Hangzhou"


class GatedEmbedder:
    """HashEmbedder that holds any batch with a text naming :data:`GATED` until opened."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.model_id = self.inner.model_id
        self.dim = self.inner.dim
        self.batch_invariant = True
        self.entered = threading.Event()
        self.open = threading.Event()

    def embed(self, texts: list[str]) -> np.ndarray:
        if any(GATED in t for t in texts):
            self.entered.set()
            assert self.open.wait(FINISH), "the gate was never opened"
        return np.asarray(self.inner.embed(texts))


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Memory, GatedEmbedder]]:
    embedder = GatedEmbedder()
    mem = Memory.open(tmp_path / "mem", embedder=embedder, vector_index=ExactIndex())
    define_travel(mem)
    try:
        yield mem, embedder
    finally:
        embedder.open.set()
        mem.close()


def _run(target: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def _ids(mem: Memory, text: str) -> list[str]:
    """The top vector hits: an entity whose exact text is the query has cosine 1."""
    return [h.entity.id for h in mem.search("Poi", text, mode="vector", k=3).hits]


def test_another_tenants_writes_go_on_while_a_batch_is_embedding(
        gated: tuple[Memory, GatedEmbedder]) -> None:
    mem, embedder = gated
    tenant_a, tenant_b = tenant_like(mem, "a"), tenant_like(mem, "b")
    assert _ids(tenant_b, "garden") == []  # the mirrors are loaded (a server's warm-up does it)
    rows = [{"name": f"Tea house {i}", "city": GATED} for i in range(300)]
    batch, batch_errors = _run(lambda: tenant_a.create_many("Poi", rows))
    assert embedder.entered.wait(FINISH)  # tenant a's drain is embedding, gated
    created: list[str] = []
    single, single_errors = _run(lambda: created.append(
        tenant_b.create("Poi", {"name": "Yu Garden", "city": "Shanghai"}).id))
    single.join(FINISH)
    assert not single.is_alive() and not single_errors, single_errors
    assert not embedder.open.is_set() and batch.is_alive()  # a's batch is still embedding
    assert _ids(tenant_b, "Yu Garden in Shanghai") == created  # b's write is searchable already
    updated = tenant_b.update(created[0], {"cost": 40})
    assert updated.version == 2
    embedder.open.set()
    batch.join(FINISH)
    assert not batch.is_alive() and not batch_errors, batch_errors
    mem.flush()
    assert len(tenant_a.query("Poi", {"city": GATED}, limit=500).items) == 300
    wanted = tenant_a.query("Poi", {"name": "Tea house 7"}).items[0].id
    assert wanted in _ids(tenant_a, "Tea house 7 in Hangzhou")
    counts = mem.reconcile()
    assert (counts.missing, counts.stale, counts.orphan) == (0, 0, 0)
    assert mem.verify_audit().ok


def test_an_entity_changed_while_it_is_embedded_ends_with_its_newest_vector(
        gated: tuple[Memory, GatedEmbedder]) -> None:
    mem, embedder = gated
    assert _ids(mem, "lake") == []
    first, first_errors = _run(lambda: mem.create(
        "Poi", {"name": "West Lake", "city": GATED}, id="lake"))
    assert embedder.entered.wait(FINISH)
    # the update commits at once (no lock is held by the embedding drain) and its own drain
    # waits for the drain applying the same entity, then applies the newest state
    second, second_errors = _run(lambda: mem.update("lake", {"name": "Lingyin Temple",
                                                             "city": "Suzhou"}))
    deadline = time.monotonic() + FINISH
    while mem.get("lake").version != 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mem.get("lake").version == 2  # committed while the first text is being embedded
    assert not embedder.open.is_set()
    embedder.open.set()
    for thread in (first, second):
        thread.join(FINISH)
        assert not thread.is_alive()
    assert not first_errors and not second_errors, (first_errors, second_errors)
    mem.flush()
    assert _ids(mem, "Lingyin Temple in Suzhou")[0] == "lake"
    counts = mem.reconcile()
    assert (counts.missing, counts.stale, counts.orphan) == (0, 0, 0)


def test_a_drain_inside_a_transaction_never_waits_for_one_that_needs_the_lock(
        gated: tuple[Memory, GatedEmbedder]) -> None:
    """A transaction that drains (create_many does) while another drain is embedding: it
    applies what it can and commits; the other drain finishes once opened."""
    mem, embedder = gated
    assert _ids(mem, "pagoda") == []
    batch, batch_errors = _run(lambda: mem.create_many(
        "Poi", [{"name": f"Pagoda {i}", "city": GATED} for i in range(50)]))
    assert embedder.entered.wait(FINISH)
    done: list[int] = []

    def in_transaction() -> None:
        with mem.transaction():
            done.append(len(mem.create_many("Poi", [{"name": "Bund", "city": "Shanghai"}])))

    inner, inner_errors = _run(in_transaction)
    inner.join(FINISH)
    assert not inner.is_alive() and not inner_errors and done == [1], inner_errors
    embedder.open.set()
    batch.join(FINISH)
    assert not batch.is_alive() and not batch_errors, batch_errors
    mem.flush()
    assert mem.engine.indexer.pending() == 0
    counts = mem.reconcile()
    assert (counts.missing, counts.stale, counts.orphan) == (0, 0, 0)
