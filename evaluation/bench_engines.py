"""The store on both engines side by side: DuckDB (embedded, the default) and PostgreSQL.

For each size, one fresh store per engine, loaded and timed by ``bench_store.bench_size``
(bulk load, create, update, get, filtered query, paging, ``as_of`` reads and, with the type
embedded by the test embedder, filtered hybrid search), in one run on one machine. PostgreSQL
is a server of this benchmark's own (Debian's binaries, default durability settings, a
loopback port; ``evaluation.pgserver``), so the PostgreSQL figures include a network round
trip per statement that DuckDB does not have.

Prints a markdown table, writes JSON (``--out``) and a PNG next to it.

Usage::

    python -m evaluation.bench_engines --sizes 10000
"""

from __future__ import annotations

import argparse
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
    finally:
        server.stop()
    document = {"benchmark": "engines", "settings": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": env, "results": results}
    publish(document, args.out, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
