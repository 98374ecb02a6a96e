"""Benchmark of cold start: import, open, first search (model load included), server readiness.

``python -m evaluation.bench_coldstart [--n 2000] [--embedder minilm|hash] [--runs 3]``

A store with ``--n`` BenchNote entities (the data of ``evaluation.bench_http``) is built once,
in a child process, with the measured embedder (building it with another one would make the
first open a model change, i.e. a full reindex). Then every run measures, each in a fresh
Python process so nothing is warm but the OS page cache:

(a) ``import dmf_hybrid``;
(b) ``Memory.open`` of the existing directory (DuckDB, Chroma, outbox replay);
(c) the first ``search`` (hybrid, k = 10), which loads the embedding model, then a second one
    (warm) for comparison; the model's own load time is read from the embedder;
(d) ``python -m dmf_hybrid._internal.api.server`` on the same directory, from spawn to the first 200
of
    ``/healthz`` (alive) and of ``/readyz`` (model loaded, outbox drained);
(e) that server's resident memory (``VmRSS``, and the peak ``VmHWM``) once it has answered
    searches in every mode; then it is stopped by PID.

A bare ``python -c pass`` is timed too, as the interpreter's share. Stages (a)–(c) also report
the child's CPU time (``time.process_time``), which a shared machine's load inflates far less
than wall time. Figures are medians over ``--runs``; every run is kept in the JSON.
Writes JSON (``--out``) and a markdown table beside it (same stem, ``.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.bench_http import TYPE_NAME, ServerProcess, exit_on_sigterm, make_queries
from evaluation.chroma_peer import rss_mb
from evaluation.plotting import environment, markdown_table, write_results

log = logging.getLogger("bench_coldstart")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_coldstart.json"

# Runs in a fresh interpreter: only the standard library is imported before the clock starts.
MEASURE_CHILD = r"""
import json, sys, time
wall, cpu = [time.perf_counter()], [time.process_time()]
def mark():
    wall.append(time.perf_counter()); cpu.append(time.process_time())
import dmf_hybrid
mark()
from dmf_hybrid import Memory
from dmf_hybrid._internal.config import Settings
path, embedder, type_name, first, second = sys.argv[1:6]
mem = Memory.open(path, settings=Settings(data_dir=path, embedder=embedder,
                                          load_examples=False))
mark()
hits = len(mem.search(type_name, first, k=10, mode="hybrid").hits)
mark()
mem.search(type_name, second, k=10, mode="hybrid")
mark()
load = getattr(mem.engine.embedder, "load_seconds", None)
mem.close()
names = ["import", "open", "first_search", "second_search"]
out = {f"{n}_s": round(wall[i + 1] - wall[i], 4) for i, n in enumerate(names)}
out.update({f"{n}_cpu_s": round(cpu[i + 1] - cpu[i], 4) for i, n in enumerate(names)})
out["model_load_s"] = None if load is None else round(load, 4)
out["first_search_hits"] = hits
print("RESULT " + json.dumps(out))
"""

STAGES = (
    ("interpreter_s", "python -c pass (interpreter start and exit)"),
    ("import_s", "(a) import dmf_hybrid"),
    ("open_s", "(b) Memory.open, existing store"),
    ("first_search_s", "(c) first search, model load included"),
    ("model_load_s", "↳ of which the model load"),
    ("second_search_s", "↳ second search (warm)"),
    ("server_healthz_s", "(d) server spawn → /healthz 200"),
    ("server_readyz_s", "(d) server spawn → /readyz 200"),
)
#: Searches (each mode, distinct texts) the server answers before its memory is read: enough
#: for the row cache to copy the type whole (16 searches of a generation), as a busy service's.
RSS_SEARCHES = 60
#: Model threads while building the store (not measured).
BUILD_THREADS = 2
MEMORY_STAGES = (
    ("server_rss_mb", f"(e) server resident memory after {RSS_SEARCHES} searches, MB"),
    ("server_peak_rss_mb", "(e) server peak resident memory, MB"),
)


def child_env() -> dict[str, str]:
    """The environment of the child processes: ours without any DMF_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}


def build_store(path: Path, n: int, embedder: str, seed: int = 7) -> None:
    """A memory directory at ``path`` holding ``n`` BenchNote entities, indexed and closed."""
    from dmf_hybrid import Memory
    from dmf_hybrid._internal.config import Settings
    from evaluation.bench_http import BENCH_TYPE, make_rows

    # the build is not measured: let the model use both cores
    settings = Settings(data_dir=path, embedder=embedder, load_examples=False,
                        torch_threads=BUILD_THREADS, onnx_threads=BUILD_THREADS)
    with Memory.open(path, settings=settings) as mem:
        mem.define_type(BENCH_TYPE)
        rows = make_rows(n, seed)
        for i in range(0, len(rows), 1000):
            mem.create_many(TYPE_NAME, rows[i:i + 1000])
        mem.flush()


def build_in_child(path: Path, n: int, embedder: str, seed: int, timeout: float) -> float:
    """Build the store in a child process (keeping this one cold); returns its seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "evaluation.bench_coldstart", "--build-into", str(path),
         "--n", str(n), "--embedder", embedder, "--seed", str(seed)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"building the store failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def time_interpreter(timeout: float) -> float:
    """Wall seconds of ``python -c pass`` (start-up and exit of a bare interpreter)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=child_env(), check=True, timeout=timeout)
    return time.perf_counter() - start


def measure_in_child(path: Path, embedder: str, queries: Sequence[str], timeout: float
                     ) -> dict[str, Any]:
    """Stages (a)–(c) timed inside a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE_CHILD, str(path), embedder, TYPE_NAME, *queries[:2]],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the measuring child failed ({done.returncode}):\n"
                           f"{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


def time_server(path: Path, embedder: str, log_path: Path, timeout: float,
                queries: Sequence[str]) -> dict[str, float | None]:
    """Stages (d) and (e): seconds from spawn to /healthz 200 and to /readyz 200, then the
    server's resident memory (now and peak) once it has answered searches in every mode
    (model loaded, vector and keyword mirrors built)."""
    server = ServerProcess.start(path, embedder=embedder, log_path=log_path)
    try:
        healthz = server.wait_for("/healthz", timeout, interval=0.01)
        readyz = server.wait_for("/readyz", timeout, interval=0.01)
        with httpx.Client(base_url=server.url, timeout=timeout) as client:
            for i, text in enumerate(queries):
                body = {"type": TYPE_NAME, "text": text, "k": 10,
                        "mode": ("hybrid", "vector", "keyword")[i % 3]}
                client.post("/search", json=body).raise_for_status()
        rss, peak = rss_mb(server.proc.pid), rss_mb(server.proc.pid, "VmHWM")
    finally:
        server.stop()
    return {"server_healthz_s": round(healthz, 4), "server_readyz_s": round(readyz, 4),
            "server_rss_mb": rss, "server_peak_rss_mb": peak}


def median_of(runs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The median of ``key`` over the runs that have it; None when none has."""
    values = [float(r[key]) for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def run(*, n: int = 2000, embedder: str = DEFAULT_EMBEDDER, runs: int = 3, seed: int = 7,
        timeout: float = 600.0, workdir: Path | None = None, store: Path | None = None
        ) -> dict[str, Any]:
    """Build the store, then time ``runs`` cold starts; the results document.

    ``store``: a closed directory made by :func:`build_store` with ``n`` and ``embedder``,
    used instead of building one (``build_s`` is then None); it is not deleted.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dmf-bench-cold-", dir=workdir))
    try:
        if store is None:
            data = tmp / "data"
            build_s: float | None = build_in_child(data, n, embedder, seed, timeout)
            log.info("built %d entities with %s in %.1f s", n, embedder, build_s)
        else:
            data, build_s = store, None
        queries = make_queries(2 * runs, seed=seed + 2000)
        probes = make_queries(RSS_SEARCHES * runs, seed=seed + 3000)
        records: list[dict[str, Any]] = []
        for i in range(runs):
            record: dict[str, Any] = {"run": i + 1,
                                      "interpreter_s": round(time_interpreter(timeout), 4)}
            record.update(measure_in_child(data, embedder, queries[2 * i:2 * i + 2], timeout))
            record.update(time_server(data, embedder, tmp / f"server-{i + 1}.log", timeout,
                                      probes[RSS_SEARCHES * i:RSS_SEARCHES * (i + 1)]))
            log.info("run %d: %s", i + 1, record)
            records.append(record)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keys = [k for k, _ in STAGES + MEMORY_STAGES] + [f"{k}_cpu_s" for k in
                                     ("import", "open", "first_search", "second_search")]
    return {
        "benchmark": "coldstart",
        "config": {"n": n, "embedder": embedder, "runs": runs, "seed": seed},
        "environment": environment(),
        "build_s": None if build_s is None else round(build_s, 2),
        "median": {k: median_of(records, k) for k in keys},
        "runs": records,
        "elapsed_s": round(time.perf_counter() - began, 1),
    }


def markdown(doc: Mapping[str, Any]) -> str:
    """The results as a markdown section (configuration line and table)."""
    config, median, runs = doc["config"], doc["median"], doc["runs"]

    def spread(key: str) -> str:
        values = [r[key] for r in runs if r.get(key) is not None]
        return f"{min(values):.2f}–{max(values):.2f}" if values else "–"

    rows = []
    for key, label in STAGES:
        cpu = median.get(key.removesuffix("_s") + "_cpu_s")
        value = median.get(key)
        rows.append([label, "–" if value is None else f"{value:.3f}", spread(key),
                     "–" if cpu is None else f"{cpu:.3f}"])
    for key, label in MEMORY_STAGES:
        value = median.get(key)
        rows.append([label, "–" if value is None else f"{value:.0f}", spread(key), "–"])
    return (
        "## Cold start\n\n"
        f"Store of {config['n']} entities, embedder `{config['embedder']}`, median of "
        f"{config['runs']} runs, each stage in a fresh process ({doc['environment']['cpus']} "
        f"CPUs, load average {doc['environment']['load_average']}).\n\n"
        + markdown_table(["stage", "median s", "range s", "CPU s (median)"], rows)
    )


def write_outputs(doc: Mapping[str, Any], out: Path) -> list[Path]:
    """JSON at ``out`` and markdown beside it; the paths written."""
    return write_results(doc, out, markdown)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="entities in the store (2000)")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER,
                        help=f'an embedder setting (default "{DEFAULT_EMBEDDER}"), or "hash"')
    parser.add_argument("--runs", type=int, default=3, help="cold starts to time (median)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="bound of each child process and readiness wait, seconds")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the temp dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--store", type=Path, default=None,
                        help="a closed store built earlier with the same --n and --embedder "
                             "(python -m evaluation.bench_coldstart --build-into DIR ...); "
                             "used instead of building one, and kept")
    parser.add_argument("--build-into", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness poll
    exit_on_sigterm()  # bench_all stops a step that overruns with SIGTERM
    if args.build_into is not None:  # the child process of build_in_child
        build_store(args.build_into, args.n, args.embedder, args.seed)
        return 0
    try:
        doc = run(n=args.n, embedder=args.embedder, runs=args.runs, seed=args.seed,
                  timeout=args.timeout, workdir=args.workdir, store=args.store)
    except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        print(f"bench_coldstart failed: {exc}", file=sys.stderr)
        return 1
    paths = write_outputs(doc, args.out)
    print(markdown(doc))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
