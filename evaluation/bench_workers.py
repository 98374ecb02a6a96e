"""Benchmark of the service with many worker processes on one PostgreSQL store and one Chroma
server. ``python -m evaluation.bench_workers [--workers 1 2] [--clients 1 16 64]``

1. Starts its own PostgreSQL (Debian's binaries, default durability) and ``chroma run``.
2. Ingests ``--n`` notes (``bench_http``'s data) through a one-worker service.
3. For each number of workers: starts ``dmf serve --store URL --workers N`` (``chroma_url``
   set) on a free 127.0.0.1 port, waits for ``/readyz``, and drives it with wrk
   (:mod:`evaluation.wrk_driver`: a closed loop of C connections, a client that costs almost
   no CPU) for ``--seconds`` per cell: ``POST /search`` (hybrid, distinct queries) and
   ``POST /entities/BenchNote`` (distinct new notes), at each number of clients; then reads
   each worker's resident memory.
4. Commit-to-visible lag in another process: two single-worker services on the same store;
   a note created through one is looked for through the other (by ID, and by a keyword
   search for its unique title) until found; p50 / p99 over ``--lag-samples`` notes.

Wrk, the workers, PostgreSQL and Chroma share this machine's cores: a table says how many
there were. Writes JSON (``--out``), a markdown table (same stem) and a PNG of throughput and
latency against the number of clients, one line per number of workers.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.bench_all import stop_group
from evaluation.bench_http import (
    TYPE_NAME,
    WORDS,
    WRK_BODIES,
    ingest,
    make_queries,
    make_rows,
)
from evaluation.chroma_peer import cpu_seconds, rss_mb
from evaluation.chromaserver import ChromaServer, chroma_executable
from evaluation.pgserver import PgServer, binaries
from evaluation.plotting import environment, line_plots, markdown_table, write_results
from evaluation.ports import free_port
from evaluation.wrk_driver import run_wrk, wait_until_idle

log = logging.getLogger("bench_workers")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_workers.json"
#: Seconds a service may take to answer /readyz (N workers load the model at once).
READY_TIMEOUT = 300.0


@contextmanager
def service(store_url: str, chroma_url: str, workers: int, embedder: str, data_dir: Path,
            log_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A ready ``dmf serve --workers N`` on a free port: (its URL, the supervisor)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}
    env.update({"DMF_EMBEDDER": embedder, "DMF_CHROMA_URL": chroma_url,
                "DMF_DATA_DIR": str(data_dir), "DMF_LOAD_EXAMPLES": "false",
                "PYTHONPATH": str(ROOT)})
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dmf_hybrid._internal.cli", "serve", "--store", store_url,
             "--workers", str(workers), "--port", str(port)], cwd=ROOT, env=env,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        ready = 0
        while ready < 3 * workers:  # several answers in a row: every worker is likely up
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dmf serve --workers {workers} did not get ready:\n"
                                   + log_path.read_text(errors="replace")[-2000:])
            try:
                ok = httpx.get(f"{url}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                ok = False
            ready = ready + 1 if ok else 0
            time.sleep(0.1 if ok else 0.5)
        yield url, proc
    finally:
        stop_group(proc)


def worker_pids(supervisor: subprocess.Popen[bytes], workers: int) -> list[int]:
    """The processes that answer requests: the supervisor's workers, or itself alone."""
    if workers == 1:
        return [supervisor.pid]
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(supervisor.pid)],
                         capture_output=True, text=True, check=False).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "spawn_main" in line]


def new_notes(count: int, tag: str) -> list[dict[str, Any]]:
    """Bodies of ``count`` distinct new notes (creates, not returns of existing ones)."""
    return [{"data": {**row, "title": f"{row['title']} {tag}-{i}"}}
            for i, row in enumerate(make_rows(count))]


def cell(kind: str, workers: int, clients: int, run: Any, worker_cpu_s: float | None
         ) -> dict[str, Any]:
    """One cell's figures; ``worker_cpu_s``: the CPU seconds the workers used during it."""
    return {"kind": kind, "workers": workers, "clients": clients,
            "rps": round(run.ok / run.seconds, 1) if run.seconds else 0.0,
            "p50_ms": round(run.p50_ms, 2), "p95_ms": round(run.p95_ms, 2),
            "errors": run.status_errors + run.socket_errors,
            # cores busy on average: what one worker already takes of the machine bounds
            # what more workers can add on it
            "worker_cores": None if worker_cpu_s is None or not run.seconds
            else round(worker_cpu_s / run.seconds, 2),
            "wrk_cores": round(run.client_cpu_s / run.seconds, 2) if run.seconds else None}


def drive(url: str, workers: int, clients: Sequence[int], seconds: int, pids: list[int]
          ) -> list[dict[str, Any]]:
    """The search and write cells of one service."""
    rows: list[dict[str, Any]] = []

    def idle() -> float | None:
        used = [cpu_seconds(p) for p in pids]
        return None if None in used else sum(u for u in used if u is not None)

    queries = make_queries(WRK_BODIES, seed=31 + workers)
    searches = [{"type": TYPE_NAME, "text": q, "k": 10, "mode": "hybrid"} for q in queries]
    def measured(kind: str, c: int, path: str, bodies: Sequence[Any]) -> None:
        wait_until_idle(idle)
        before = idle()
        run = run_wrk(f"{url}{path}", bodies, c, seconds)
        after = idle()
        used = None if before is None or after is None else after - before
        rows.append(cell(kind, workers, c, run, used))
        log.info("%s", rows[-1])

    for c in clients:
        measured("search", c, "/search", searches)
    for c in clients:
        measured("create", c, f"/entities/{TYPE_NAME}",
                 new_notes(max(200, 400 * seconds), f"w{workers}c{c}-{uuid.uuid4().hex[:6]}"))
    return rows


def lag(url_a: str, url_b: str, samples: int) -> dict[str, Any]:
    """Seconds from a create's answer (through A) until B finds it, by ID and by search."""
    by_id: list[float] = []
    by_search: list[float] = []
    with httpx.Client(base_url=url_a, timeout=30) as a, httpx.Client(base_url=url_b,
                                                                       timeout=30) as b:
        for i in range(samples):
            title = f"{WORDS[i % len(WORDS)]} lagmark{uuid.uuid4().hex[:10]}"
            made = a.post(f"/entities/{TYPE_NAME}", json={"data": {"title": title}})
            made.raise_for_status()
            done = time.perf_counter()
            eid = made.json()["id"]
            while b.get(f"/entities/{eid}").status_code != 200:
                time.sleep(0.001)
            by_id.append(time.perf_counter() - done)
            body = {"type": TYPE_NAME, "text": title.split()[-1], "k": 1, "mode": "keyword"}
            while not [h for h in b.post("/search", json=body).json()["hits"]
                       if h["entity"]["id"] == eid]:
                time.sleep(0.001)
            by_search.append(time.perf_counter() - done)

    def summary(xs: list[float]) -> dict[str, float]:
        ms = sorted(x * 1000 for x in xs)
        return {"p50_ms": round(statistics.median(ms), 2),
                "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 2)}
    return {"samples": samples, "get": summary(by_id), "search": summary(by_search)}


def run(*, workers: Sequence[int], clients: Sequence[int], n: int, embedder: str, seconds: int,
        lag_samples: int) -> dict[str, Any]:
    bin_dir = binaries()
    exe = chroma_executable()
    if bin_dir is None or exe is None:
        raise RuntimeError("needs PostgreSQL's server binaries (make postgres) and the chroma "
                           "command (chromadb)")
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="dmf-bw-") as tmp_dir:
        tmp = Path(tmp_dir)
        pg = PgServer(bin_dir, durable=True)
        stack.callback(pg.stop)
        chroma = ChromaServer(exe)
        stack.callback(chroma.stop)
        store_url = pg.fresh()
        started = time.perf_counter()
        with service(store_url, chroma.url, 1, embedder, tmp / "ingest",
                     tmp / "ingest.log") as (url, _proc), httpx.Client(
                base_url=url, timeout=600) as client:
            ingest(client, make_rows(n), 500)
        ingest_s = time.perf_counter() - started
        results: list[dict[str, Any]] = []
        rss: dict[str, list[float | None]] = {}
        for count in workers:
            with service(store_url, chroma.url, count, embedder, tmp / f"w{count}",
                         tmp / f"w{count}.log") as (url, proc):
                pids = worker_pids(proc, count)
                results.extend(drive(url, count, clients, seconds, pids))
                rss[str(count)] = [rss_mb(p) for p in pids]
        with service(store_url, chroma.url, 1, embedder, tmp / "a", tmp / "a.log") as (
                url_a, _a), service(store_url, chroma.url, 1, embedder, tmp / "b",
                                    tmp / "b.log") as (url_b, _b):
            lags = lag(url_a, url_b, lag_samples)
    return {"benchmark": "bench_workers", "environment": environment(),
            "config": {"workers": list(workers), "clients": list(clients), "n": n,
                       "embedder": embedder, "seconds": seconds, "driver": "wrk",
                       "cores": os.cpu_count()},
            "ingest_s": round(ingest_s, 2), "results": results, "rss_mb": rss,
            "lag": lags, "scaling": scaling(results)}


def scaling(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Throughput of the most workers over one worker's, per kind and number of clients."""
    out: dict[str, float] = {}
    by = {(r["kind"], r["workers"], r["clients"]): r["rps"] for r in results}
    counts = sorted({r["workers"] for r in results})
    if len(counts) < 2 or counts[0] != 1:
        return out
    for (kind, workers, clients), rps in sorted(by.items()):
        base = by.get((kind, 1, clients))
        if workers == counts[-1] and base:
            out[f"{kind} x{workers} at {clients} clients"] = round(rps / base, 2)
    return out


def markdown(doc: Mapping[str, Any]) -> str:
    config = doc["config"]
    lines = [f"# bench_workers: {config['n']} entities, embedder {config['embedder']}, "
             f"{config['cores']} cores, wrk {config['seconds']} s per cell", "",
             markdown_table(["kind", "workers", "clients", "requests/s", "p50 ms", "p95 ms",
                             "errors", "workers' cores", "wrk's cores"],
                            [[r["kind"], r["workers"], r["clients"], r["rps"], r["p50_ms"],
                              r["p95_ms"], r["errors"], r.get("worker_cores", "–"),
                              r.get("wrk_cores", "–")] for r in doc["results"]]), "",
             "workers' cores: the CPU seconds the workers used over the cell's seconds (of "
             f"{config['cores']}); PostgreSQL and Chroma use the rest with wrk.", ""]
    if doc["scaling"]:
        lines += ["Throughput against one worker: " + ", ".join(
            f"{k} {v}x" for k, v in doc["scaling"].items()), ""]
    lines += ["Resident memory per worker (MB): " + "; ".join(
        f"{n} worker(s): {', '.join(f'{m:.0f}' for m in ms if m is not None)}"
        for n, ms in doc["rss_mb"].items()), ""]
    lag_doc = doc["lag"]
    lines += [f"Commit-to-visible lag in another process ({lag_doc['samples']} creates): by ID "
              f"p50 {lag_doc['get']['p50_ms']} ms / p99 {lag_doc['get']['p99_ms']} ms; by "
              f"search p50 {lag_doc['search']['p50_ms']} ms / p99 "
              f"{lag_doc['search']['p99_ms']} ms", ""]
    return "\n".join(lines)


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """Requests/s and p95 against clients, per kind and number of workers."""
    rps: dict[str, tuple[list[float], list[float], str]] = {}
    p95: dict[str, tuple[list[float], list[float], str]] = {}
    series: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in doc["results"]:
        series.setdefault((row["kind"], row["workers"]), []).append(row)
    for i, ((kind, workers), rows) in enumerate(sorted(series.items())):
        rows = sorted(rows, key=lambda r: r["clients"])
        xs = [float(r["clients"]) for r in rows]
        style = f"C{i}-" if kind == "search" else f"C{i}--"
        label = f"{kind}, {workers} worker{'s' if workers > 1 else ''}"
        rps[label] = (xs, [r["rps"] for r in rows], style)
        p95[label] = (xs, [r["p95_ms"] for r in rows], style)
    config = doc["config"]
    return line_plots(path, [("throughput", "requests/s", rps),
                             ("p95 latency (log scale)", "ms", p95)],
                      xlabel="concurrent clients", xticks=config["clients"], logx=True,
                      logy_panels=(1,), title=f"{config['n']} entities, {config['embedder']}, "
                      f"{config['cores']} cores")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--n", type=int, default=2000, help="entities ingested first")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--seconds", type=int, default=5, help="wrk seconds per cell")
    parser.add_argument("--lag-samples", type=int, default=40)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-png", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    doc = run(workers=args.workers, clients=args.clients, n=args.n, embedder=args.embedder,
              seconds=args.seconds, lag_samples=args.lag_samples)
    print(markdown(doc))
    write_results(doc, args.out, markdown, None if args.no_png else plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
