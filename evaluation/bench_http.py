"""Benchmark of HTTP ``POST /search`` under concurrency, against the real service process.

``python -m evaluation.bench_http [--n 2000] [--embedder minilm|hash] [--requests 120]``

1. Starts ``python -m dmf_hybrid._internal.api.server`` as a subprocess on a free 127.0.0.1 port
with a
   fresh temporary data directory (``DMF_LOAD_EXAMPLES=false``) and waits, bounded, for
   ``/healthz`` and ``/readyz``.
2. Defines a ``BenchNote`` type (``POST /types``) and ingests ``--n`` synthetic notes over HTTP
   (``POST /entities/BenchNote/batch``), then waits for ``/readyz`` (outbox drained); then
   creates the same rows, in the same batches, in an embedded ``Memory`` with the same
   embedder, for the ratio of the two ingest rates.
3. For every mode (hybrid, vector, keyword) and concurrency level (1, 4, 16 clients) sends a
   fixed number of distinct queries (no query-embedding cache hits) and records per-request
   latency, requests/s and the server's own ``receipt.timings_ms.total_ms``. The requests are
   split into ``--rounds`` rounds and every round visits every (mode, level) cell, in a rotated
   order, so that the slow drift of a shared, noisy machine spreads over all cells instead of
   biasing the last ones. Latencies are pooled over rounds; p50 is the median.
4. Stops the server by its PID (SIGTERM, then SIGKILL after a bounded wait).

Writes JSON (``--out``), a markdown table (same stem, ``.md``) and a PNG of latency and
throughput against concurrency (same stem, ``.png``).

Why httpx with threads: this is a closed-loop test (each client sends its next request when the
previous answer arrives), which is what agents calling the memory do, and one thread per client
with one shared, pooled ``httpx.Client`` (thread-safe, keep-alive) models it directly; the GIL is
released while a thread waits on its socket. The client shares the 2 cores with the server and
spends 1.5-2.5 ms of CPU per request (measured per cell), about what the server does, so these
figures are for "client and server on one small machine", as an agent running beside its
memory would see them.

``--driver wrk`` measures the server alone: each cell is driven by wrk
(:mod:`evaluation.wrk_driver`, Debian's ``wrk``) for ``--wrk-seconds`` per round, whose own
CPU per request is a few microseconds, so the throughput against the number of clients is
the service's scaling on the cores it has. The peer is not measured then (its client must
embed every query itself, in Python).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.chroma_peer import ChromaPeer, cpu_seconds, rss_mb, running_peer, stop_process
from evaluation.plotting import (
    environment,
    latency_summary,
    line_plots,
    markdown_table,
    write_results,
)
from evaluation.ports import free_port
from evaluation.wrk_driver import WrkResult, require_wrk, run_wrk, wait_until_idle

log = logging.getLogger("bench_http")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_http.json"
MODES = ("hybrid", "vector", "keyword")
LEVELS = (1, 4, 16, 64)
#: The mode name of the Chroma-server peer's cells (a vector search, embedded client-side).
PEER = "chroma-peer"
#: Who sends the requests: Python threads with httpx (the default), or wrk (the server alone).
DRIVERS = ("httpx", "wrk")
#: Distinct queries a wrk run cycles through: more than the service's query cache holds, so
#: a query that comes round again has left the cache.
WRK_BODIES = 4096
TYPE_NAME = "BenchNote"
CATEGORIES = tuple(f"topic{i}" for i in range(10))
BENCH_TYPE: dict[str, Any] = {
    "name": TYPE_NAME,
    "fields": {
        "title": {"type": "str", "required": True, "nullable": False},
        "body": {"type": "str"},
        "category": {"type": "enum", "values": list(CATEGORIES)},
        "year": {"type": "int"},
    },
    "identity": ["title"],
    "embed": "{title}: {body}",
}
# Real English words, so the model tokenises them as it would real notes and BM25 sees a
# realistic vocabulary (a few hundred terms shared by many documents).
WORDS = (
    "travel hotel flight booking museum beach mountain river city village train station "
    "airport ticket passport luggage dinner lunch breakfast restaurant menu coffee tea wine "
    "cheese bread market shop price budget cost refund invoice payment card cash bank loan "
    "account customer order delivery package shipping return warranty repair phone laptop "
    "screen battery charger cable printer camera lens photo video music concert theatre film "
    "book novel author poem library school teacher student exam lesson course project report "
    "meeting deadline calendar schedule holiday weekend morning evening night winter summer "
    "spring autumn rain snow wind storm sun garden flower tree forest park lake island bridge "
    "road car bus bicycle taxi parking fuel engine doctor hospital medicine appointment dentist "
    "health sport football tennis swimming running yoga gym friend family mother father sister "
    "brother child birthday wedding party gift letter email message call contact address "
    "neighbour house apartment kitchen bedroom window door key rent contract insurance tax "
    "salary job interview office manager team client product feature bug release update "
    "quiet busy cheap expensive early late new old small large favourite important urgent"
).split()


# ---------------------------------------------------------------- data


def make_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` deterministic BenchNote rows: a short title, a ~25-word body, a category, a year."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        title = " ".join(rng.choices(WORDS, k=rng.randint(3, 5))) + f" #{i}"
        body = " ".join(rng.choices(WORDS, k=rng.randint(18, 32)))
        rows.append({"title": title, "body": body, "category": CATEGORIES[i % len(CATEGORIES)],
                     "year": 2015 + i % 10})
    return rows


def make_queries(count: int, seed: int = 11) -> list[str]:
    """``count`` distinct 3–6 word query texts (distinct, so no query-embedding cache hits)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    queries: list[str] = []
    while len(queries) < count:
        text = " ".join(rng.choices(WORDS, k=rng.randint(3, 6)))
        if text not in seen:
            seen.add(text)
            queries.append(text)
    return queries


# ---------------------------------------------------------------- the service process


@dataclass
class ServerProcess:
    """The service run as ``python -m dmf_hybrid._internal.api.server`` in a child process."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started: float  # time.perf_counter() just before the spawn
    _log_file: Any = field(default=None, repr=False)

    @classmethod
    def start(cls, data_dir: Path, *, embedder: str, log_path: Path,
              port: int | None = None, extra_env: Mapping[str, str] | None = None
              ) -> ServerProcess:
        """Spawn the server on 127.0.0.1 over ``data_dir``; returns at once (not ready yet)."""
        port = port or free_port()
        # Inherited DMF_* variables (API keys, another data dir) would change what is measured.
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}
        env.update({"DMF_DATA_DIR": str(data_dir), "DMF_PORT": str(port),
                    "DMF_HOST": "127.0.0.1", "DMF_LOAD_EXAMPLES": "false",
                    "DMF_EMBEDDER": embedder, "PYTHONUNBUFFERED": "1"})
        env.update(extra_env or {})
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "wb")  # closed in stop()
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "dmf_hybrid._internal.api.server"], cwd=ROOT,
                                env=env, stdout=log_file, stderr=subprocess.STDOUT)
        return cls(proc, port, log_path, started, log_file)

    @property
    def url(self) -> str:
        """The base URL of the service."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server's log (for error messages)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_for(self, path: str, timeout: float, interval: float = 0.02) -> float:
        """Seconds from spawn until ``GET path`` answered 200; RuntimeError after ``timeout``."""
        deadline = time.perf_counter() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with code {self.proc.returncode} "
                                       f"before {path} answered:\n{self.log_tail()}")
                try:
                    if client.get(self.url + path).status_code == 200:
                        return time.perf_counter() - self.started
                except httpx.TransportError:
                    pass  # not listening yet
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{path} did not answer 200 within {timeout:.0f} s:\n"
                                       f"{self.log_tail()}")
                time.sleep(interval)

    def stop(self, timeout: float = 30.0) -> int:
        """Stop the server by its PID (SIGTERM, then SIGKILL); returns its exit code.

        After a graceful shutdown the code is ``-SIGTERM``: uvicorn re-raises the signal it
        caught once the app's shutdown (which closes the memory) has completed.
        """
        code = stop_process(self.proc, self._log_file, timeout)
        self._log_file = None
        return code


@contextmanager
def running_server(data_dir: Path, *, embedder: str, log_path: Path, ready_timeout: float,
                   extra_env: Mapping[str, str] | None = None
                   ) -> Iterator[tuple[ServerProcess, dict[str, float]]]:
    """A started, ready server and its start-up times; it is stopped on the way out.

    The times dict gains ``exit_code`` (the server's, after SIGTERM) when the block ends.
    """
    server = ServerProcess.start(data_dir, embedder=embedder, log_path=log_path,
                                 extra_env=extra_env)
    times: dict[str, float] = {}
    try:
        times["spawn_to_healthz_s"] = round(server.wait_for("/healthz", ready_timeout), 3)
        times["spawn_to_readyz_s"] = round(server.wait_for("/readyz", ready_timeout), 3)
        yield server, times
    finally:
        times["exit_code"] = server.stop()


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit, so ``finally`` blocks stop the server and clean up."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


# ---------------------------------------------------------------- ingest and load


def ingest(client: httpx.Client, rows: Sequence[Mapping[str, Any]], batch: int) -> float:
    """Define BenchNote and create ``rows`` in batches over HTTP; returns the seconds taken."""
    response = client.post("/types", json=BENCH_TYPE)
    response.raise_for_status()
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        response = client.post(f"/entities/{TYPE_NAME}/batch",
                               json={"rows": list(rows[i:i + batch])})
        if response.status_code != 201:
            raise RuntimeError(f"batch ingest failed: {response.status_code} {response.text}")
    return time.perf_counter() - start


@dataclass
class Cell:
    """The samples of one (mode, concurrency) cell, pooled over rounds."""

    mode: str
    concurrency: int
    latencies: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    wall: float = 0.0
    ok: int = 0
    errors: int = 0
    truncated: bool = False
    round_rps: list[float] = field(default_factory=list)
    #: What the first failed requests answered or raised (at most ``FAILURES_KEPT``).
    failures: list[str] = field(default_factory=list)
    server_cpu_s: float | None = 0.0  # CPU the serving process used (None: unknown)
    client_cpu_s: float = 0.0  # CPU this process used: HTTP clients (and the peer's embedding)
    #: with the wrk driver: what each round's run measured (wrk keeps the latencies)
    wrk_runs: list[WrkResult] = field(default_factory=list)

    def add_wrk(self, run: WrkResult) -> None:
        """Count one wrk run into the cell, as :func:`drive` counts a round of its own."""
        self.wrk_runs.append(run)
        self.ok += run.ok
        self.errors += run.status_errors + run.socket_errors
        self.wall += run.seconds
        self.round_rps.append(round(run.ok / run.seconds, 2) if run.seconds > 0 else 0.0)
        self.client_cpu_s += run.client_cpu_s


FAILURES_KEPT = 5


Send = Callable[[Mapping[str, Any]], tuple[int, float | None]]


def post_search(client: httpx.Client) -> Send:
    """A sender of bodies to POST /search: (status, the server's own total ms)."""

    def send(body: Mapping[str, Any]) -> tuple[int, float | None]:
        response = client.post("/search", json=body)
        if response.status_code != 200:  # recorded by drive() as a failure, with the body
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
        return 200, response.json()["receipt"].get("timings_ms", {}).get("total_ms")
    return send


def peer_search(peer: ChromaPeer) -> Send:
    """A sender of bodies to the Chroma peer: embed the text here, query the server."""

    def send(body: Mapping[str, Any]) -> tuple[int, float | None]:
        peer.search(body["text"], body["k"])
        return 200, None
    return send


def drive(send: Send, bodies: Sequence[Mapping[str, Any]], concurrency: int,
          deadline: float, cell: Cell) -> None:
    """Send ``bodies`` from ``concurrency`` closed-loop clients into ``cell``."""
    lock = threading.Lock()
    next_index = 0
    barrier = threading.Barrier(concurrency + 1)
    stop = threading.Event()  # the run is being stopped (SIGTERM from bench_all, Ctrl-C)

    def client_loop() -> list[tuple[float, int, float | None]]:
        nonlocal next_index
        samples: list[tuple[float, int, float | None]] = []
        barrier.wait()
        while not stop.is_set():
            with lock:
                index = next_index
                next_index += 1
            if index >= len(bodies) or time.perf_counter() > deadline:
                return samples
            start = time.perf_counter()
            try:
                status, server = send(bodies[index])
            except Exception as exc:  # noqa: BLE001 - counted as an error of the cell
                log.warning("request failed: %s", exc)
                status, server = 0, None
                with lock:
                    if len(cell.failures) < FAILURES_KEPT:
                        cell.failures.append(f"{type(exc).__name__}: {exc}"[:400])
            samples.append((time.perf_counter() - start, status, server))
        return samples

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        try:
            futures = [pool.submit(client_loop) for _ in range(concurrency)]
            barrier.wait()
            start = time.perf_counter()
            results = [f.result() for f in futures]
        except BaseException:
            # interrupted (bench_all's SIGTERM raises SystemExit here): the clients must end,
            # or the pool's shutdown waits for them forever, those still at the barrier too
            stop.set()
            barrier.abort()
            raise
        wall = time.perf_counter() - start
    ok = 0
    for samples in results:
        for seconds, status, server in samples:
            if status == 200:
                ok += 1
                cell.latencies.append(seconds)
                if server is not None:
                    cell.server_ms.append(float(server))
            else:
                cell.errors += 1
    cell.ok += ok
    cell.wall += wall
    cell.round_rps.append(round(ok / wall, 2) if wall > 0 else 0.0)
    if sum(len(s) for s in results) < len(bodies):
        cell.truncated = True


def load_test(client: httpx.Client, *, modes: Sequence[str], levels: Sequence[int],
              requests: int, rounds: int, k: int, max_seconds: float, seed: int,
              server_pid: int, peer: ChromaPeer | None = None,
              wrk_seconds: int | None = None) -> list[Cell]:
    """Every (mode, level) cell driven with ``requests`` distinct queries over ``rounds``
    (with ``peer``, its cells too, in the same rotation); each cell also adds up the CPU
    time of the process serving it (``server_pid``, or the peer's server) and of the clients.

    ``wrk_seconds``: wrk drives each cell for that many seconds per round instead (from
    :data:`WRK_BODIES` distinct queries of its own; ``requests`` is then unused).
    """
    senders = {m: post_search(client) for m in modes}
    serving = dict.fromkeys(modes, server_pid)
    if peer is not None:
        senders[PEER] = peer_search(peer)
        serving[PEER] = peer.proc.pid
    cells = {(m, c): Cell(m, c) for m in senders for c in levels}
    per_round = [requests // rounds + (1 if r < requests % rounds else 0) for r in range(rounds)]
    per_run = WRK_BODIES if wrk_seconds is not None else max(per_round)
    queries = iter(make_queries(len(cells) * rounds * per_run, seed=seed))
    deadline = time.perf_counter() + max_seconds
    remaining = rounds * len(cells)
    order = list(cells)
    for r in range(rounds):
        shift = r % len(order)
        for mode, level in order[shift:] + order[:shift]:
            bodies = [{"type": TYPE_NAME, "text": next(queries), "k": k, "mode": mode}
                      for _ in range(per_run if wrk_seconds is not None else per_round[r])]
            # a cell may use its share of the time left: fast cells leave more to slow ones
            now = time.perf_counter()
            cell = cells[(mode, level)]
            pid = serving[mode]
            server_before, client_before = cpu_seconds(pid), time.process_time()
            if wrk_seconds is not None:
                cell.add_wrk(run_wrk(str(client.base_url.join("/search")), bodies, level,
                                     wrk_seconds))
            else:
                drive(senders[mode], bodies, level,
                      now + max(deadline - now, 0.0) / remaining, cell)
                cell.client_cpu_s += time.process_time() - client_before
            server_after = cpu_seconds(pid)
            if server_before is None or server_after is None or cell.server_cpu_s is None:
                cell.server_cpu_s = None  # /proc could not tell
            else:
                cell.server_cpu_s += server_after - server_before
            if wrk_seconds is not None:  # requests in flight when wrk stopped finish first
                wait_until_idle(partial(cpu_seconds, pid))
            remaining -= 1
            log.info("round %d %s x%d: %d ok so far", r + 1, mode, level, cell.ok)
    return list(cells.values())


def summarise(cell: Cell) -> dict[str, Any]:
    """One result row: latency percentiles, requests/s, server time, errors.

    With the wrk driver, p50 and p95 are the medians of the rounds' own percentiles (wrk
    reports percentiles, not samples) and the mean is weighted by requests.
    """
    if cell.wrk_runs:
        runs = cell.wrk_runs
        latency = {"p50_ms": round(statistics.median(w.p50_ms for w in runs), 3),
                   "p95_ms": round(statistics.median(w.p95_ms for w in runs), 3),
                   "mean_ms": round(sum(w.mean_ms * w.ok for w in runs) / cell.ok, 3)
                   if cell.ok else math.nan}
    else:
        latency = latency_summary(cell.latencies)
    server = latency_summary([ms / 1000.0 for ms in cell.server_ms])
    return {
        "mode": cell.mode,
        "concurrency": cell.concurrency,
        "requests": cell.ok,
        "errors": cell.errors,
        "p50_ms": latency["p50_ms"],
        "p95_ms": latency["p95_ms"],
        "mean_ms": latency["mean_ms"],
        "rps": round(cell.ok / cell.wall, 2) if cell.wall > 0 else 0.0,
        "rps_per_round": cell.round_rps,
        "server_p50_ms": server["p50_ms"] if cell.server_ms else None,  # the peer, wrk: none
        "truncated": cell.truncated,
        "failures": cell.failures,
        "server_cpu_ms_per_request": (round(cell.server_cpu_s * 1000 / cell.ok, 2)
                                      if cell.ok and cell.server_cpu_s is not None else None),
        "client_cpu_ms_per_request": (round(cell.client_cpu_s * 1000 / cell.ok, 2)
                                      if cell.ok else None),
    }


def embedded_ingest(rows: Sequence[Mapping[str, Any]], embedder: str, batch: int, path: Path
                    ) -> float:
    """Seconds ``Memory.create_many`` takes for ``rows`` in batches of ``batch`` (as the HTTP
    ingest sends them) in a fresh embedded memory at ``path`` with the same embedder, model
    loaded beforehand; each batch is indexed when it commits, as over HTTP."""
    from dmf_hybrid import Memory
    from dmf_hybrid._internal.config import Settings

    mem = Memory.open(path, settings=Settings(embedder=embedder, load_examples=False))
    try:
        mem.define_type(BENCH_TYPE)
        load = getattr(mem.engine.embedder, "load", None)
        if callable(load):
            load()
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            mem.create_many(TYPE_NAME, rows[i:i + batch])
        return time.perf_counter() - start
    finally:
        mem.close()


# ---------------------------------------------------------------- the run


def run(*, n: int = 2000, embedder: str = DEFAULT_EMBEDDER, modes: Sequence[str] = MODES,
        levels: Sequence[int] = LEVELS, requests: int = 120, rounds: int = 3, k: int = 10,
        batch: int = 250, warmup: int = 5, max_seconds: float = 600.0,
        ready_timeout: float = 300.0, seed: int = 7, workdir: Path | None = None,
        server_env: Mapping[str, str] | None = None, peer: bool = True,
        driver: str = "httpx", wrk_seconds: int = 5) -> dict[str, Any]:
    """Start the service, ingest ``n`` notes, load-test /search; the results document.

    ``server_env``: extra environment variables of the server process (e.g.
    ``OMP_NUM_THREADS``), recorded in the configuration. ``peer``: also start a ``chroma
    run`` server with the same rows and measure it in the same rounds (:mod:`.chroma_peer`).
    ``driver``: "httpx" (Python client threads, ``requests`` per cell) or "wrk" (each cell
    driven by wrk for ``wrk_seconds`` per round: the server's own scaling; no peer, whose
    client must embed the queries itself).
    """
    if rounds < 1 or requests < rounds:
        raise ValueError("need rounds >= 1 and requests >= rounds")
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}; choose from {list(DRIVERS)}")
    if driver == "wrk":
        require_wrk()
        if wrk_seconds < 1:
            raise ValueError("need wrk_seconds >= 1")
        peer = False
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown modes {unknown}; choose from {list(MODES)}")
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dmf-bench-http-", dir=workdir))
    try:
        with running_server(tmp / "data", embedder=embedder, log_path=tmp / "server.log",
                            ready_timeout=ready_timeout, extra_env=server_env
                            ) as (server, startup):
            pool = max(levels)
            limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
            with httpx.Client(base_url=server.url, limits=limits, timeout=60.0) as client:
                rows = make_rows(n, seed)
                ingest_start = time.perf_counter()
                ingest_s = ingest(client, rows, batch)
                server.wait_for("/readyz", ready_timeout)  # the outbox is drained
                indexed_s = time.perf_counter() - ingest_start
                # the same rows into an embedded memory, right after (the server idles)
                embedded_s = embedded_ingest(rows, embedder, batch, tmp / "embedded")
                for mode in modes:  # the first query of a mode builds its per-process state
                    for text in make_queries(warmup, seed=seed + 1000):
                        client.post("/search", json={"type": TYPE_NAME, "text": text, "k": k,
                                                     "mode": mode}).raise_for_status()
                rss = {"after_ingest_mb": rss_mb(server.proc.pid)}
                with peer_for(peer, rows, embedder, warmup, k, seed) as (chroma, peer_info):
                    cells = load_test(client, modes=modes, levels=levels, requests=requests,
                                      rounds=rounds, k=k, max_seconds=max_seconds, seed=seed,
                                      peer=chroma, server_pid=server.proc.pid,
                                      wrk_seconds=wrk_seconds if driver == "wrk" else None)
                rss["after_load_mb"] = rss_mb(server.proc.pid)
        results = [summarise(c) for c in cells]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "benchmark": "http_search",
        "config": {"n": n, "embedder": embedder, "modes": list(modes),
                   "concurrency": list(levels), "requests_per_cell": requests,
                   "rounds": rounds, "k": k, "batch": batch, "warmup": warmup,
                   "max_seconds": max_seconds, "seed": seed,
                   "server_env": dict(server_env or {}), "driver": driver,
                   "wrk_seconds": wrk_seconds if driver == "wrk" else None},
        "environment": environment(),
        "server": {**startup, "ingest_s": round(ingest_s, 3),
                   "ingest_per_s": round(n / ingest_s, 1) if ingest_s > 0 else None,
                   "ingest_to_indexed_s": round(indexed_s, 3), "rss": rss,
                   "embedded_ingest_s": round(embedded_s, 3),
                   "embedded_ingest_per_s": round(n / embedded_s, 1) if embedded_s > 0
                   else None,
                   # throughput of the HTTP ingest (until indexed) over the embedded one's
                   "http_over_embedded_ingest": round(embedded_s / indexed_s, 2)
                   if indexed_s > 0 else None},
        "peer": peer_info,
        "results": results,
        "ratios": ratios(results),
        "elapsed_s": round(time.perf_counter() - began, 1),
    }


@contextmanager
def peer_for(enabled: bool, rows: Sequence[Mapping[str, Any]], embedder: str, warmup: int,
             k: int, seed: int) -> Iterator[tuple[ChromaPeer | None, dict[str, Any] | None]]:
    """The loaded, warmed Chroma peer (or None when not ``enabled``) and what it took."""
    if not enabled:
        yield None, None
        return
    from dmf_hybrid._internal.embeddings import embedder_named

    model = embedder_named(embedder, num_threads=1, onnx_threads=1)
    with running_peer(model) as (chroma, ready_s):
        load_s = chroma.load([f"note-{i}" for i in range(len(rows))],
                             [f"{r['title']}: {r['body']}" for r in rows],
                             [{"category": r["category"], "year": r["year"]} for r in rows])
        for text in make_queries(warmup, seed=seed + 1000):
            chroma.search(text, k)
        yield chroma, {"kind": "chroma run + chromadb.HttpClient, query embedded client-side",
                       "model_id": getattr(model, "model_id", embedder),
                       "spawn_to_heartbeat_s": round(ready_s, 3),
                       "embed_and_load_s": round(load_s, 3),
                       "rss_mb": rss_mb(chroma.proc.pid)}


def ratios(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Throughput of each number of clients over the fewest, per mode, and ours over the
    peer's."""
    by = {(r["mode"], r["concurrency"]): r for r in results}
    levels = sorted({r["concurrency"] for r in results})
    out: dict[str, Any] = {}
    for mode in sorted({r["mode"] for r in results}):
        one = by.get((mode, levels[0]))
        for level in levels[1:]:
            more = by.get((mode, level))
            if one and more and one["rps"]:
                out[f"{mode}_rps_{level}_over_{levels[0]}"] = round(more["rps"] / one["rps"], 2)
        for level in levels:
            mine, peer = by.get((mode, level)), by.get((PEER, level))
            if mode != PEER and mine and peer and peer["rps"]:
                out[f"{mode}_over_peer_rps_at_{level}"] = round(mine["rps"] / peer["rps"], 2)
                out[f"{mode}_over_peer_p50_at_{level}"] = round(
                    mine["p50_ms"] / peer["p50_ms"], 2) if peer["p50_ms"] else None
    return out


def markdown(doc: Mapping[str, Any]) -> str:
    """The results as a markdown section (configuration line and table)."""
    config, server = doc["config"], doc["server"]
    ordered = sorted(doc["results"], key=lambda r: (
        MODES.index(r["mode"]) if r["mode"] in MODES else len(MODES), r["concurrency"]))
    rows = [[r["mode"], r["concurrency"], r["requests"], r["p50_ms"], r["p95_ms"], r["rps"],
             r["server_p50_ms"], r.get("server_cpu_ms_per_request"),
             r.get("client_cpu_ms_per_request"),
             f"{r['errors']}{' (time bound hit)' if r['truncated'] else ''}"]
            for r in ordered]
    env_note = f", server env {config['server_env']}" if config.get("server_env") else ""
    load = (f"wrk for {config['wrk_seconds']} s per cell and round (distinct queries; p50 and "
            f"p95 are the medians of the rounds' percentiles)" if config.get("driver") == "wrk"
            else f"{config['requests_per_cell']} distinct queries per cell (Python threads "
                 f"with httpx)")
    return (
        "## HTTP /search under concurrency\n\n"
        f"{config['n']} entities, embedder `{config['embedder']}`, k = {config['k']}, "
        f"{load} in {config['rounds']} "
        f"interleaved rounds, client and server on 127.0.0.1{env_note} "
        f"({doc['environment']['cpus']} CPUs, load average "
        f"{doc['environment']['load_average']}).\n"
        f"Server: spawn → /healthz {server['spawn_to_healthz_s']} s, → /readyz "
        f"{server['spawn_to_readyz_s']} s; HTTP ingest {server['ingest_per_s']} entities/s "
        f"(embedded `create_many` of the same rows {server.get('embedded_ingest_per_s')}/s, "
        f"HTTP until indexed / embedded: {server.get('http_over_embedded_ingest')}×); "
        f"service RSS {server.get('rss', {}).get('after_ingest_mb')} MB after ingest, "
        f"{server.get('rss', {}).get('after_load_mb')} MB after the load.\n"
        + (f"Peer (`{PEER}`): {doc['peer']['kind']}, model `{doc['peer']['model_id']}`, "
           f"server RSS {doc['peer']['rss_mb']} MB.\n" if doc.get("peer") else "")
        + "\n" + markdown_table(["mode", "clients", "requests", "p50 ms", "p95 ms", "req/s",
                                 "server p50 ms", "server CPU ms/req", "client CPU ms/req",
                                 "errors"], rows)
        + "\n" + "\n".join(f"- {name}: {value}" for name, value in doc.get("ratios", {}).items())
        + "\n" + "".join(f"- failed ({r['mode']}, {r['concurrency']} clients): {failure}\n"
                         for r in ordered for failure in r.get("failures", []))
    )


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """A PNG: p50 / p95 latency and requests/s against the number of clients, per mode."""
    by_mode: dict[str, list[Mapping[str, Any]]] = {}
    for row in doc["results"]:
        by_mode.setdefault(row["mode"], []).append(row)
    latency: dict[str, tuple[list[float], list[float], str]] = {}
    rps: dict[str, tuple[list[float], list[float], str]] = {}
    for i, (mode, rows) in enumerate(by_mode.items()):
        rows = sorted(rows, key=lambda r: r["concurrency"])
        xs = [float(r["concurrency"]) for r in rows]
        latency[f"{mode} p50"] = (xs, [r["p50_ms"] for r in rows], f"C{i}-")
        latency[f"{mode} p95"] = (xs, [r["p95_ms"] for r in rows], f"C{i}--")
        rps[mode] = (xs, [r["rps"] for r in rows], f"C{i}-")
    config = doc["config"]
    return line_plots(path, [("latency (log scale)", "ms", latency),
                             ("throughput", "requests/s", rps)],
                      xlabel="concurrent clients", xticks=config["concurrency"], logx=True,
                      logy_panels=(0,),
                      title=f"POST /search, {config['n']} entities, {config['embedder']}")


def write_outputs(doc: Mapping[str, Any], out: Path, *, png: bool = True) -> list[Path]:
    """JSON at ``out``, markdown and (optionally) PNG beside it; the paths written."""
    return write_results(doc, out, markdown, plot if png else None)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="entities to ingest (default 2000)")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER,
                        help=f'an embedder setting (default "{DEFAULT_EMBEDDER}"), or "hash"')
    parser.add_argument("--requests", type=int, default=120,
                        help="distinct requests per (mode, concurrency) cell (default 120)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=250, help="rows per ingest request")
    parser.add_argument("--warmup", type=int, default=5, help="untimed queries per mode")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="time bound of the load phase; cells stop early past their share "
                        "(httpx driver: a wrk run always takes --wrk-seconds)")
    parser.add_argument("--ready-timeout", type=float, default=300.0,
                        help="seconds to wait for /healthz and /readyz")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment variable of the server (repeatable)")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the temp dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--no-peer", action="store_true",
                        help="skip the chroma run server peer (measured by default)")
    parser.add_argument("--driver", choices=DRIVERS, default="httpx",
                        help="who sends the requests: Python threads with httpx (default), or "
                        "wrk, whose own CPU is negligible (the server's scaling alone; no peer)")
    parser.add_argument("--wrk-seconds", type=int, default=5,
                        help="with --driver wrk: seconds per cell and round (default 5)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    exit_on_sigterm()  # bench_all stops a step that overruns with SIGTERM
    if min(args.concurrency) < 1:
        parser.error("--concurrency values must be >= 1")
    server_env = dict(item.partition("=")[::2] for item in args.server_env)
    if any(not name for name in server_env):
        parser.error("--server-env takes NAME=VALUE")
    try:
        doc = run(n=args.n, embedder=args.embedder, modes=args.modes, levels=args.concurrency,
                  requests=args.requests, rounds=args.rounds, k=args.k, batch=args.batch,
                  warmup=args.warmup, max_seconds=args.max_seconds,
                  ready_timeout=args.ready_timeout, seed=args.seed, workdir=args.workdir,
                  server_env=server_env, peer=not args.no_peer, driver=args.driver,
                  wrk_seconds=args.wrk_seconds)
    except (RuntimeError, ValueError, httpx.HTTPError) as exc:
        print(f"bench_http failed: {exc}", file=sys.stderr)
        return 1
    paths = write_outputs(doc, args.out, png=not args.no_plot)
    print(markdown(doc))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
