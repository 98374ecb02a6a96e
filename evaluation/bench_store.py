"""Benchmark of the core store: create / update / get / query throughput and latency.

For every size N (``--sizes 10000 100000``) a fresh memory directory is bulk-loaded with N
entities of a benchmark type, then timed:

* ``create_many``  — the bulk load itself, in batches of ``--batch`` rows (latency per batch);
* ``create``       — single creates on top of the loaded store (``--samples`` of them);
* ``update``       — single updates of random existing entities;
* ``get``          — reads by ID;
* ``query``        — a filtered query (category + score range, 50 rows);
* ``page``         — every page (100 rows) of a filter matching ~10 % of the rows;
* ``query_as_of`` / ``get_as_of`` — the same reads at an older audit seq (rebuilt from the log),
  next to the live ``query`` / ``get`` they are compared with.

The benchmark type is not embedded by default (no ``embed`` template), so the store is measured
alone; ``--embed`` adds a template and the test ``HashEmbedder`` to include the outbox and
indexer. Nothing loads the sentence-transformers model.

Prints a markdown table, writes JSON (``--out``) and a PNG plot next to it.

Usage::

    python evaluation/bench_store.py --sizes 10000 100000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from dmf_hybrid import HashEmbedder, Memory, Settings  # noqa: E402
from dmf_hybrid._internal.vector.exact import ExactIndex  # noqa: E402
from evaluation.plotting import save_figure  # noqa: E402

DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_store.json"
CATEGORIES = [f"c{i}" for i in range(10)]
OPS = ["create_many", "create", "update", "get", "get_as_of", "query", "query_as_of", "page"]
BENCH_TYPE: dict[str, Any] = {
    "name": "BenchItem",
    "identity": ["key"],
    "fields": {
        "key": {"type": "str", "required": True, "nullable": False},
        "category": {"type": "enum", "values": CATEGORIES},
        "score": {"type": "float"},
        "rank": {"type": "int"},
        "active": {"type": "bool", "default": True},
        "day": {"type": "date"},
        "tags": {"type": "list", "item": "str", "default": [], "nullable": False},
        "text": {"type": "str"},
    },
}


def make_row(i: int, rng: random.Random) -> dict[str, Any]:
    """One benchmark entity's data."""
    return {
        "key": f"k{i:08d}", "category": rng.choice(CATEGORIES), "score": rng.random() * 100,
        "rank": rng.randrange(1_000_000), "active": rng.random() < 0.8,
        "day": (dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(730))).isoformat(),
        "tags": rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 3)),
        "text": f"item {i} " + "lorem ipsum " * rng.randint(1, 5),
    }


def summarise(latencies: list[float], total: float | None = None, rows: int | None = None
              ) -> dict[str, float | int]:
    """n, total seconds, operations (or rows) per second, p50 and p95 in milliseconds."""
    ordered = sorted(latencies)
    total = sum(ordered) if total is None else total
    count = len(ordered) if rows is None else rows

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))] * 1000

    return {"n": count, "calls": len(ordered), "total_s": round(total, 4),
            "per_s": round(count / total, 1) if total else 0.0,
            "p50_ms": round(pct(0.50), 3), "p95_ms": round(pct(0.95), 3),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 3)}


def timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    call(*args, **kwargs)
    return time.perf_counter() - start


def bench_size(size: int, args: argparse.Namespace, workdir: Path,
               store_url: str | None = None) -> dict[str, Any]:
    """Every measurement on a fresh store of ``size`` entities (in DuckDB, or in the empty
    PostgreSQL database ``store_url``)."""
    rng = random.Random(args.seed)
    directory = workdir / f"store-{size}"
    shutil.rmtree(directory, ignore_errors=True)
    mem = Memory.open(directory, embedder=HashEmbedder(), vector_index=ExactIndex(),
                      settings=Settings(store_url=store_url))
    try:
        typedef = dict(BENCH_TYPE)
        if args.embed:
            typedef["embed"] = "{text} {category}"
        mem.define_type(typedef)
        results: dict[str, Any] = {}

        # bulk load, batch by batch
        batch_times: list[float] = []
        ids: list[str] = []
        load_total = 0.0
        for start in range(0, size, args.batch):
            rows = [make_row(i, rng) for i in range(start, min(size, start + args.batch))]
            began = time.perf_counter()
            ids.extend(e.id for e in mem.create_many("BenchItem", rows))
            batch_times.append(time.perf_counter() - began)
            load_total += batch_times[-1]
        results["create_many"] = summarise(batch_times, load_total, rows=size)
        mid_seq = mem.last_seq()  # the as_of reads look at the store as it was after the load
        samples = args.samples

        # single creates on top of the loaded store
        new_rows = [make_row(size + i, rng) for i in range(samples)]
        results["create"] = summarise([timed(mem.create, "BenchItem", row) for row in new_rows])
        # updates and reads of random entities of the bulk load
        picks = [rng.choice(ids) for _ in range(samples)]
        results["update"] = summarise([timed(mem.update, eid, {"score": rng.random() * 100})
                                       for eid in picks])
        picks = [rng.choice(ids) for _ in range(samples)]
        results["get"] = summarise([timed(mem.get, eid) for eid in picks])
        results["get_as_of"] = summarise([timed(mem.get, eid, as_of=mid_seq)
                                          for eid in picks[:min(samples, args.queries)]])

        def a_filter() -> dict[str, Any]:
            low = rng.random() * 80
            return {"category": rng.choice(CATEGORIES), "score": {"$gte": low, "$lt": low + 20},
                    "active": True}

        filters = [a_filter() for _ in range(args.queries)]
        order = {"order_by": "-score", "limit": 50}
        results["query"] = summarise([timed(mem.query, "BenchItem", w, **order)
                                      for w in filters])
        as_of_filters = filters[:args.asof_queries]
        results["query_live_same"] = summarise([timed(mem.query, "BenchItem", w, **order)
                                                for w in as_of_filters])
        results["query_as_of"] = summarise([
            timed(mem.query, "BenchItem", w, as_of=mid_seq, **order) for w in as_of_filters])

        # walk every page of a filter matching about a tenth of the rows
        page_times: list[float] = []
        cursor: str | None = None
        seen = 0
        walk_start = time.perf_counter()
        while True:
            began = time.perf_counter()
            page = mem.query("BenchItem", {"category": "c3"}, order_by=["day", "-score"],
                             limit=100, cursor=cursor)
            page_times.append(time.perf_counter() - began)
            seen += len(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        results["page"] = summarise(page_times, time.perf_counter() - walk_start)
        results["page_rows"] = seen

        report = mem.verify_audit()
        results["verify_audit_s"] = round(timed(mem.verify_audit), 3)
        results["events"] = report.events_checked
        results["as_of_vs_live"] = round(
            results["query_as_of"]["p50_ms"] / max(results["query_live_same"]["p50_ms"], 1e-9),
            1)
        if args.embed:  # hybrid search with a filter, exact over the filtered candidates
            texts = [f"item {rng.randrange(size)} lorem" for _ in range(args.queries)]
            results["search"] = summarise([
                timed(mem.search, "BenchItem", text, where={"category": rng.choice(CATEGORIES)},
                      k=10) for text in texts])
        if store_url is None:
            results["db_mb"] = round(sum(f.stat().st_size for f in directory.rglob("*")
                                         if f.is_file()) / 1e6, 1)
        else:
            row = mem._store.db.fetchone("SELECT pg_database_size(current_database())")
            results["db_mb"] = round(int(row[0]) / 1e6, 1) if row else 0.0
        return results
    finally:
        mem.close()
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


def markdown(all_results: dict[str, dict[str, Any]]) -> str:
    """The results as a markdown table: per operation and size, rate and latency."""
    sizes = list(all_results)
    head = "| operation | " + " | ".join(
        f"{int(s):,} ops/s | p50 ms | p95 ms" for s in sizes) + " |"
    rule = "|---|" + "---:|---:|---:|" * len(sizes)
    lines = [head, rule]
    labels = {"create_many": "create_many (rows/s, latency per batch)",
              "page": "query, paginated (per page of 100)",
              "query": "query, filtered (50 rows)",
              "query_as_of": "query as_of (same filters)",
              "get_as_of": "get as_of"}
    for op in OPS:
        cells = []
        for size in sizes:
            r = all_results[size][op]
            cells.append(f"{r['per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f}")
        lines.append(f"| {labels.get(op, op)} | " + " | ".join(cells) + " |")
    lines.append("")
    for size in sizes:
        r = all_results[size]
        lines.append(
            f"- {int(size):,} entities: as_of query p50 is {r['as_of_vs_live']}x the live "
            f"query's ({r['query_as_of']['p50_ms']:.1f} vs {r['query_live_same']['p50_ms']:.1f}"
            f" ms); verify_audit over {r['events']:,} events: {r['verify_audit_s']} s; "
            f"database: {r['db_mb']} MB")
    return "\n".join(lines)


def plot(all_results: dict[str, dict[str, Any]], path: Path) -> None:
    """Two panels: p50/p95 latency and throughput per operation, one bar group per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(all_results)
    fig, (lat_ax, rate_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(sizes)
    xs = range(len(OPS))
    for k, size in enumerate(sizes):
        offsets = [x + (k - (len(sizes) - 1) / 2) * width for x in xs]
        p50 = [all_results[size][op]["p50_ms"] for op in OPS]
        p95 = [all_results[size][op]["p95_ms"] for op in OPS]
        bars = lat_ax.bar(offsets, p50, width, label=f"{int(size):,} p50")
        lat_ax.scatter(offsets, p95, marker="_", s=200, color=bars.patches[0].get_facecolor(),
                       label=f"{int(size):,} p95")
        rate_ax.bar(offsets, [all_results[size][op]["per_s"] for op in OPS], width,
                    label=f"{int(size):,} entities")
    for ax, title, unit in ((lat_ax, "Latency", "ms (log)"), (rate_ax, "Throughput",
                                                               "ops or rows / s (log)")):
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(OPS, rotation=30, ha="right")
        ax.set_title(f"dmf-hybrid store: {title}")
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


def environment() -> dict[str, Any]:
    """What the numbers depend on: versions, CPUs and how busy the machine was."""
    import duckdb

    return {"python": platform.python_version(), "duckdb": duckdb.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--samples", type=int, default=500,
                        help="single creates / updates / gets per size")
    parser.add_argument("--queries", type=int, default=200, help="filtered queries per size")
    parser.add_argument("--asof-queries", type=int, default=30,
                        help="queries timed both live and as_of")
    parser.add_argument("--batch", type=int, default=2000, help="rows per create_many call")
    parser.add_argument("--embed", action="store_true",
                        help="embed the type (HashEmbedder) so the outbox and indexer run too")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the stores are built (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG path (default: --out with .png)")
    args = parser.parse_args(argv)
    if any(s < 1000 for s in args.sizes) or args.samples < 1 or args.queries < 1:
        parser.error("sizes must be >= 1000 and samples / queries >= 1")
    args.asof_queries = max(1, min(args.asof_queries, args.queries))

    env = environment()
    all_results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        workdir = args.workdir or Path(tmp)
        for size in args.sizes:
            started = time.perf_counter()
            all_results[str(size)] = bench_size(size, args, workdir)
            print(f"size {size:,}: done in {time.perf_counter() - started:.1f} s",
                  file=sys.stderr)
    env["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    table = markdown(all_results)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": "store", "settings": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": env, "results": all_results, "table": table}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    plot_path = args.plot or args.out.with_suffix(".png")
    plot(all_results, plot_path)
    print(f"\nwrote {args.out} and {plot_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
