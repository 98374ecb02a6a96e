"""The store on both engines side by side: DuckDB (embedded, the default) and PostgreSQL.

For each size, one fresh store per engine, loaded and timed by ``bench_store.bench_size``
(bulk load, create, update, get, filtered query, paging, ``as_of`` reads and, with the type
embedded by the test embedder, filtered hybrid search), in one run on one machine. PostgreSQL
is a server of this benchmark's own (Debian's binaries, default durability settings, a
loopback port; ``evaluation.pgserver``), so the PostgreSQL figures include a network round
trip per statement that DuckDB does not have.

With ``--processes``, it also measures write throughput on PostgreSQL of that many OS
processes creating entities at once in one store: each in a tenant of its own, and all in one
tenant (writers of one tenant take turns on its lock, writers of different tenants only on the
commit step, see docs/postgresql.md; on a 2-core machine more processes than cores measure
contention, not scaling).

Prints a markdown table, writes JSON (``--out``) and a PNG next to it.

Usage::

    python -m evaluation.bench_engines --sizes 10000 --processes 1 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluation.bench_store import bench_size, environment
from evaluation.pgserver import PgServer, binaries
from evaluation.plotting import publish, save_figure

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_engines.json"
ENGINES = ("duckdb", "postgresql")
OPS = ["create_many", "create", "update", "get", "query", "page", "get_as_of", "query_as_of",
       "search"]


def markdown(document: Mapping[str, Any]) -> str:
    """Per size and operation: each engine's p50 / p95 (ms) and rate, and the p50 ratio."""
    results = document["results"]
    lines = ["| entities | operation | DuckDB p50 / p95 ms | PostgreSQL p50 / p95 ms | "
             "DuckDB / PostgreSQL per s | PostgreSQL p50 / DuckDB p50 |",
             "|---:|---|---:|---:|---:|---:|"]
    for size, by_engine in results.items():
        duck, pg = by_engine["duckdb"], by_engine["postgresql"]
        for op in OPS:
            if op not in duck:
                continue
            a, b = duck[op], pg[op]
            lines.append(f"| {int(size):,} | {op} | {a['p50_ms']:.2f} / {a['p95_ms']:.2f} | "
                         f"{b['p50_ms']:.2f} / {b['p95_ms']:.2f} | "
                         f"{a['per_s']:,.0f} / {b['per_s']:,.0f} | "
                         f"{b['p50_ms'] / max(a['p50_ms'], 1e-9):.1f}x |")
        lines.append(f"| {int(size):,} | database size | {duck['db_mb']} MB | "
                     f"{pg['db_mb']} MB | | |")
    return "\n".join(lines)


_WRITER = r"""
import json, sys, time
from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex

url, tenant, me, writes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with Memory.open(url, embedder=HashEmbedder(), vector_index=ExactIndex()) as mem:
    view = mem.for_tenant(tenant)
    view.define_type({"name": "Note", "embed": "{title}", "fields": {"title": {}}})
    view.create("Note", {"title": f"{me} warm-up"})
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.time()
    for i in range(writes):
        view.create("Note", {"title": f"{me} note {i} 上海"})
    print(json.dumps({"start": start, "end": time.time()}), flush=True)
"""


def process_throughput(server: PgServer, processes: int, writes: int,
                       one_tenant: bool) -> dict[str, Any]:
    """Creates per second of ``processes`` OS processes writing one fresh store at once."""
    url = server.fresh()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, "t0" if one_tenant else f"t{n}", f"p{n}",
         str(writes)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=env) for n in range(processes)]
    for proc in procs:  # every process connected, its type defined: then all start at once
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    spans = [json.loads(proc.communicate(timeout=3600)[0].strip().splitlines()[-1])
             for proc in procs]
    seconds = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    return {"processes": processes, "one_tenant": one_tenant, "writes": processes * writes,
            "seconds": round(seconds, 2), "per_s": round(processes * writes / seconds, 1)}


def throughput_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| processes | tenants | creates | s | creates/s |", "|---:|---|---:|---:|---:|"]
    lines += [f"| {r['processes']} | {'one' if r['one_tenant'] else 'one each'} | "
              f"{r['writes']:,} | {r['seconds']} | {r['per_s']:,.0f} |" for r in rows]
    return "\n".join(lines)


def plot(document: Mapping[str, Any], path: Path) -> Path:
    """p50 latency per operation, one bar per engine, one panel per size."""
    results = document["results"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 4.6), squeeze=False)
    for ax, (size, by_engine) in zip(axes[0], results.items(), strict=True):
        ops = [op for op in OPS if op in by_engine["duckdb"]]
        for k, engine in enumerate(ENGINES):
            xs = [x + (k - 0.5) * 0.4 for x in range(len(ops))]
            ax.bar(xs, [by_engine[engine][op]["p50_ms"] for op in ops], 0.4, label=engine)
        ax.set_yscale("log")
        ax.set_xticks(list(range(len(ops))))
        ax.set_xticklabels(ops, rotation=30, ha="right")
        ax.set_title(f"{int(size):,} entities: p50 latency per operation")
        ax.set_ylabel("ms (log)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    return save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--asof-queries", type=int, default=20)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--processes", type=int, nargs="*", default=[],
                        help="also measure PostgreSQL write throughput of these numbers of "
                             "processes writing at once")
    parser.add_argument("--writes", type=int, default=300, help="creates per process")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if any(s < 1000 for s in args.sizes):
        parser.error("sizes must be >= 1000")
    args.embed, args.keep, args.workdir = True, False, None
    bin_dir = binaries()
    if bin_dir is None:
        parser.error("PostgreSQL's server binaries are missing: run `make postgres` as root")
    env = environment()
    server = PgServer(bin_dir, durable=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    throughput: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
            for size in args.sizes:
                results[str(size)] = {}
                for engine in ENGINES:
                    started = time.perf_counter()
                    url = server.fresh() if engine == "postgresql" else None
                    results[str(size)][engine] = bench_size(size, args, Path(tmp) / engine,
                                                            store_url=url)
                    print(f"{engine} {size:,}: {time.perf_counter() - started:.1f} s",
                          file=sys.stderr)
        for processes in args.processes:
            for one_tenant in (False, True):
                throughput.append(process_throughput(server, processes, args.writes,
                                                     one_tenant))
                print(throughput_markdown(throughput[-1:]).splitlines()[-1], file=sys.stderr)
    finally:
        server.stop()
    document = {"benchmark": "engines", "settings": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": env, "results": results, "processes": throughput}
    publish(document, args.out, lambda d: markdown(d) + (
        "\n\nPostgreSQL, processes writing one store at once:\n\n"
        + throughput_markdown(d["processes"]) if d["processes"] else ""), plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
