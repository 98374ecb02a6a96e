"""Benchmark of writes while a type's search mirrors load: do they wait for the load?

``python -m evaluation.bench_load_writes [--n 20000 | --store DIR] [--rounds 2]``

A type's first search (or the service's warm-up) reads its exact vector mirror and BM25 indexes
from DuckDB, 15-25 s at 100,000 entities. The product reads them from a DuckDB snapshot with no
lock held and then catches up with the writes made meanwhile (*snapshot*); the alternative,
still used when the audit events cannot say what changed, reads them holding off writes
(*locked*, selected here by detaching the indexer's change feed). In each round and for each
variant, in rotated order, the mirrors are dropped and loaded in a thread while this thread
creates one entity every ``--gap-ms`` and times each create (a commit, its audit event, the
embedding of one text, the vector index upsert), until the load ends and a few writes after.

The store is the cold-start benchmark's (``--n`` BenchNotes built with the measured embedder
into a temporary directory), or a copy of ``--store`` (for instance one that
``bench_coldstart --build-into`` made): the original is never written to.
Writes JSON (``--out``), a markdown table (same stem, ``.md``) and a PNG of every write's
latency against the time since its load began (same stem, ``.png``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.bench_coldstart import build_in_child
from evaluation.bench_http import TYPE_NAME
from evaluation.plotting import environment, line_plots, markdown_table, write_results

log = logging.getLogger("bench_load_writes")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_load_writes.json"
VARIANTS = ("snapshot", "locked")
#: Writes timed after the load ended (the steady state, for comparison).
AFTER = 5


def timed_load(mem: Any, variant: str, gap_s: float, tag: str) -> dict[str, Any]:
    """Drop the mirrors, load them in a thread, and time creates until it is done."""
    engine = mem.engine
    indexer = engine.indexer
    etype = mem.get_type(TYPE_NAME)
    feed = indexer.changes
    indexer.changes = feed if variant == "snapshot" else None
    indexer.forget_local()
    done = threading.Event()
    failures: list[BaseException] = []
    loaded: list[float] = []

    def load() -> None:
        try:
            engine.ensure_loaded(etype)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            loaded.append(time.perf_counter())
            done.set()

    writes: list[tuple[float, float, bool]] = []  # (started after the load began, s, during)
    began = time.perf_counter()
    thread = threading.Thread(target=load, name="bench-load")
    thread.start()
    after = 0
    try:
        while after < AFTER:
            during = not done.is_set()
            start = time.perf_counter()
            mem.create(TYPE_NAME, {"title": f"{tag} note {len(writes)}",
                                   "body": "written while the mirrors load", "year": 2026})
            writes.append((start - began, time.perf_counter() - start, during))
            after += 0 if during else 1
            time.sleep(gap_s)
    finally:
        thread.join()
        indexer.changes = feed
    if failures:
        raise failures[0]
    load_s = loaded[0] - began
    during_s = [s for _, s, d in writes if d]
    after_s = [s for _, s, d in writes if not d]
    return {
        "variant": variant,
        "load_s": round(load_s, 2),
        "writes_during": len(during_s),
        "during_p50_ms": round(statistics.median(during_s) * 1000, 1) if during_s else None,
        "during_max_ms": round(max(during_s) * 1000, 1) if during_s else None,
        "after_p50_ms": round(statistics.median(after_s) * 1000, 1) if after_s else None,
        "writes": [[round(t, 3), round(s * 1000, 2), d] for t, s, d in writes],
    }


def run(*, n: int = 20000, store: Path | None = None, embedder: str = DEFAULT_EMBEDDER,
        rounds: int = 2, gap_ms: float = 50.0, seed: int = 7, workdir: Path | None = None,
        timeout: float = 3600.0) -> dict[str, Any]:
    """Build (or copy) the store, then time writes during loads (see the module doc)."""
    from dmf_hybrid import Memory
    from dmf_hybrid._internal.config import Settings

    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dmf-bench-load-", dir=workdir))
    try:
        path = tmp / "store"
        if store is not None:
            shutil.copytree(store, path)
            build_s = None
        else:
            build_s = round(build_in_child(path, n, embedder, seed, timeout), 1)
        settings = Settings(data_dir=path, embedder=embedder, load_examples=False)
        results: list[dict[str, Any]] = []
        with Memory.open(path, settings=settings) as mem:
            entities = mem.count(TYPE_NAME)
            mem.search(TYPE_NAME, "warm up the model", k=1)  # the model, not the mirrors
            for r in range(rounds):
                order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    result = timed_load(mem, variant, gap_ms / 1000.0, f"r{r}-{variant}")
                    result["round"] = r + 1
                    log.info("round %d %s: load %.1f s, %d writes during it, max %.0f ms",
                             r + 1, variant, result["load_s"], result["writes_during"],
                             result["during_max_ms"] or 0)
                    results.append(result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "benchmark": "bench_load_writes",
        "config": {"entities": entities, "embedder": embedder, "rounds": rounds,
                   "gap_ms": gap_ms, "store": str(store) if store else None,
                   "build_s": build_s},
        "environment": environment(),
        "results": results,
        "elapsed_s": round(time.perf_counter() - began, 1),
    }


def markdown(doc: Mapping[str, Any]) -> str:
    """The results as a markdown section."""
    config = doc["config"]
    rows = [[r["round"], r["variant"], r["load_s"], r["writes_during"], r["during_p50_ms"],
             r["during_max_ms"], r["after_p50_ms"]] for r in doc["results"]]
    return (
        "## Writes while a type's mirrors load\n\n"
        f"{config['entities']} entities, embedder `{config['embedder']}`, one create every "
        f"{config['gap_ms']} ms, {config['rounds']} rounds in rotated order "
        f"({doc['environment']['cpus']} CPUs, load average "
        f"{doc['environment']['load_average']}). *snapshot*: the product (read unlocked, then "
        "caught up); *locked*: the load holds off writes.\n\n"
        + markdown_table(["round", "variant", "load s", "writes during the load",
                          "write p50 ms", "write max ms", "write p50 ms after"], rows)
        + "\n"
    )


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """A PNG: each write's latency against the time since its load began, per variant."""
    series: dict[str, tuple[list[float], list[float], str]] = {}
    for r in doc["results"]:
        style = f"C{VARIANTS.index(r['variant'])}{'-' if r['round'] == 1 else '--'}"
        series[f"{r['variant']}, round {r['round']}"] = (
            [w[0] for w in r["writes"]], [w[1] for w in r["writes"]], style)
    return line_plots(path, [("Writes while the mirrors load", "create latency (ms)", series)],
                      xlabel="seconds since the load began", logy_panels=(0,),
                      title=f"{doc['config']['entities']} entities")


def write_outputs(doc: Mapping[str, Any], out: Path, *, png: bool = True) -> list[Path]:
    """JSON at ``out``, markdown and (optionally) PNG beside it; the paths written."""
    return write_results(doc, out, markdown, plot if png else None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=20000, help="entities to build (20000)")
    parser.add_argument("--store", type=Path, default=None,
                        help="copy this memory directory instead of building one")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER,
                        help=f"embedder setting (default {DEFAULT_EMBEDDER})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gap-ms", type=float, default=50.0, help="pause between writes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the temp dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    doc = run(n=args.n, store=args.store, embedder=args.embedder, rounds=args.rounds,
              gap_ms=args.gap_ms, seed=args.seed, workdir=args.workdir)
    print(markdown(doc))
    paths = write_outputs(doc, args.out, png=not args.no_plot)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
