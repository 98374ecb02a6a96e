"""Benchmark of the keyword (BM25) leg: prints a markdown table and writes JSON.

Compares, on a BEIR dataset (SciFact by default) and on synthetic short documents:

* ``KeywordIndex`` — dmf_hybrid's incremental numpy BM25
(``dmf_hybrid/_internal/mirrors/keyword.py``);
* ``bm25s`` — eager sparse BM25 (method "lucene"), with the same analyzer settings;
* ``duckdb-fts`` — DuckDB's ``fts`` extension (``match_bm25``), loaded from the
  ``duckdb-ext-fts`` wheel by file path, with the Lucene stop list and the English stemmer.
  That wheel exists only for duckdb 1.4.4 (extensions cannot be downloaded here), so with any
  other DuckDB, or without the wheel, the run skips this system and says why.

All use k1 = 0.9, b = 0.4, Lucene's English stopwords and the Snowball English stemmer.
Measured: nDCG@10 (train qrels), index build time, per-query latency p50 (query analysis
included, k = 10), single-document write cost, and search under a candidate-ID filter (latency
and whether the filtered top 10 equals the unfiltered ranking restricted to the candidates).

Usage::

    python evaluation/bench_keyword.py --data /work/shared/datasets/scifact --out bench.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from dmf_hybrid._internal.mirrors.keyword import KeywordIndex  # noqa: E402
from dmf_hybrid._internal.mirrors.text import LUCENE_STOPWORDS_EN  # noqa: E402

K1, B = 0.9, 0.4
Hits = list[tuple[str, float]]


# ---------------------------------------------------------------- data and metric


def load_beir(
    data: Path,
) -> tuple[list[tuple[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    """The corpus as (id, title + " " + text), the queries by ID, and the train qrels."""
    corpus: list[tuple[str, str]] = []
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            corpus.append((str(row["_id"]), f"{row.get('title', '')} {row.get('text', '')}"))
    queries: dict[str, str] = {}
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            queries[str(row["_id"])] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(data / "qrels" / "train.tsv", encoding="utf-8") as fh:
        next(fh)  # header
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    return corpus, queries, qrels


def ndcg_at_10(ranked: Sequence[str], rels: dict[str, int]) -> float:
    """nDCG@10 with gain = qrel score and a log2(rank + 1) discount; ideal from the qrels."""
    dcg = sum(rels.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:10]))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def p50_ms(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# ---------------------------------------------------------------- the three systems


def rebuild_costs(build: Callable[[], Any], how: str) -> dict[str, Any]:
    """Write costs of an index that follows every write by a full rebuild (timed once)."""
    _, t = timed(build)
    ms = round(t * 1000, 1)
    return {"insert_p50_ms": ms, "update_p50_ms": ms, "delete_p50_ms": ms,
            "search_after_write_p50_ms": None, "how": how}


class Ours:
    name = "KeywordIndex"

    def __init__(self, stemmer: str | None = "english") -> None:
        self.stemmer = stemmer
        self.index = KeywordIndex(k1=K1, b=B, stemmer=stemmer, stopwords="en")

    def build(self, corpus: list[tuple[str, str]]) -> None:
        self.index = KeywordIndex(k1=K1, b=B, stemmer=self.stemmer, stopwords="en")
        self.index.upsert(corpus)

    def search(self, query: str, k: int, candidates: list[str] | None = None) -> Hits:
        return self.index.search(query, k, candidates)

    def write_costs(self, corpus: list[tuple[str, str]], queries: list[str]) -> dict[str, Any]:
        """Cost of single-document writes, and of the first search after one."""
        rng = random.Random(7)
        n = 200
        ins, upd, dele, after = [], [], [], []
        for i in range(n):
            doc_id, text = corpus[rng.randrange(len(corpus))]
            _, t = timed(lambda: self.index.upsert([(f"new-{i}", text)]))  # noqa: B023
            ins.append(t)
            _, t = timed(lambda: self.search(queries[i % len(queries)], 10))  # noqa: B023
            after.append(t)
            _, t = timed(lambda: self.index.upsert([(doc_id, text + " revised")]))  # noqa: B023
            upd.append(t)
            _, t = timed(lambda: self.index.delete([f"new-{i}"]))  # noqa: B023
            dele.append(t)
        return {
            "insert_p50_ms": p50_ms(ins),
            "update_p50_ms": p50_ms(upd),
            "delete_p50_ms": p50_ms(dele),
            "search_after_write_p50_ms": p50_ms(after),
            "how": "incremental: postings and lengths updated in place; BM25 at query time",
        }


class Bm25s:
    name = "bm25s"

    def __init__(self) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}

    def _tokenize(self, texts: list[str]) -> Any:
        return self.bm25s.tokenize(
            texts, stopwords=sorted(LUCENE_STOPWORDS_EN), stemmer=self.stemmer, show_progress=False
        )

    def build(self, corpus: list[tuple[str, str]]) -> None:
        self.ids = [doc_id for doc_id, _ in corpus]
        self.pos = {doc_id: i for i, doc_id in enumerate(self.ids)}
        self.retriever = self.bm25s.BM25(k1=K1, b=B, method="lucene")
        self.retriever.index(self._tokenize([t for _, t in corpus]), show_progress=False)
        self.vocab = self.retriever.vocab_dict

    def search(self, query: str, k: int, candidates: list[str] | None = None) -> Hits:
        import numpy as np

        words = self.bm25s.tokenize(
            [query],
            stopwords=sorted(LUCENE_STOPWORDS_EN),
            stemmer=self.stemmer,
            return_ids=False,
            show_progress=False,
        )[0]
        ids = [self.vocab[w] for w in words if w in self.vocab]
        if not ids:
            return []
        mask = None
        if candidates is not None:
            mask = np.zeros(len(self.ids), dtype=np.float32)
            mask[[self.pos[c] for c in candidates if c in self.pos]] = 1.0
        scores = self.retriever.get_scores_from_ids(ids, weight_mask=mask)
        top = np.argsort(-scores, kind="stable")[: max(k * 4, k + 50)]
        hits = [(self.ids[i], float(scores[i])) for i in top if scores[i] > 0]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:k]

    def write_costs(self, corpus: list[tuple[str, str]], queries: list[str]) -> dict[str, Any]:
        return rebuild_costs(lambda: self.build(corpus), "full rebuild (eager scores depend "
                             "on the average length; no add/remove)")


class Unavailable(RuntimeError):
    """A compared system cannot run in this environment (the message says why)."""


class DuckFts:
    name = "duckdb-fts"

    def __init__(self) -> None:
        import duckdb

        try:
            import duckdb_ext
        except ImportError:
            raise Unavailable(f"the duckdb-ext-fts wheel is not installed (it is built for "
                              f"duckdb 1.4.4 only; this is duckdb {duckdb.__version__})") from None
        exts = sorted(Path(duckdb_ext.__path__[0]).rglob("fts.duckdb_extension"))
        if not exts:
            raise Unavailable("fts.duckdb_extension not found in duckdb-ext-fts")
        self.con = duckdb.connect(":memory:")
        try:
            self.con.execute(f"LOAD '{exts[0]}'")
        except duckdb.Error as exc:
            raise Unavailable(f"duckdb {duckdb.__version__} cannot load the fts extension of "
                              f"duckdb-ext-fts: {exc}") from None
        self.con.execute("CREATE TABLE lucene_stop (sw VARCHAR)")
        self.con.executemany(
            "INSERT INTO lucene_stop VALUES (?)", [[w] for w in sorted(LUCENE_STOPWORDS_EN)]
        )

    def build(self, corpus: list[tuple[str, str]]) -> None:
        import pyarrow as pa

        arrow = pa.table({"id": [d for d, _ in corpus], "body": [t for _, t in corpus]})
        self.con.register("docs_arrow", arrow)
        self.con.execute("CREATE OR REPLACE TABLE docs AS SELECT * FROM docs_arrow")
        self.con.unregister("docs_arrow")
        self.con.execute(
            "PRAGMA create_fts_index('docs', 'id', 'body', stemmer = 'english', "
            "stopwords = 'lucene_stop', overwrite = 1)"
        )

    def search(self, query: str, k: int, candidates: list[str] | None = None) -> Hits:
        sql = (
            "SELECT id, score FROM (SELECT id, fts_main_docs.match_bm25(id, ?, k := 0.9, "
            "b := 0.4) AS score FROM docs{where}) WHERE score IS NOT NULL AND score > 0 "
            "ORDER BY score DESC, id LIMIT ?"
        )
        if candidates is None:
            rows = self.con.execute(sql.format(where=""), [query, k]).fetchall()
        else:
            where = " WHERE id IN (SELECT unnest(?::VARCHAR[]))"
            rows = self.con.execute(sql.format(where=where), [query, candidates, k]).fetchall()
        return [(str(i), float(s)) for i, s in rows]

    def write_costs(self, corpus: list[tuple[str, str]], queries: list[str]) -> dict[str, Any]:
        return rebuild_costs(lambda: self.build(corpus), "table row write + full PRAGMA "
                             "create_fts_index (index does not follow writes)")


# ---------------------------------------------------------------- measurements


def measure(
    system: Any,
    corpus: list[tuple[str, str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]] | None,
    n_latency: int,
) -> dict[str, Any]:
    """Build time, quality, latency, filter exactness and write costs of one system."""
    _, build_s = timed(lambda: system.build(corpus))
    out: dict[str, Any] = {"system": system.name, "docs": len(corpus), "build_s": round(build_s, 3)}
    qids = sorted(qrels) if qrels is not None else sorted(queries)
    if qrels is not None:
        scores = [ndcg_at_10([d for d, _ in system.search(queries[q], 10)], qrels[q]) for q in qids]
        out["ndcg@10"] = round(sum(scores) / len(scores), 4)
        out["queries"] = len(qids)
    lat_qids = qids[:n_latency]
    for q in lat_qids[:5]:  # warm up
        system.search(queries[q], 10)
    lat = [timed(partial(system.search, queries[q], 10))[1] for q in lat_qids]
    out["query_p50_ms"] = p50_ms(lat)
    out["query_p95_ms"] = round(sorted(lat)[int(0.95 * (len(lat) - 1))] * 1000, 3)
    all_ids = [d for d, _ in corpus]
    for frac in (0.01, 0.5):
        rng = random.Random(11)
        cands = rng.sample(all_ids, max(1, int(frac * len(all_ids))))
        cand_set = set(cands)
        exact, flat = 0, []
        for q in lat_qids[:50]:
            hits, t = timed(partial(system.search, queries[q], 10, cands))
            flat.append(t)
            full = system.search(queries[q], len(corpus))
            expect = [d for d, _ in full if d in cand_set][:10]
            exact += [d for d, _ in hits] == expect
        out[f"filter_{frac:g}_p50_ms"] = p50_ms(flat)
        out[f"filter_{frac:g}_exact"] = f"{exact}/{len(lat_qids[:50])}"
    out.update(system.write_costs(corpus, [queries[q] for q in lat_qids]))
    return out


def synthetic(
    n_docs: int, n_queries: int, vocabulary: list[str]
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Short documents (5-20 words) and queries (2-5 words) drawn Zipf-like from a vocabulary."""
    rng = random.Random(42)
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    words = rng.choices(vocabulary, weights=weights, k=n_docs * 20 + n_queries * 5)
    it = iter(words)
    docs = [
        (f"syn-{i:06d}", " ".join(next(it) for _ in range(rng.randint(5, 20))))
        for i in range(n_docs)
    ]
    queries = {
        f"q{i}": " ".join(next(it) for _ in range(rng.randint(2, 5))) for i in range(n_queries)
    }
    return docs, queries


def scifact_vocabulary(corpus: list[tuple[str, str]]) -> list[str]:
    from collections import Counter

    from dmf_hybrid._internal.mirrors.text import TOKEN_PATTERN

    counts = Counter(w for _, t in corpus for w in TOKEN_PATTERN.findall(t.lower()))
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:30000]]


COLUMNS = [
    "system",
    "docs",
    "ndcg@10",
    "build_s",
    "query_p50_ms",
    "query_p95_ms",
    "filter_0.01_p50_ms",
    "filter_0.01_exact",
    "filter_0.5_p50_ms",
    "filter_0.5_exact",
    "insert_p50_ms",
    "update_p50_ms",
    "delete_p50_ms",
    "search_after_write_p50_ms",
]


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/datasets/scifact"))
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--synthetic",
        type=int,
        default=100_000,
        help="number of synthetic short documents (0 to skip)",
    )
    parser.add_argument(
        "--systems",
        default="ours,bm25s,duckdb",
        help="comma-separated: ours, ours-nostem, bm25s, duckdb",
    )
    args = parser.parse_args(argv)
    factories: dict[str, Callable[[], Any]] = {
        "ours": Ours,
        "ours-nostem": lambda: _nostem(),
        "bm25s": Bm25s,
        "duckdb": DuckFts,
    }
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    corpus, queries, qrels = load_beir(args.data)
    results: dict[str, Any] = {"dataset": str(args.data), "k1": K1, "b": B, "runs": [],
                               "skipped": {}}
    for name in list(chosen):
        try:
            factories[name]()
        except Unavailable as exc:
            print(f"skipped {name}: {exc}", file=sys.stderr)
            results["skipped"][name] = str(exc)
            chosen.remove(name)
    rows = []
    for name in chosen:
        row = measure(factories[name](), corpus, queries, qrels, n_latency=len(qrels))
        row["set"] = args.data.name
        rows.append(row)
        print(f"done {name} on {args.data.name}", file=sys.stderr)
    if args.synthetic:
        docs, syn_queries = synthetic(args.synthetic, 300, scifact_vocabulary(corpus))
        for name in chosen:
            if name == "ours-nostem":
                continue
            # duckdb-fts scans the whole table per query: fewer queries keep the run short
            n_latency = 30 if name == "duckdb" else 300
            row = measure(factories[name](), docs, syn_queries, None, n_latency=n_latency)
            row["set"] = f"synthetic-{args.synthetic}"
            rows.append(row)
            print(f"done {name} on synthetic", file=sys.stderr)
    results["runs"] = rows
    print(markdown(rows))
    for name, why in results["skipped"].items():
        print(f"\n(skipped {name}: {why})")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def _nostem() -> Ours:
    system = Ours(stemmer=None)
    system.name = "KeywordIndex (no stem)"
    return system


if __name__ == "__main__":
    raise SystemExit(main())
