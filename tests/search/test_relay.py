"""The relay: processes of one PostgreSQL store sharing one Chroma server (the test session's
PostgreSQL and ``chroma run``, on 127.0.0.1), of which one at a time writes the index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal import indexer as indexer_module
from dmf_hybrid._internal.store.postgres import _RELAY_LOCK
from dmf_hybrid._internal.vector.chroma import ChromaIndex
from evaluation.chromaserver import ChromaServer
from evaluation.counting import CountingEmbedder
from evaluation.pgserver import PgServer
from tests.conftest import define_travel

pytestmark = pytest.mark.slow  # servers and a second process

ROOT = Path(__file__).resolve().parents[2]
#: Seconds within which another process leads after the leader died (the relay asks every
#: second; a busy 2-core machine gets a margin).
TAKEOVER = 15.0


def wait_for(check: Callable[[], bool], timeout: float = TAKEOVER) -> float:
    """Seconds until ``check()`` held (fails the test past ``timeout``)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def shared(pg_server: PgServer, chroma_server: ChromaServer) -> Settings:
    """Settings of processes sharing a fresh PostgreSQL database and the Chroma server
    (emptied first)."""
    index = ChromaIndex.http("127.0.0.1", chroma_server.port)
    for name in index.collections():
        index.drop(name)
    index.close()
    return Settings(store_url=pg_server.fresh(), chroma_url=chroma_server.url,
                    exact_threshold=5)  # searches of more than 5 candidates ask the index


@pytest.fixture
def opened(tmp_path: Path, shared: Settings) -> Iterator[Callable[..., Memory]]:
    mems: list[Memory] = []

    def open_one(name: str, embedder: HashEmbedder | None = None) -> Memory:
        mem = Memory.open(tmp_path / name, settings=shared, embedder=embedder or HashEmbedder())
        mems.append(mem)
        return mem

    yield open_one
    for mem in reversed(mems):
        mem.close()


def index_state(mem: Memory, type_name: str = "Poi") -> dict[str, Any]:
    """ID -> version of what the shared index holds of a type."""
    index = mem.engine.vectors
    name = mem.engine.indexer.collection(type_name)  # the default tenant's key: its name
    if name not in index.collections():
        return {}
    return {vid: md.get("version") for vid, md in index.records(name).items()}


def pending(mem: Memory) -> int:
    """Outbox rows not relayed yet (by any process)."""
    return mem.engine.indexer.pending()


def repaired(mem: Memory) -> tuple[int, int]:
    """(checked, repaired) of a reconcile."""
    counts = mem.reconcile()
    return counts.checked, counts.missing + counts.stale + counts.orphan


def live_state(mem: Memory) -> dict[str, int]:
    return {e.id: e.version for e in mem.query("Poi", limit=1000).items}


def test_one_process_relays_what_every_process_wrote(opened: Callable[..., Memory]) -> None:
    leader = opened("a", CountingEmbedder())
    define_travel(leader)
    other = opened("b")
    assert leader.engine.indexer.leading and not other.engine.indexer.leading
    made = [other.create("Poi", {"name": f"Place {i}", "city": "Rome"}) for i in range(12)]
    other.update(made[0].id, {"cost": 12.5})
    wait_for(lambda: pending(other) == 0)
    assert index_state(other) == live_state(other) == {
        e.id: (2 if e.id == made[0].id else 1) for e in made}
    # the writer embedded its texts into the shared cache; the leader embedded none of them
    assert leader.engine.embedder.texts == 0  # type: ignore[attr-defined]
    assert repaired(leader) == (12, 0)
    # the one that does not lead applies nothing itself
    assert other.flush() == 0


def test_the_relay_indexes_a_type_another_process_defined_after_it_followed_the_log(
        opened: Callable[..., Memory]) -> None:
    leader = opened("a")
    other = opened("b")
    assert leader.engine.indexer.leading
    define_travel(other)  # the leader has not read the log since: the type is new to it
    made = [other.create("Poi", {"name": f"Place {i}", "city": "Rome"}) for i in range(3)]
    wait_for(lambda: pending(other) == 0)
    assert index_state(other) == {e.id: 1 for e in made}
    assert repaired(leader) == (3, 0)


def test_a_commit_of_another_process_wakes_the_leader(opened: Callable[..., Memory]) -> None:
    """The leader drains at once when another process's commit queued rows (NOTIFY), not at
    its next poll: here a minute away."""
    leader = opened("a")
    define_travel(leader)
    other = opened("b")
    relay = leader.engine.relay
    assert relay is not None and leader.engine.indexer.leading
    relay.interval = 60.0
    time.sleep(1.5)  # the wait begun with the default interval ends; the next is a minute
    made = [other.create("Poi", {"name": f"Place {i}", "city": "Rome"}) for i in range(3)]
    assert wait_for(lambda: pending(other) == 0, timeout=10) < 10
    assert index_state(other) == {e.id: 1 for e in made}


class BrokenEmbedder(HashEmbedder):
    """The test embedder's model, failing: a writer that commits and then cannot embed."""

    def embed(self, texts: list[str]) -> Any:
        raise RuntimeError("the model is gone")


def test_the_relay_embeds_what_a_writer_could_not(opened: Callable[..., Memory],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer_module, "EMBED_GRACE", 1.0)
    leader = opened("a", CountingEmbedder())
    define_travel(leader)
    writer = opened("b", BrokenEmbedder())
    poi = writer.create("Poi", {"name": "Fram museum", "city": "Oslo"})  # committed, not embedded
    start = time.monotonic()
    wait_for(lambda: pending(writer) == 0)
    # the relay waited for the writer first, then embedded the text itself, once
    assert time.monotonic() - start >= 0.8
    assert leader.engine.embedder.texts == 1  # type: ignore[attr-defined]
    assert index_state(leader) == {poi.id: 1}


def test_a_search_finds_what_the_index_does_not_have_yet(
        opened: Callable[..., Memory], shared: Settings) -> None:
    first = opened("first")
    define_travel(first)
    first.create_many("Poi", [{"name": f"Spot {i}", "city": "Oslo"} for i in range(150)])
    wait_for(lambda: pending(first) == 0)
    first.close()  # the index holds 150 Pois: an ANN search finds enough among them alone
    url = shared.store_url
    assert url is not None
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", _RELAY_LOCK)  # nobody else leads
        mem = opened("a")
        assert not mem.engine.indexer.leading
        museum = mem.create("Poi", {"name": "Munch museum", "city": "Oslo"}, id="munch")
        assert pending(mem) == 1 and museum.id not in index_state(mem)
        for mode in ("vector", "hybrid"):
            res = mem.search("Poi", "Munch museum", mode=mode, k=3)
            assert res.receipt.plan == "ann" and res.hits[0].entity.id == museum.id, mode
        # an update the index has not taken: the search scores the current text
        mem.update(museum.id, {"name": "National gallery"})
        res = mem.search("Poi", "National gallery", mode="vector", k=3)
        assert res.hits[0].entity.id == museum.id and res.hits[0].entity.version == 2
        # the same search at the same state: the pending rows were kept for it, and nothing
        # else is read from the database but the log's head, before
        before = mem._store.db.reads()
        assert mem.search("Poi", "National gallery", mode="vector", k=3).hits == res.hits
        assert mem._store.db.reads() - before == 1
    # the lock is free: this process takes the lead and catches up
    wait_for(lambda: mem.engine.indexer.leading and pending(mem) == 0)
    assert index_state(mem) == live_state(mem)


LEADER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from dmf_hybrid import HashEmbedder, Memory, Settings
    url, chroma, workdir = sys.argv[1:4]
    mem = Memory.open(Path(workdir), embedder=HashEmbedder(),
                      settings=Settings(store_url=url, chroma_url=chroma))
    def stuck(point):
        if point == "after_vector_upsert":  # a piece in the index, no row marked done
            Path(workdir, "stuck").write_text("1")
            time.sleep(3600)
    mem.engine.indexer.fault = stuck
    print("leading" if mem.engine.indexer.leading else "following", flush=True)
    time.sleep(3600)
""")


def test_when_the_leader_dies_mid_drain_another_takes_over(
        opened: Callable[..., Memory], shared: Settings, tmp_path: Path) -> None:
    first = opened("setup")
    define_travel(first)
    first.close()  # the leader-to-be opens alone, so it leads
    workdir = tmp_path / "leader"
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(shared.store_url), str(shared.chroma_url),
         str(workdir)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "leading"
        mem = opened("survivor")
        assert not mem.engine.indexer.leading
        # more than one piece of a drain (256 entities), so the leader stops half-way
        made = mem.create_many("Poi", [{"name": f"Site {i}", "city": "Lima"}
                                       for i in range(300)])
        assert len(made) == 300
        wait_for(lambda: (workdir / "stuck").exists(), timeout=60)
        assert 0 < len(index_state(mem)) < 300 and pending(mem) == 300
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        took = wait_for(lambda: mem.engine.indexer.leading)
        wait_for(lambda: pending(mem) == 0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert took < TAKEOVER
    assert index_state(mem) == live_state(mem) and len(live_state(mem)) == 300
    assert repaired(mem) == (300, 0)
    assert mem.verify_audit().ok
