"""The cost curve of one process, 10,000 to 1,000,000 entities: ``-m evaluation.bench_scale``.

For every size N a store of N products (the data and the fixed random "model" of
:mod:`evaluation.bench_search`: 384-dimensional vectors around 1,000 topics, no model run) and a
raw Chroma collection of the same vectors with the fields as metadata are built once (kept in
``--workdir``). Then three fresh processes in turn, so that each one's memory is its own:

* ``mirrored``: the default (the type's mirrors loaded within the memory budget);
* ``direct``: ``mirror_budget_mb`` far below the type's vectors, so nothing of it is loaded and
  every search reads the store (:mod:`dmf_hybrid._internal.search.direct`);
* ``chroma``: Chroma's own ``query(where=...)``.

For the sizes of ``--postgresql-sizes`` (default 100,000) the ``mirrored`` and ``direct`` arms
also run on the PostgreSQL engine: a server of its own (Debian's binaries,
:mod:`evaluation.pgserver`, PostgreSQL's durable defaults) holds a store built afresh for the
run (the server lives as long as the run), with its vector index on local disk beside it.

Each opens the store (or collection), warms it (the service's warm-up; Chroma's first query) and
runs ``--queries`` vector searches (k=10) unfiltered and at 1 % and 10 % filters, and the same
as hybrid searches (ours); it reports open and warm-up seconds, p50/p95 per cell, its resident
memory after warming and its peak. Recall@10 is against numpy's exact top 10 of the filtered
vectors. Medians of one run, side by side; JSON (``--out``), markdown and a PNG.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from dmf_hybrid import Memory, Settings
from dmf_hybrid._internal.search.filter_cache import FilterCache
from evaluation import bench_search as bs
from evaluation.pgserver import PgServer, binaries
from evaluation.plotting import environment, markdown_table, publish, save_figure

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_scale.json"
SELECTIVITIES = ("1%", "10%", "100%")
ARMS = ("mirrored", "direct", "chroma")
#: The arms that also run on PostgreSQL, and the suffix of their names there.
PG_ARMS, PG = ("mirrored", "direct"), " (postgresql)"
#: The direct arm's budget: far below any of the sizes' vectors.
DIRECT_BUDGET_MB = 1.0
SEED, CLUSTERS, BATCH = 7, 1000, 50_000


class Product(bs.Product):
    """A product listing whose filtered fields are indexed."""

    # the fields the benchmark filters by, declared `indexed` as a user would mark those of a
    # large type (docs/postgresql.md#indexes-for-filters)
    category: bs.Category = Field(json_schema_extra={"indexed": True})
    city: str = Field(json_schema_extra={"indexed": True})


def _define(mem: Memory) -> None:
    """The benchmark's type (a store built before its fields were indexed gets a new version
    of it, which makes the indexes; nothing when it is current)."""
    mem.define(Product, identity=["name"], embed=bs.EMBED_TEMPLATE)


def _data(n: int, queries: int) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    cols = bs.make_rows(n, rng)
    centers = bs.unit_vectors(rng, CLUSTERS, 0)
    vectors = bs.unit_vectors(rng, n, CLUSTERS, centers)
    texts = [f"{bs.ADJECTIVES[i % len(bs.ADJECTIVES)]} {bs.NOUNS[i * 7 % len(bs.NOUNS)]} q{i}"
             for i in range(queries)]
    return {"cols": cols, "vectors": vectors, "texts": texts,
            "qvecs": bs.unit_vectors(rng, queries, CLUSTERS, centers)}


def _store(workdir: Path, n: int, store_url: str | None) -> Path:
    """The data directory of the size-``n`` store (its PostgreSQL one beside the DuckDB one)."""
    return workdir / (f"mem-{n}" if store_url is None else f"pg-{n}")


def _fill(path: Path, data: Mapping[str, Any], n: int, store_url: str | None) -> list[str]:
    """A store of the ``n`` products at ``path`` (on PostgreSQL: in ``store_url``); their IDs."""
    cols, vectors = data["cols"], data["vectors"]
    rows = [bs.product(cols, i) for i in range(n)]
    embedder = bs.RandomEmbedder([bs.text_of(r) for r in rows], vectors, SEED)
    started = time.perf_counter()
    with Memory.open(path, embedder=embedder, settings=Settings(store_url=store_url)) as mem:
        _define(mem)
        ids = []
        for at in range(0, n, BATCH):
            ids += [e.id for e in mem.create_many("Product", rows[at:at + BATCH])]
    print(f"built {n:,} entities ({'PostgreSQL' if store_url else 'DuckDB'}) in "
          f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return ids


def build(n: int, workdir: Path, data: Mapping[str, Any]) -> list[str]:
    """The DuckDB store and the Chroma collection of size ``n`` (once, kept in ``workdir``);
    the entity IDs in row order."""
    ids_file = workdir / f"ids-{n}.json"
    if ids_file.is_file():
        embedder = bs.RandomEmbedder(data["texts"], data["qvecs"], SEED)
        with Memory.open(_store(workdir, n, None), embedder=embedder) as mem:
            _define(mem)
        ids: list[str] = json.loads(ids_file.read_text())
        return ids
    ids = _fill(_store(workdir, n, None), data, n, None)
    bs.chroma_collection(workdir / f"chroma-{n}", ids, vectors=data["vectors"],
                         cols=data["cols"])
    ids_file.write_text(json.dumps(ids))
    return ids


def _rss_mb() -> tuple[float, float]:
    """(resident, peak resident) MB of this process."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)


def _reset_peak() -> None:
    """Linux: start this process's peak resident memory again from now (best effort)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def arm(name: str, n: int, workdir: Path, queries: int, store_url: str | None = None
        ) -> dict[str, Any]:
    """One arm, in this process: timings, answers and memory (``store_url``: the arm's store
    is on PostgreSQL)."""
    data = _data(n, queries)
    filt = bs.filters(data["cols"])
    del data["cols"], data["vectors"]
    _reset_peak()  # the peak is then the arm's own, not the generated data's
    out: dict[str, Any] = {"arm": name, "cells": {}}
    t0 = time.perf_counter()
    if name == "chroma":
        col = bs.chroma_client(workdir / f"chroma-{n}").get_collection("bench")
        out["open_s"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        col.query(query_embeddings=[data["qvecs"][0]], n_results=bs.K)
    else:
        embedder = bs.RandomEmbedder(data["texts"], data["qvecs"], SEED)
        settings = Settings(mirror_budget_mb=DIRECT_BUDGET_MB if name == "direct" else 0,
                            store_url=store_url)
        mem = Memory.open(_store(workdir, n, store_url), embedder=embedder, settings=settings)
        out["open_s"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        mem.engine.warm()
    out["warm_s"] = round(time.perf_counter() - t1, 2)
    out["rss_warm_mb"] = round(_rss_mb()[0])
    # Chroma answers IDs and distances; with "metadatas" it also returns the rows' fields,
    # as every search of ours returns the entities (read back from the store)
    modes = ("vector", "metadatas") if name == "chroma" else ("vector", "hybrid")
    for sel in SELECTIVITIES:
        where, cwhere, _ = filt[sel]
        for mode in modes:
            times, answers, plans = [], [], []
            for text, qvec in zip(data["texts"], data["qvecs"], strict=True):
                start = time.perf_counter()
                if name == "chroma":
                    got = col.query(query_embeddings=[qvec], n_results=bs.K, where=cwhere,
                                    include=["distances", "metadatas"] if mode == "metadatas"
                                    else ["distances"])
                    found = list(got["ids"][0])
                else:
                    found, plan = _ours(mem, text, where, mode)
                    plans.append(plan)
                times.append(time.perf_counter() - start)
                answers.append(found)
            out["cells"][f"{sel} {mode}"] = {"times": times, "answers": answers,
                                             "plans": sorted(set(plans))}
    if name != "chroma":  # the 1 % filter never seen before: each search with no kept list
        out["cells"]["1% new-filter"] = _new_filter(mem, data["texts"], filt["1%"][0])
    out["rss_end_mb"], out["rss_peak_mb"] = (round(v) for v in _rss_mb())
    if name == "mirrored":  # (after the memory figures: this opens Chroma's collection too)
        out["cells"].update(_side_by_side(mem, workdir / f"chroma-{n}", data))
    if name != "chroma":
        # the memory budget and what the loaded mirrors hold by the product's own count
        loaded = mem.engine.indexer.loaded
        out["budget_mb"] = round(loaded.budget_bytes / 2**20)
        out["mirrors_mb"] = round(sum(loaded.nbytes().values()) / 2**20)
        mem.close()
    return out


def _ours(mem: Memory, text: str, where: Mapping[str, Any] | None, mode: str
          ) -> tuple[list[str], str]:
    """One of our searches: the IDs it found and its plan (``/direct`` when it read the store)."""
    res = mem.search("Product", text, where=where, k=bs.K, mode=mode)
    return ([h.entity.id for h in res.hits],
            res.receipt.plan + ("/direct" if res.receipt.direct else ""))


def _side_by_side(mem: Memory, chroma_dir: Path, data: Mapping[str, Any]
                  ) -> dict[str, dict[str, Any]]:
    """Our unfiltered vector search and raw Chroma's query of the same vector, in turns in
    this one process (who goes first alternates): each runs after the other's cache traffic,
    as searches in a service do, where the separate arms each run back to back."""
    col = bs.chroma_client(chroma_dir).get_collection("bench")
    col.query(query_embeddings=[data["qvecs"][0]], n_results=bs.K)
    cells: dict[str, dict[str, Any]] = {
        f"100% side-by-side {who}": {"times": [], "answers": [], "plans": []}
        for who in ("ours", "chroma")}
    for i, (text, qvec) in enumerate(zip(data["texts"], data["qvecs"], strict=True)):
        for who in ("ours", "chroma") if i % 2 == 0 else ("chroma", "ours"):
            start = time.perf_counter()
            if who == "ours":
                found = _ours(mem, text, None, "vector")[0]
            else:
                found = list(col.query(query_embeddings=[qvec], n_results=bs.K,
                                       include=["distances"])["ids"][0])
            cell = cells[f"100% side-by-side {who}"]
            cell["times"].append(time.perf_counter() - start)
            cell["answers"].append(found)
    return cells


def _new_filter(mem: Memory, texts: Sequence[str], where: Mapping[str, Any]
                ) -> dict[str, Any]:
    """Vector searches each with an empty candidate-list cache in place of the engine's (so
    the filter is evaluated as if never seen; the engine's own cache stays as it was)."""
    times, answers, plans = [], [], []
    for text in texts:
        with bs.aside(mem.engine, filters=FilterCache(mem.engine.settings.exact_threshold)):
            start = time.perf_counter()
            found, plan = _ours(mem, text, where, "vector")
            times.append(time.perf_counter() - start)
        answers.append(found)
        plans.append(plan)
    return {"times": times, "answers": answers, "plans": sorted(set(plans))}


def run(sizes: Sequence[int], queries: int, workdir: Path,
        pg_sizes: Sequence[int] = ()) -> dict[str, Any]:
    """Build and measure every size (and on PostgreSQL those of ``pg_sizes``); the JSON-able
    results."""
    doc: dict[str, Any] = {"benchmark": "bench_scale", "environment": environment(),
                           "queries": queries, "k": bs.K, "sizes": {}}
    server = None
    if set(pg_sizes) & set(sizes):
        bin_dir = binaries()
        if bin_dir is None:
            doc["postgresql"] = "not run: PostgreSQL's server binaries are missing"
        else:
            server = PgServer(bin_dir, durable=True)
    try:
        for n in sizes:
            data = _data(n, queries)
            ids = build(n, workdir, data)
            arms: list[tuple[str, str | None]] = [(name, None) for name in ARMS]
            if server is not None and n in pg_sizes:
                url = server.fresh()
                shutil.rmtree(_store(workdir, n, url), ignore_errors=True)
                if _fill(_store(workdir, n, url), data, n, url) != ids:
                    raise RuntimeError("the PostgreSQL store's IDs differ from DuckDB's")
                arms += [(name + PG, url) for name in PG_ARMS]
            truth = _truth(data)
            del data
            doc["sizes"][str(n)] = {
                label: _measure(label, store_url, n, queries, workdir, ids, truth)
                for label, store_url in arms}
    finally:
        if server is not None:
            server.stop()
    return doc


def _truth(data: Mapping[str, Any]) -> dict[str, list[list[int]]]:
    """numpy's exact top ``k`` rows of each query, per selectivity."""
    filt = bs.filters(data["cols"])
    return {sel: [bs.exact_top(data["vectors"], np.flatnonzero(filt[sel][2]), q, bs.K)
                  for q in data["qvecs"]] for sel in SELECTIVITIES}


def _measure(label: str, store_url: str | None, n: int, queries: int, workdir: Path,
             ids: Sequence[str], truth: Mapping[str, list[list[int]]]) -> dict[str, Any]:
    """One arm run in a process of its own, summarised: p50/p95 and recall@10 per cell."""
    name = label.removesuffix(PG)
    command = [sys.executable, "-m", "evaluation.bench_scale", "--arm", name, "--sizes",
               str(n), "--queries", str(queries), "--workdir", str(workdir)]
    done = subprocess.run(command + (["--store-url", store_url] if store_url else []),
                          cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    row_of = {eid: i for i, eid in enumerate(ids)}
    for cell, got in result.pop("cells").items():
        sel = cell.split()[0]
        times = sorted(got["times"])
        summary: dict[str, Any] = {
            "p50_ms": round(statistics.median(times) * 1000, 2),
            "p95_ms": round(times[int(round(0.95 * (len(times) - 1)))] * 1000, 2),
            "plans": got["plans"]}
        if not cell.endswith("hybrid"):
            summary["recall_at_10"] = round(float(np.mean([
                bs.recall([row_of[e] for e in found], t)
                for found, t in zip(got["answers"], truth[sel], strict=True)])), 4)
        result[cell] = summary
    return result


def markdown(doc: Mapping[str, Any]) -> str:
    rows = []
    for n, entry in doc["sizes"].items():
        for name, r in entry.items():
            for mode, label in (("vector", name), ("metadatas", f"{name}, fields returned")):
                if f"100% {mode}" not in r:
                    continue
                cells = [f"{r[f'{s} {mode}']['p50_ms']} ({r[f'{s} {mode}']['recall_at_10']})"
                         for s in SELECTIVITIES]
                hybrid = [r[f"{s} hybrid"]["p50_ms"] if f"{s} hybrid" in r else "–"
                          for s in SELECTIVITIES]
                new = r.get("1% new-filter", {}).get("p50_ms", "–")
                rows.append([f"{int(n):,}", label, *cells, new, *hybrid, r["warm_s"],
                             r["rss_warm_mb"], r["rss_peak_mb"],
                             f"{r['mirrors_mb']:,} / {r['budget_mb']:,}" if "budget_mb" in r
                             else "–"])
    header = ["entities", "process", *[f"vector {s} p50 ms (recall@10)" for s in SELECTIVITIES],
              "vector 1% never seen p50 ms", *[f"hybrid {s} p50 ms" for s in SELECTIVITIES],
              "warm-up s", "RSS MB", "peak RSS MB", "mirrors / budget MB"]
    return (f"# One process from 10,000 to 1,000,000 entities ({doc['queries']} queries per "
            "cell, k=10, 384 dimensions)\n\n" + markdown_table(header, rows)
            + "\nmirrored: the default (the type's mirrors in memory); direct: a memory budget "
              "below the type's vectors (nothing loaded, every search reads the store); "
              "never seen: each search with an empty cache of candidate lists (Chroma keeps "
            "none); chroma: Chroma's own `where` (IDs and distances; \"fields returned\": with "
            "its metadatas, as each of our searches returns the entities); (postgresql): "
            "the same on the PostgreSQL engine. The type's `city` (the 1 % filter) and "
            "`category` (the 10 % filter) are declared `indexed`.\n"
            + (f"\nPostgreSQL: {doc['postgresql']}\n" if "postgresql" in doc else "")
            + side_by_side(doc))


def side_by_side(doc: Mapping[str, Any]) -> str:
    """The unfiltered search against raw Chroma's in turns in one process, per size and
    engine (the mirrored arms)."""
    rows = [[f"{int(n):,}", name, r[ours]["p50_ms"], r[theirs]["p50_ms"],
             f"{r[ours]['p50_ms'] / r[theirs]['p50_ms']:.2f}x", r[ours]["recall_at_10"],
             r[theirs]["recall_at_10"]]
            for n, entry in doc["sizes"].items() for name, r in entry.items()
            for ours, theirs in [("100% side-by-side ours", "100% side-by-side chroma")]
            if ours in r]
    if not rows:
        return ""
    return ("\nUnfiltered, side by side in one process (the two take turns, who goes first "
            "alternating):\n\n" + markdown_table(
                ["entities", "process", "ours p50 ms", "raw Chroma p50 ms", "ratio",
                 "ours recall@10", "Chroma recall@10"], rows))


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(n) for n in doc["sizes"]]
    names = list(dict.fromkeys(name for entry in doc["sizes"].values() for name in entry))
    fig, axes = plt.subplots(1, len(SELECTIVITIES) + 1, figsize=(16, 4))
    for ax, sel in zip(axes, SELECTIVITIES, strict=False):
        for name in names:
            at = [n for n in sizes if name in doc["sizes"][str(n)]]
            ax.plot(at, [doc["sizes"][str(n)][name][f"{sel} vector"]["p50_ms"] for n in at],
                    marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="entities", ylabel="p50 ms",
               title=f"vector search, {sel} of the rows")
        ax.legend()
    ax = axes[-1]
    for name in names:
        at = [n for n in sizes if name in doc["sizes"][str(n)]]
        ax.plot(at, [doc["sizes"][str(n)][name]["rss_warm_mb"] for n in at], marker="o",
                label=name)
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
    parser.add_argument("--postgresql-sizes", type=int, nargs="*", default=[100_000],
                        help="sizes also measured on the PostgreSQL engine (default 100000)")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.arm is not None:  # one arm, in a process of its own
        print(json.dumps(arm(args.arm, args.sizes[0], args.workdir, args.queries,
                             args.store_url)))
        return 0
    doc = run(args.sizes, args.queries, args.workdir, args.postgresql_sizes)
    publish(doc, args.out, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
