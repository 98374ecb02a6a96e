"""``dmf serve --workers N``: several service processes behind one port on one PostgreSQL
store (a real uvicorn supervisor and its workers on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dmf_hybrid import MemoryClient, VersionConflict
from dmf_hybrid._internal.cli import app
from dmf_hybrid._internal.vector.chroma import ChromaIndex
from evaluation.bench_all import stop_group
from evaluation.chromaserver import ChromaServer
from evaluation.pgserver import PgServer
from evaluation.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0  # two workers importing the service on a busy 2-core machine
#: Distinct words: a keyword search for one finds that entity first.
WORDS = ("amber birch cedar dahlia elm fern ginkgo hazel iris juniper kale lotus maple nettle "
         "olive peony quince rowan sage tulip umber violet willow yarrow zinnia aster basil "
         "clover daisy ember").split()
POI = {"name": "Poi", "identity": ["name"], "embed": "{name} in {city}",
       "fields": {"name": {}, "city": {}}}
#: A counter that If-Match updates raise.
TALLY = {"name": "Tally", "identity": ["name"], "fields": {"name": {}, "count": {"type": "int",
                                                                                  "default": 0}}}


def _workers(supervisor: int) -> list[int]:
    """The worker processes uvicorn's supervisor runs (not multiprocessing's tracker)."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(supervisor)],
                         capture_output=True, text=True, check=False).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "spawn_main" in line]


@pytest.fixture(params=["vectors in each worker", "a Chroma server"])
def chroma_url(request: pytest.FixtureRequest) -> str | None:
    """Where the workers keep their vectors: each in its memory, or a shared Chroma server
    (the test session's, emptied first), which one worker at a time writes (the relay)."""
    if request.param == "vectors in each worker":
        return None
    server: ChromaServer = request.getfixturevalue("chroma_server")
    index = ChromaIndex.http("127.0.0.1", server.port)
    for name in index.collections():
        index.drop(name)
    index.close()
    return server.url


@pytest.fixture
def service(pg_server: PgServer, tmp_path: Path, chroma_url: str | None
            ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DMF_EMBEDDER": "hash",
           "DMF_DATA_DIR": str(tmp_path / "data")}
    env.pop("DMF_STORE_URL", None)
    env.pop("DMF_CHROMA_URL", None)
    if chroma_url is not None:
        env["DMF_CHROMA_URL"] = chroma_url
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmf_hybrid._internal.cli", "serve", "--store", pg_server.fresh(),
         "--workers", "2", "--port", str(port)], cwd=ROOT, env=env, text=True,
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"),  # noqa: SIM115
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        ready = 0
        while ready < 6:  # several answers in a row: both workers are likely up
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                ready = ready + 1 if httpx.get(f"{url}/readyz", timeout=5).status_code == 200 \
                    else 0
            except httpx.HTTPError:
                ready = 0
            time.sleep(0.3)
        yield url, proc
    finally:
        stop_group(proc, 60)  # type: ignore[arg-type]


def test_workers_behind_one_port_answer_as_one_service(
        service: tuple[str, subprocess.Popen[str]], chroma_url: str | None) -> None:
    url, proc = service
    assert len(_workers(proc.pid)) == 2
    with MemoryClient(url, timeout=60) as client:
        client.define_type(POI)
        made = []
        for i in range(20):  # each request goes to either worker: a client reads its writes
            poi = client.create("Poi", {"name": f"{WORDS[i]} garden", "city": "上海"})
            made.append(poi.id)
            assert client.get(poi.id).data.name == f"{WORDS[i]} garden"
            hits = client.search("Poi", f"{WORDS[i]} garden", k=1, mode="keyword").hits
            assert [h.entity.id for h in hits] == [poi.id]
        victim = _workers(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)  # the supervisor starts another
        for i in range(20, 30):
            for _ in range(100):
                try:
                    made.append(client.create("Poi", {"name": f"{WORDS[i]} garden",
                                                      "city": "杭州"}).id)
                    break
                except Exception:  # noqa: BLE001 - a request the killed worker held
                    time.sleep(0.2)
        deadline = time.monotonic() + START_TIMEOUT
        while len(_workers(proc.pid)) < 2 or victim in _workers(proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert sorted(e.id for e in client.query("Poi", limit=100).items) == sorted(made)
        for eid in made[::7]:
            name = client.get(eid).data.name
            assert eid in [h.entity.id for h in client.search("Poi", name, k=3).hits]
        assert client.verify_audit().ok
        if chroma_url is not None:  # the relay (whichever worker leads now) brought it in
            host, port = chroma_url.removeprefix("http://").split(":")
            index = ChromaIndex.http(host, int(port))
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                stored = {vid for name in index.collections() if "Poi" in name
                          for vid in index.records(name)}
                if stored == set(made) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            index.close()
            assert stored == set(made)
            counts = client.reconcile()
            assert counts.missing + counts.stale + counts.orphan == 0


def test_more_than_one_worker_needs_the_shared_engine(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--data", str(tmp_path / "m"), "--workers", "2"],
                                env={"DMF_STORE_URL": None, "DMF_EMBEDDER": "hash"})
    assert result.exit_code != 0
    assert "store_url" in result.output
    assert not (tmp_path / "m").exists()  # nothing opened


def test_eight_clients_and_five_kills_lose_no_acknowledged_write(
        service: tuple[str, subprocess.Popen[str]], chroma_url: str | None) -> None:
    if chroma_url is None:
        pytest.skip("run once, with the whole deployment (a shared Chroma server)")
    url, proc = service
    with MemoryClient(url, timeout=60) as client:
        client.define_type(POI)
        client.define_type(TALLY)
        spots = [client.create("Tally", {"name": f"{WORDS[i]} square"}).id for i in range(3)]
    applied: Counter[str] = Counter()

    def updater(n: int) -> None:  # If-Match updates, retried on a conflict, of the same 3
        with MemoryClient(url, timeout=60) as mine:
            for i in range(10):
                eid = spots[(n + i) % 3]
                while True:
                    current = mine.get(eid)
                    try:
                        mine.update(eid, {"count": current.data.count + 1},
                                    expected_version=current.version)
                        applied[eid] += 1
                        break
                    except VersionConflict:
                        continue

    threads = [threading.Thread(target=updater, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    acked: list[str] = []
    with MemoryClient(url, timeout=60) as client:
        for eid in spots:  # each acknowledged update is there, none lost to another
            entity = client.get(eid)
            assert entity.version == 1 + applied[eid] and entity.data.count == applied[eid]
        for round_ in range(5):  # a burst of writes, a worker killed in the middle of it
            stop = threading.Event()

            def burst(tag: int = round_, stop: threading.Event = stop) -> None:
                with MemoryClient(url, timeout=60) as writer:
                    i = 0
                    while not stop.is_set():
                        try:
                            acked.append(writer.create("Poi", {
                                "name": f"{WORDS[i % len(WORDS)]} stop {tag}x{i}",
                                "city": "Bergen"}).id)
                        except Exception:  # noqa: BLE001 - the request the killed worker held
                            time.sleep(0.05)
                        i += 1

            thread = threading.Thread(target=burst)
            thread.start()
            time.sleep(0.7)
            victim = _workers(proc.pid)[0]
            os.kill(victim, signal.SIGKILL)
            time.sleep(0.7)
            stop.set()
            thread.join()
            deadline = time.monotonic() + START_TIMEOUT
            while len(_workers(proc.pid)) < 2 or victim in _workers(proc.pid):
                assert time.monotonic() < deadline
                time.sleep(0.3)
        stored = {e.id for e in client.query("Poi", {"city": "Bergen"}, limit=1000).items}
        # every acknowledged write is there (one cut off unanswered may be there too)
        assert set(acked) <= stored and len(acked) > 10
        for eid in acked[::5]:
            name = client.get(eid).data.name
            assert eid in [h.entity.id for h in client.search("Poi", name, k=3).hits]
        assert client.verify_audit().ok
