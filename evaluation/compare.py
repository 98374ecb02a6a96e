"""One table: SciFact, LoCoMo and CrossWOZ side by side for every embedder and fusion compared.

``python -m evaluation.compare`` (also ``make compare``) runs, for each embedder, every query of
the three benchmarks through ``Memory.search`` once per leg (``mode="vector"`` and
``mode="keyword"``, at the depth a hybrid search ranks its legs to, 100) and fuses the two
lists with the product's own :func:`dmf_hybrid._internal.search.fusion.fuse` for every candidate in
:data:`CANDIDATES`: exactly the ranking a hybrid search with that setting returns, without
running each setting's searches again. Metrics: SciFact train nDCG@10, LoCoMo evidence R@10
(7 conversations, each question searched within its conversation, paper protocol), CrossWOZ
val lookup success@1 / @5. Speed: passages embedded per second (median of three rounds over
the same 128 passages, half Chinese, half English) and query embedding ms (median of 50
queries), every model in turn in one process.

Ingest is cached per (dataset, embedder) under ``results/work/`` (``<dataset>-<embedder>``) and
the legs of each (dataset, embedder) under ``results/work/legs/``: a re-run with another
candidate list only fuses again. Writes ``results/compare.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dmf_hybrid import Memory
from dmf_hybrid._internal.embeddings import Embedder, embed_queries
from dmf_hybrid._internal.mirrors.keyword import exact_leg
from dmf_hybrid._internal.search.engine import FUSION_DEPTH
from dmf_hybrid._internal.search.fusion import DEFAULT_FUSION, EXACT_LEG, fuse
from evaluation import datasets as ds
from evaluation.crosswoz import define_crosswoz_types
from evaluation.metrics import evaluate, recall_fraction, run_from_rankings
from evaluation.runner import (
    RESULTS_DIR,
    WORK_DIR,
    _tqdm,
    define_types,
    ingest,
    locomo_turn_rows,
    machine_load,
    make_embedder,
    open_memory,
)
from evaluation.types import (
    CROSSWOZ_MODELS,
    DIALOG_TURN_TYPE,
    DOCUMENT_TYPE,
    Document,
)

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
EMBEDDERS = ("minilm", "m3e-small", "e5-small")
BENCHMARKS = ("scifact", "locomo", "crosswoz")

#: (label, fusion method, RRF k, weights) of every fusion compared; "+ exact" adds the exact
#: leg (``KeywordIndex.exact``), as a hybrid search does.
_NO_EXACT = {EXACT_LEG: 0.0}
CANDIDATES: list[tuple[str, str, int, dict[str, float] | None]] = [
    ("rrf k=60", "rrf", 60, _NO_EXACT),
    ("rrf k=20", "rrf", 20, _NO_EXACT),
    ("rrf k=20, vector 0.5", "rrf", 20, {"vector": 0.5, **_NO_EXACT}),
    ("minmax", "minmax", 60, _NO_EXACT),
    ("dbsf", "dbsf", 60, _NO_EXACT),
    ("bm25max", "bm25max", 60, {"vector": 1.0, **_NO_EXACT}),
    ("bm25max, vector 2", "bm25max", 60, {"vector": 2.0, **_NO_EXACT}),
    ("rrf k=60 + exact", "rrf", 60, None),
    ("rrf k=20 + exact", "rrf", 20, None),
    ("rrf k=20, vector 0.5 + exact", "rrf", 20, {"vector": 0.5}),
    ("minmax + exact", "minmax", 60, None),
    ("dbsf + exact", "dbsf", 60, None),
    ("bm25max + exact", "bm25max", 60, {"vector": 1.0}),
    ("bm25max, vector 2 + exact (default)", "bm25max", 60, None),
    ("bm25max, vector 0.5 + exact", "bm25max", 60, {"vector": 0.5}),
]

#: qid -> leg -> [(entity ID, score)], and under KEYS [(entity ID, gold-comparable key)]
Legs = dict[str, dict[str, list[tuple[str, Any]]]]
KEYS = "keys"


# --------------------------------------------------------------------------- legs


def _legs(mem: Memory, type_name: str, queries: Sequence[tuple[str, str]], key_field: str,
          where_of: Callable[[str], Mapping[str, Any] | None] | None, progress: bool,
          label: str) -> Legs:
    legs: Legs = {}
    mem.search(type_name, "warm up", k=1, mode="keyword")
    for qid, text in _tqdm(queries, desc=label, unit="q", disable=not progress):
        legs[qid] = {}
        if not text.strip():
            legs[qid] = {"vector": [], "keyword": [], EXACT_LEG: [], KEYS: []}
            continue
        where = where_of(qid) if where_of is not None else None
        key_of: dict[str, str] = {}
        for mode in ("vector", "keyword"):
            hits = mem.search(type_name, text, where=where, k=FUSION_DEPTH, mode=mode).hits
            key_of.update((h.entity.id, str(getattr(h.entity.data, key_field))) for h in hits)
            legs[qid][mode] = [(h.entity.id, h.score) for h in hits]
        # the exact leg, as a hybrid search makes it from its keyword leg
        legs[qid][EXACT_LEG] = exact_leg(mem.engine.indexer.keyword_index(
            type_name, mem.tenant), text, legs[qid]["keyword"])
        # fused by entity ID (ties are broken by it, as in the product), scored by key
        legs[qid][KEYS] = [(eid, key_of[eid]) for eid in sorted(key_of)]
    return legs


def _cached_legs(name: str, compute: Callable[[], Legs]) -> Legs:
    path = WORK_DIR / "legs" / f"{name}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
        return {q: {leg: [(k, s) for k, s in hits] for leg, hits in legs.items()}
                for q, legs in raw.items()}
    legs = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(legs, ensure_ascii=False))
    return legs


def scifact_legs(embedder: Embedder, name: str, progress: bool) -> tuple[Legs, Any]:
    dataset = ds.load_beir(DATASETS / "scifact", "train")
    queries = [(q, dataset.queries[q]) for q in sorted(dataset.qrels) if q in dataset.queries]

    def compute() -> Legs:
        workdir = WORK_DIR / f"scifact-{name}"
        with open_memory(workdir, embedder, None) as mem:
            define_types(mem)
            ingest(mem, DOCUMENT_TYPE, [Document(doc_id=d.id, title=d.title, text=d.text)
                                        for d in dataset.docs],
                   dataset_sha256=dataset.sha256, progress=progress)
            return _legs(mem, DOCUMENT_TYPE, queries, "doc_id", None, progress,
                         f"scifact {name}")

    return _cached_legs(f"scifact-{name}", compute), dataset.qrels


def locomo_legs(embedder: Embedder, name: str, progress: bool) -> tuple[Legs, Any]:
    import hashlib

    path = DATASETS / "locomo" / "locomo7.json"
    dataset = ds.load_locomo(path)
    by_id = {f"q{i}": q for i, q in enumerate(dataset.questions)}

    def compute() -> Legs:
        workdir = WORK_DIR / f"locomo-{name}"
        with open_memory(workdir, embedder, None) as mem:
            define_types(mem)
            ingest(mem, DIALOG_TURN_TYPE, locomo_turn_rows(dataset),
                   dataset_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                   progress=progress)
            return _legs(mem, DIALOG_TURN_TYPE, [(q, by_id[q].question) for q in by_id],
                         "dia_id", lambda q: {"conversation": by_id[q].conversation},
                         progress, f"locomo {name}")

    return _cached_legs(f"locomo-{name}", compute), by_id


def crosswoz_legs(embedder: Embedder, name: str, progress: bool) -> tuple[Legs, Any]:
    dataset = ds.load_crosswoz(DATASETS / "crosswoz", "val")
    lookups = dataset.lookups()
    gold = {q.qid: set(g) for q, _, g in lookups}

    def compute() -> Legs:
        workdir = WORK_DIR / f"crosswoz-{name}"
        legs: Legs = {}
        with open_memory(workdir, embedder, None) as mem:
            define_crosswoz_types(mem)
            for type_name, by_name in sorted(dataset.entities.items()):
                rows = [CROSSWOZ_MODELS[type_name].model_validate({"name": n, **a})
                        for n, a in sorted(by_name.items())]
                ingest(mem, type_name, rows, dataset_sha256=dataset.sha256, progress=progress)
            for type_name in sorted(dataset.entities):
                queries = [(q.qid, q.text) for q, _, _ in lookups if q.type == type_name]
                legs.update(_legs(mem, type_name, queries, "name", None, progress,
                                  f"crosswoz {type_name} {name}"))
        return legs

    return _cached_legs(f"crosswoz-{name}", compute), gold


# --------------------------------------------------------------------------- metrics


def _fused(legs: Legs, method: str, k: int, weights: Mapping[str, float] | None
           ) -> dict[str, list[str]]:
    out = {}
    for qid, by_leg in legs.items():
        key_of = dict(by_leg.get(KEYS, []))
        if method == "vector" or method == "keyword":
            ranked = by_leg[method]
        else:
            used = {leg: r for leg, r in by_leg.items()
                    if leg != KEYS and (weights or {}).get(leg, 1.0) != 0}
            ranked = fuse(used, method, k=k, weights=weights, depth=FUSION_DEPTH)
        out[qid] = list(dict.fromkeys(key_of[eid] for eid, _ in ranked))
    return out


def score(benchmark: str, rankings: Mapping[str, list[str]], truth: Any) -> dict[str, float]:
    """The headline figures of one benchmark for these rankings."""
    if benchmark == "scifact":
        run = run_from_rankings(rankings)
        return {k: round(v, 4) for k, v in evaluate(truth, run, ["ndcg@10"]).items()}
    if benchmark == "locomo":
        recall = statistics.fmean(recall_fraction(q.evidence, rankings.get(qid, []), 10)
                                  for qid, q in truth.items())
        return {"recall@10": round(100 * recall, 1)}
    first = {qid: next((i for i, n in enumerate(rankings.get(qid, [])[:5], 1) if n in g), None)
             for qid, g in truth.items()}
    return {"success@1": round(statistics.fmean(r == 1 for r in first.values()), 3),
            "success@5": round(statistics.fmean(r is not None for r in first.values()), 3)}


# --------------------------------------------------------------------------- speed


def speed(embedders: Mapping[str, Embedder], rounds: int = 3) -> dict[str, dict[str, float]]:
    """Passages/s and query ms of each embedder, measured in turn on the same texts."""
    dataset = ds.load_crosswoz(DATASETS / "crosswoz", "val")
    locomo = ds.load_locomo(DATASETS / "locomo" / "locomo7.json")
    passages = [f"{n}，{a.get('address') or ''}" for n, a in
                sorted(dataset.entities["Restaurant"].items())[:64]]
    passages += [ds.locomo_unit_text(t) for t in locomo.turns[:64]]
    queries = [q.text for q in dataset.queries[:25]] + [q.question for q in
                                                        locomo.questions[:25]]
    per_s: dict[str, list[float]] = {n: [] for n in embedders}
    query_ms: dict[str, list[float]] = {n: [] for n in embedders}
    for embedder in embedders.values():
        embedder.embed(passages[:8])  # load the model
        embed_queries(embedder, queries[:2])
    for _ in range(rounds):
        for name, embedder in embedders.items():
            start = time.perf_counter()
            embedder.embed(passages)
            per_s[name].append(len(passages) / (time.perf_counter() - start))
    for text in queries:
        for name, embedder in embedders.items():
            start = time.perf_counter()
            embed_queries(embedder, [text])
            query_ms[name].append((time.perf_counter() - start) * 1000)
    return {n: {"passages_per_s": round(statistics.median(per_s[n]), 1),
                "query_ms": round(statistics.median(query_ms[n]), 1)} for n in embedders}


# --------------------------------------------------------------------------- table


def compare(embedder_names: Sequence[str], benchmarks: Sequence[str], progress: bool = True,
            measure_speed: bool = True, cached_only: bool = False) -> dict[str, Any]:
    """Every candidate's figures on every benchmark, per embedder; the results document.

    ``cached_only``: leave out the (benchmark, embedder) pairs whose legs are not cached yet
    (their cells read "–") instead of ingesting and searching them now.
    """
    loaders = {"scifact": scifact_legs, "locomo": locomo_legs, "crosswoz": crosswoz_legs}
    embedders = {n: make_embedder(n, None) for n in embedder_names}
    rows: list[dict[str, Any]] = []
    for name, embedder in embedders.items():
        per_benchmark = {b: loaders[b](embedder, name, progress) for b in benchmarks
                         if not cached_only or (WORK_DIR / "legs" / f"{b}-{name}.json").is_file()}
        systems: list[tuple[str, str, int, dict[str, float] | None]] = [
            ("keyword only", "keyword", 0, None), ("vector only", "vector", 0, None),
            *CANDIDATES]
        for label, method, k, weights in systems:
            row: dict[str, Any] = {"embedder": name, "fusion": label, "method": method,
                                   "rrf_k": k, "weights": weights}
            for b, (legs, truth) in per_benchmark.items():
                row[b] = score(b, _fused(legs, method, k, weights), truth)
            rows.append(row)
    return {"rows": rows, "benchmarks": list(benchmarks), "default_fusion": DEFAULT_FUSION,
            "speed": speed(embedders) if measure_speed else {},
            "machine": machine_load()}


COLUMNS = [("scifact", "ndcg@10", "SciFact nDCG@10"), ("locomo", "recall@10", "LoCoMo R@10"),
           ("crosswoz", "success@1", "CrossWOZ s@1"), ("crosswoz", "success@5", "CrossWOZ s@5")]


def markdown(document: Mapping[str, Any]) -> str:
    """The side-by-side table (and the speed table) as markdown."""
    cols = [c for c in COLUMNS if c[0] in document["benchmarks"]]
    lines = ["| embedder | fusion | " + " | ".join(c[2] for c in cols) + " |",
             "|---|---|" + "---:|" * len(cols)]
    for row in document["rows"]:
        cells = [str(row.get(b, {}).get(m, "–")) for b, m, _ in cols]
        lines.append(f"| {row['embedder']} | {row['fusion']} | " + " | ".join(cells) + " |")
    if document.get("speed"):
        lines += ["", "| embedder | passages/s | query ms |", "|---|---:|---:|"]
        lines += [f"| {n} | {v['passages_per_s']} | {v['query_ms']} |"
                  for n, v in document["speed"].items()]
    return "\n".join(lines) + "\n"


def write_plot(document: Mapping[str, Any], path: Path) -> None:
    """One panel per benchmark: each fusion's figure, a bar per embedder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in COLUMNS if c[0] in document["benchmarks"] and c[1] != "success@1"]
    labels = list(dict.fromkeys(r["fusion"] for r in document["rows"]))
    names = list(dict.fromkeys(r["embedder"] for r in document["rows"]))
    fig, axes = plt.subplots(1, len(cols), figsize=(5 * len(cols), 5), squeeze=False)
    for ax, (bench, metric, title) in zip(axes[0], cols, strict=True):
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            values = [next((r.get(bench, {}).get(metric, 0) for r in document["rows"]
                            if r["fusion"] == label and r["embedder"] == name), 0)
                      for label in labels]
            ax.barh([j + i * width for j in range(len(labels))], values, height=width,
                    label=name)
        ax.set_yticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, fontsize=7)
        ax.set_title(title)
        ax.invert_yaxis()
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison, write JSON / markdown / PNG, print the table."""
    parser = argparse.ArgumentParser(prog="python -m evaluation.compare", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--embedders", default=",".join(EMBEDDERS),
                        help=f"comma-separated (default {','.join(EMBEDDERS)})")
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS),
                        help=f"comma-separated (default {','.join(BENCHMARKS)})")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "compare.json")
    parser.add_argument("--no-speed", action="store_true", help="skip the speed measurement")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--cached-only", action="store_true",
                        help="only the benchmark/embedder pairs whose legs are cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    document = compare([e for e in args.embedders.split(",") if e],
                       [b for b in args.benchmarks.split(",") if b],
                       progress=not args.no_progress, measure_speed=not args.no_speed,
                       cached_only=args.cached_only)
    document["command"] = "python -m evaluation.compare " + " ".join(
        sys.argv[1:] if argv is None else list(argv))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    table = markdown(document)
    args.out.with_suffix(".md").write_text(f"```\n{document['command']}\n```\n\n{table}")
    write_plot(document, args.out.with_suffix(".png"))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
