"""The cost curve of one process, 10,000 to 1,000,000 entities: ``-m evaluation.bench_scale``.

For every size N a store of N products (the data and the fixed random "model" of
:mod:`evaluation.bench_search`: 384-dimensional vectors around 1,000 topics, no model run) and a
raw Chroma collection of the same vectors with the fields as metadata are built once (kept in
``--workdir``). Then three fresh processes in turn, so that each one's memory is its own:

* ``mirrored``: the default (the type's mirrors loaded within the memory budget);
* ``direct``: ``mirror_budget_mb`` far below the type's vectors, so nothing of it is loaded and
  every search reads the store (:mod:`dmf_hybrid._internal.search.direct`);
* ``chroma``: Chroma's own ``query(where=...)``.

Each opens the store (or collection), warms it (the service's warm-up; Chroma's first query) and
runs ``--queries`` vector searches (k=10) unfiltered and at 1 % and 10 % filters, and the same
as hybrid searches (ours); it reports open and warm-up seconds, p50/p95 per cell, its resident
memory after warming and its peak. Recall@10 is against numpy's exact top 10 of the filtered
vectors. Medians of one run, side by side; JSON (``--out``), markdown and a PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmf_hybrid import Memory, Settings
from evaluation import bench_search as bs
from evaluation.plotting import environment, markdown_table, publish, save_figure

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_scale.json"
SELECTIVITIES = ("1%", "10%", "100%")
ARMS = ("mirrored", "direct", "chroma")
#: The direct arm's budget: far below any of the sizes' vectors.
DIRECT_BUDGET_MB = 1.0
SEED, CLUSTERS, BATCH = 7, 1000, 50_000


def _data(n: int, queries: int) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    cols = bs.make_rows(n, rng)
    centers = bs.unit_vectors(rng, CLUSTERS, 0)
    vectors = bs.unit_vectors(rng, n, CLUSTERS, centers)
    texts = [f"{bs.ADJECTIVES[i % len(bs.ADJECTIVES)]} {bs.NOUNS[i * 7 % len(bs.NOUNS)]} q{i}"
             for i in range(queries)]
    return {"cols": cols, "vectors": vectors, "texts": texts,
            "qvecs": bs.unit_vectors(rng, queries, CLUSTERS, centers)}


def build(n: int, workdir: Path, data: Mapping[str, Any]) -> list[str]:
    """The store and the Chroma collection of size ``n`` (once); the entity IDs in row order."""
    ids_file = workdir / f"ids-{n}.json"
    if ids_file.is_file():
        ids: list[str] = json.loads(ids_file.read_text())
        return ids
    cols, vectors = data["cols"], data["vectors"]
    rows = [bs.product(cols, i) for i in range(n)]
    embedder = bs.RandomEmbedder([bs.text_of(r) for r in rows], vectors, SEED)
    started = time.perf_counter()
    with Memory.open(workdir / f"mem-{n}", embedder=embedder) as mem:
        mem.define(bs.Product, identity=["name"], embed=bs.EMBED_TEMPLATE)
        ids = []
        for at in range(0, n, BATCH):
            ids += [e.id for e in mem.create_many("Product", rows[at:at + BATCH])]
    print(f"built {n:,} entities in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    bs.chroma_collection(workdir / f"chroma-{n}", ids, vectors, cols)
    ids_file.write_text(json.dumps(ids))
    return ids


def _rss_mb() -> tuple[float, float]:
    """(resident, peak resident) MB of this process."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)


def arm(name: str, n: int, workdir: Path, queries: int) -> dict[str, Any]:
    """One arm, in this process: timings, answers and memory."""
    data = _data(n, queries)
    filt = bs.filters(data["cols"])
    del data["cols"], data["vectors"]
    out: dict[str, Any] = {"arm": name, "cells": {}}
    t0 = time.perf_counter()
    if name == "chroma":
        col = bs.chroma_client(workdir / f"chroma-{n}").get_collection("bench")
        out["open_s"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        col.query(query_embeddings=[data["qvecs"][0]], n_results=bs.K)
    else:
        embedder = bs.RandomEmbedder(data["texts"], data["qvecs"], SEED)
        settings = Settings(mirror_budget_mb=DIRECT_BUDGET_MB if name == "direct" else 0)
        mem = Memory.open(workdir / f"mem-{n}", embedder=embedder, settings=settings)
        out["open_s"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        mem.engine.warm()
    out["warm_s"] = round(time.perf_counter() - t1, 2)
    out["rss_warm_mb"] = round(_rss_mb()[0])
    modes = ("vector",) if name == "chroma" else ("vector", "hybrid")
    for sel in SELECTIVITIES:
        where, cwhere, _ = filt[sel]
        for mode in modes:
            times, answers, plans = [], [], []
            for text, qvec in zip(data["texts"], data["qvecs"], strict=True):
                start = time.perf_counter()
                if name == "chroma":
                    got = col.query(query_embeddings=[qvec], n_results=bs.K, where=cwhere,
                                    include=["distances"])
                    found = list(got["ids"][0])
                else:
                    res = mem.search("Product", text, where=where, k=bs.K, mode=mode)
                    found = [h.entity.id for h in res.hits]
                    plans.append(res.receipt.plan + ("/direct" if res.receipt.direct else ""))
                times.append(time.perf_counter() - start)
                answers.append(found)
            out["cells"][f"{sel} {mode}"] = {"times": times, "answers": answers,
                                             "plans": sorted(set(plans))}
    out["rss_end_mb"], out["rss_peak_mb"] = (round(v) for v in _rss_mb())
    if name != "chroma":
        mem.close()
    return out


def run(sizes: Sequence[int], queries: int, workdir: Path) -> dict[str, Any]:
    """Build and measure every size; the JSON-able results."""
    doc: dict[str, Any] = {"benchmark": "bench_scale", "environment": environment(),
                           "queries": queries, "k": bs.K, "sizes": {}}
    for n in sizes:
        data = _data(n, queries)
        ids = build(n, workdir, data)
        row_of = {eid: i for i, eid in enumerate(ids)}
        filt = bs.filters(data["cols"])
        truth = {sel: [bs.exact_top(data["vectors"], np.flatnonzero(filt[sel][2]), q, bs.K)
                       for q in data["qvecs"]] for sel in SELECTIVITIES}
        del data
        entry: dict[str, Any] = {}
        for name in ARMS:
            done = subprocess.run(
                [sys.executable, "-m", "evaluation.bench_scale", "--arm", name, "--sizes",
                 str(n), "--queries", str(queries), "--workdir", str(workdir)],
                cwd=ROOT, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.splitlines()[-1])
            for cell, got in result.pop("cells").items():
                sel = cell.split()[0]
                times = sorted(got["times"])
                summary: dict[str, Any] = {
                    "p50_ms": round(statistics.median(times) * 1000, 2),
                    "p95_ms": round(times[int(round(0.95 * (len(times) - 1)))] * 1000, 2),
                    "plans": got["plans"]}
                if cell.endswith("vector"):
                    summary["recall_at_10"] = round(float(np.mean([
                        bs.recall([row_of[e] for e in found], t)
                        for found, t in zip(got["answers"], truth[sel], strict=True)])), 4)
                result[cell] = summary
            entry[name] = result
        doc["sizes"][str(n)] = entry
    return doc


def markdown(doc: Mapping[str, Any]) -> str:
    rows = []
    for n, entry in doc["sizes"].items():
        for name in ARMS:
            r = entry[name]
            cells = [f"{r[f'{s} vector']['p50_ms']} ({r[f'{s} vector']['recall_at_10']})"
                     for s in SELECTIVITIES]
            hybrid = [r[f"{s} hybrid"]["p50_ms"] if f"{s} hybrid" in r else "–"
                      for s in SELECTIVITIES]
            rows.append([f"{int(n):,}", name, *cells, *hybrid, r["warm_s"], r["rss_warm_mb"],
                         r["rss_peak_mb"]])
    header = ["entities", "process", *[f"vector {s} p50 ms (recall@10)" for s in SELECTIVITIES],
              *[f"hybrid {s} p50 ms" for s in SELECTIVITIES], "warm-up s", "RSS MB",
              "peak RSS MB"]
    return (f"# One process from 10,000 to 1,000,000 entities ({doc['queries']} queries per "
            "cell, k=10, 384 dimensions)\n\n" + markdown_table(header, rows)
            + "\nmirrored: the default (the type's mirrors in memory); direct: a memory budget "
              "below the type's vectors (nothing loaded, every search reads the store); "
              "chroma: Chroma's own `where`.\n")


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(n) for n in doc["sizes"]]
    fig, axes = plt.subplots(1, len(SELECTIVITIES) + 1, figsize=(16, 4))
    for ax, sel in zip(axes, SELECTIVITIES, strict=False):
        for name in ARMS:
            ax.plot(sizes, [doc["sizes"][str(n)][name][f"{sel} vector"]["p50_ms"]
                            for n in sizes], marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="entities", ylabel="p50 ms",
               title=f"vector search, {sel} of the rows")
        ax.legend()
    ax = axes[-1]
    for name in ARMS:
        ax.plot(sizes, [doc["sizes"][str(n)][name]["rss_warm_mb"] for n in sizes],
                marker="o", label=name)
    ax.set(xscale="log", yscale="log", xlabel="entities", ylabel="MB",
           title="resident memory after warm-up")
    ax.legend()
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "dmf-bench-scale",
                        help="where the stores are built and kept between runs")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.arm is not None:  # one arm, in a process of its own
        print(json.dumps(arm(args.arm, args.sizes[0], args.workdir, args.queries)))
        return 0
    doc = run(args.sizes, args.queries, args.workdir)
    publish(doc, args.out, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
