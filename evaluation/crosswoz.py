"""CrossWOZ: Chinese travel dialogues over a Beijing database, both protocols through ``Memory``.

``python -m evaluation crosswoz --data ../shared/datasets/crosswoz --split val`` ingests the
2,549 attractions, restaurants and hotels (:mod:`evaluation.types`, texts such as
``{name}，推荐菜：{dishes}，{address}``) with ``Memory.create_many`` and, for each mode, runs:

1. *filtered search*: every query whose slots parsed into a filter,
   ``search(type, text, where=where, k=50)``; a query is *exact* when every hit satisfies the
   filter (checked here in Python against the dataset, not by the memory) and, when at most
   50 entities satisfy it, all of them come back;
2. *lookup by free text*: the queries naming exactly one name, dish or facility verbatim
   (:meth:`~evaluation.datasets.CrossWozDataset.lookups`), ``search(type, text, k=5)`` with
   no filter; success@1 / success@5 (a gold entity in the top 1 / 5) and MRR@5, overall and
   per slot kind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from dmf_hybrid import Memory
from dmf_hybrid._internal.embeddings import Embedder
from evaluation import datasets as ds
from evaluation.runner import (
    RunOptions,
    _config,
    _headline,
    _timings,
    _tqdm,
    begin,
    default_workdir,
    ingest,
    latency_summary,
    open_memory,
    ready_embedder,
)
from evaluation.types import CROSSWOZ_EMBED, CROSSWOZ_IDENTITY, CROSSWOZ_MODELS

FILTERED_K = 50
LOOKUP_K = 5
LOOKUP_CURVE = (1, 2, 3, 4, 5)


def define_crosswoz_types(mem: Memory, analyzer: str | None = None) -> None:
    """Register (idempotently) the three CrossWOZ types (keyword ``analyzer`` if given)."""
    for name, model in CROSSWOZ_MODELS.items():
        mem.define(model, identity=list(CROSSWOZ_IDENTITY), embed=CROSSWOZ_EMBED[name],
                   name=name, analyzer=analyzer)


def matches(where: Mapping[str, Any] | None, data: Mapping[str, Any]) -> bool:
    """Whether ``data`` satisfies a filter of the memory's language (as SQL would: a null
    value satisfies no comparison)."""
    if not where:
        return True
    for key, cond in where.items():
        if key == "$and":
            if not all(matches(c, data) for c in cond):
                return False
            continue
        if key == "$or":
            if not any(matches(c, data) for c in cond):
                return False
            continue
        ops = cond if isinstance(cond, Mapping) else {"$eq": cond}
        value = data.get(key)
        for op, operand in ops.items():
            if not _compare(op, value, operand):
                return False
    return True


def _compare(op: str, value: Any, operand: Any) -> bool:
    if op == "$contains":
        if isinstance(value, list):
            return operand in value
        return isinstance(value, str) and operand in value
    if value is None:
        return False
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op == "$in":
        return value in operand
    if op == "$nin":
        return value not in operand
    comparisons = {"$gt": value > operand, "$gte": value >= operand,
                   "$lt": value < operand, "$lte": value <= operand}
    return bool(comparisons[op])


def filtered_protocol(mem: Memory, dataset: ds.CrossWozDataset, mode: str, *,
                      limit: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Protocol 1 in one mode: exactness counts and latencies."""
    queries = [q for q in dataset.queries if q.where is not None][:limit]
    exact = violating = incomplete = 0
    latencies: list[float] = []
    for q in _tqdm(queries, desc=f"filtered {mode}", unit="q", disable=not progress):
        truth = {name for name, attrs in dataset.entities[q.type].items()
                 if matches(q.where, attrs)}
        began = time.perf_counter()
        hits = mem.search(q.type, q.text, where=q.where, k=FILTERED_K, mode=mode).hits
        latencies.append((time.perf_counter() - began) * 1000)
        got = [h.entity.data.name for h in hits]
        bad = [n for n in got if n not in truth]
        missing = len(truth) <= FILTERED_K and set(got) != truth
        violating += bool(bad)
        incomplete += missing
        exact += not bad and not missing
    return {"queries": len(queries), "exact": exact, "with_violating_hit": violating,
            "incomplete": incomplete, "latencies_ms": latencies}


def lookup_protocol(mem: Memory, dataset: ds.CrossWozDataset, mode: str, *,
                    limit: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Protocol 2 in one mode: the rank of the first gold hit per query, and latencies."""
    lookups = dataset.lookups()[:limit]
    ranks: list[tuple[str, int | None]] = []
    latencies: list[float] = []
    for q, kind, gold in _tqdm(lookups, desc=f"lookup {mode}", unit="q",
                               disable=not progress):
        began = time.perf_counter()
        hits = mem.search(q.type, q.text, k=LOOKUP_K, mode=mode).hits
        latencies.append((time.perf_counter() - began) * 1000)
        names = [h.entity.data.name for h in hits]
        rank = next((i for i, n in enumerate(names, 1) if n in gold), None)
        ranks.append((kind, rank))
    return {"ranks": ranks, "latencies_ms": latencies}


def lookup_scores(ranks: Sequence[tuple[str, int | None]]) -> dict[str, Any]:
    """success@1, success@5, MRR@5 overall and per slot kind, and the success@k curve."""
    def figures(found: Sequence[int | None]) -> dict[str, float]:
        return {"success@1": round(fmean(r == 1 for r in found), 6),
                "success@5": round(fmean(r is not None and r <= 5 for r in found), 6),
                "mrr@5": round(fmean(1 / r if r else 0.0 for r in found), 6)}

    all_ranks = [r for _, r in ranks]
    per_kind = {kind: {"queries": sum(1 for k, _ in ranks if k == kind),
                       **figures([r for k, r in ranks if k == kind])}
                for kind in ds.LOOKUP_SLOTS if any(k == kind for k, _ in ranks)}
    curve = {str(k): round(fmean(r is not None and r <= k for r in all_ranks), 6)
             for k in LOOKUP_CURVE}
    return {"metrics": figures(all_ranks), "per_category": per_kind, "recall_curve": curve}


def run_crosswoz(data: str | Path, split: str = "val", options: RunOptions | None = None, *,
                 embedder: Embedder | None = None) -> dict[str, Any]:
    """Ingest CrossWOZ and run both protocols in each mode; the results document."""
    options, machine_at_start = begin(options)
    path = Path(data)
    dataset = ds.load_crosswoz(path, split)
    embedder, model_load_s = ready_embedder(options, embedder)
    workdir = options.workdir or default_workdir(dataset.sha256)
    rows = {name: [CROSSWOZ_MODELS[name].model_validate({"name": n, **attrs})
                   for n, attrs in sorted(by_name.items())]
            for name, by_name in sorted(dataset.entities.items())}
    stats = None
    with open_memory(workdir, embedder, options.rrf_k, options.fusion) as mem:
        define_crosswoz_types(mem, options.analyzer)
        for name, models in rows.items():
            part = ingest(mem, name, models, dataset_sha256=dataset.sha256,
                          progress=options.progress)
            stats = part if stats is None else _merged(stats, part)
    assert stats is not None
    modes: dict[str, Any] = {}
    latencies: dict[str, list[float]] = {}
    runs: dict[str, Any] = {}
    for mode in options.modes:
        with open_memory(workdir, embedder, options.rrf_k, options.fusion) as mem:
            start = time.perf_counter()
            for name in rows:  # loads the keyword indexes and vector mirrors, timed apart
                mem.search(name, "预热", k=1, mode="keyword")
            index_load_s = time.perf_counter() - start
            lookup = lookup_protocol(mem, dataset, mode, limit=options.limit,
                                     progress=options.progress)
            filtered = filtered_protocol(mem, dataset, mode, limit=options.limit,
                                         progress=options.progress)
        scores = lookup_scores(lookup["ranks"])
        filtered_all_exact = filtered["exact"] == filtered["queries"]
        modes[mode] = {
            "metrics": {**scores["metrics"],
                        "filtered_exact": round(filtered["exact"] / filtered["queries"], 6)},
            "per_category": scores["per_category"],
            "recall_curve": scores["recall_curve"],
            "filtered": {k: v for k, v in filtered.items() if k != "latencies_ms"}
            | {"all_exact": filtered_all_exact,
               "latency_ms": latency_summary(filtered["latencies_ms"])},
            "latency_ms": latency_summary(lookup["latencies_ms"]),
            "index_load_s": round(index_load_s, 3),
        }
        latencies[mode] = lookup["latencies_ms"]
        runs[mode] = _Latencies(lookup["latencies_ms"], index_load_s)
    headline = _headline(modes, options.modes)
    return {
        "benchmark": "crosswoz",
        "dataset": {"name": "crosswoz", "path": str(path), "split": split,
                    "sha256": dataset.sha256,
                    "entities": sum(len(v) for v in dataset.entities.values()),
                    "queries": len(dataset.queries), "lookups": len(dataset.lookups())},
        "metrics": modes[headline]["metrics"],
        "per_category": modes[headline]["per_category"],
        "headline_mode": headline,
        "modes": modes,
        "config": _config(options, embedder, path, dataset.sha256, dataset.faults,
                          {"split": split, "workdir": str(workdir), "filtered_k": FILTERED_K,
                           "lookup_k": LOOKUP_K, "templates": CROSSWOZ_EMBED,
                           "machine_at_start": machine_at_start}),
        "timings": _timings(stats, runs, headline, model_load_s),
        "_latencies_ms": latencies,
    }


class _Latencies:
    """What :func:`evaluation.runner._timings` reads of a mode's run."""

    def __init__(self, latencies_ms: list[float], index_load_s: float) -> None:
        self.latencies_ms = latencies_ms
        self.index_load_s = index_load_s


def _merged(a: Any, b: Any) -> Any:
    """Ingest statistics of two types as one."""
    from evaluation.runner import IngestStats

    seconds = a.seconds + b.seconds
    created = a.created + b.created
    return IngestStats(a.entities + b.entities, a.skipped and b.skipped, seconds,
                       created / seconds if seconds and created else None,
                       {**a.first_ingest, **b.first_ingest}, created)
