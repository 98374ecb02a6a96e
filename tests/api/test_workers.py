"""``dmf serve --workers N``: several service processes behind one port on one PostgreSQL
store (a real uvicorn supervisor and its workers on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dmf_hybrid import MemoryClient
from dmf_hybrid.cli import app
from dmf_hybrid.vector.chroma import ChromaIndex
from evaluation.bench_all import stop_group
from evaluation.chromaserver import ChromaServer
from evaluation.pgserver import PgServer, free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0  # two workers importing the service on a busy 2-core machine
#: Distinct words: a keyword search for one finds that entity first.
WORDS = ("amber birch cedar dahlia elm fern ginkgo hazel iris juniper kale lotus maple nettle "
         "olive peony quince rowan sage tulip umber violet willow yarrow zinnia aster basil "
         "clover daisy ember").split()
POI = {"name": "Poi", "identity": ["name"], "embed": "{name} in {city}",
       "fields": {"name": {}, "city": {}}}


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
        [sys.executable, "-m", "dmf_hybrid.cli", "serve", "--store", pg_server.fresh(),
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
