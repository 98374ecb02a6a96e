"""Metrics: hand-computed cases, conventions, and cross-checks against trec_eval and ranx."""

from __future__ import annotations

import math
import warnings
from statistics import fmean

import numpy as np
import pytest

from dmf_hybrid._internal.errors import ValidationError
from evaluation.metrics import (
    Qrels,
    Run,
    evaluate,
    evaluate_per_query,
    parse_metric,
    rank,
    recall_fraction,
    run_from_rankings,
)

# Graded qrels and a 3-document run ranked c, a, b (c is judged non-relevant).
QRELS: Qrels = {"q": {"a": 3, "b": 2, "c": 0, "d": 1}}
RUN: Run = {"q": {"c": 0.9, "a": 0.5, "b": 0.1}}

CROSS_METRICS = [
    "ndcg@10",
    "ndcg@3",
    "ndcg",
    "recall@10",
    "recall@5",
    "precision@10",
    "precision@3",
    "map@100",
    "map@5",
    "map",
    "mrr@10",
    "mrr@3",
]
TREC_EVAL_NAMES = {
    "ndcg@10": "ndcg_cut_10",
    "ndcg@3": "ndcg_cut_3",
    "ndcg": "ndcg",
    "recall@10": "recall_10",
    "recall@5": "recall_5",
    "precision@10": "P_10",
    "precision@3": "P_3",
    "map@100": "map_cut_100",
    "map@5": "map_cut_5",
    "map": "map",
}


def test_ndcg_at_3_by_hand() -> None:
    dcg = 0 / math.log2(2) + 3 / math.log2(3) + 2 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert evaluate(QRELS, RUN, ["ndcg@3"])["ndcg@3"] == pytest.approx(dcg / idcg)
    assert dcg / idcg == pytest.approx(0.607492, abs=1e-6)


def test_other_metrics_by_hand() -> None:
    result = evaluate(
        QRELS, RUN, ["recall@2", "precision@2", "precision@10", "mrr@1", "mrr@3", "map@2", "map"]
    )
    assert result == pytest.approx(
        {
            "recall@2": 1 / 3,
            "precision@2": 1 / 2,
            "precision@10": 2 / 10,  # divides by k although only 3 were retrieved
            "mrr@1": 0.0,
            "mrr@3": 1 / 2,
            "map@2": (1 / 2) / 3,  # divides by all 3 relevant, not min(k, R)
            "map": (1 / 2 + 2 / 3) / 3,
        }
    )


def test_metric_names_are_canonicalised() -> None:
    assert list(evaluate(QRELS, RUN, ["NDCG@3", " map "])) == ["ndcg@3", "map"]
    assert parse_metric("recall@100").k == 100
    assert parse_metric("map").k is None


@pytest.mark.parametrize("name", ["ndcg@0", "ndcg@x", "ndcg@", "hits@10", "f1", "mrr@-1"])
def test_bad_metric_names_raise(name: str) -> None:
    with pytest.raises(ValidationError, match="metric"):
        evaluate(QRELS, RUN, [name])


def test_ties_break_by_doc_id_descending_like_trec_eval() -> None:
    assert rank({"a": 1.0, "b": 1.0, "c": 2.0}) == ["c", "b", "a"]
    assert rank({"d10": 0.5, "d9": 0.5, "d100": 0.5}) == ["d9", "d100", "d10"]  # string order


def test_nan_score_raises() -> None:
    with pytest.raises(ValidationError, match="NaN"):
        rank({"a": float("nan")})


def test_missing_query_scores_zero_and_counts() -> None:
    qrels: Qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run: Run = {"q1": {"a": 1.0}, "other": {"x": 1.0}}
    assert evaluate_per_query(qrels, run, ["ndcg@10"]) == {
        "q1": {"ndcg@10": 1.0},
        "q2": {"ndcg@10": 0.0},
    }
    assert evaluate(qrels, run, ["ndcg@10", "mrr@10"]) == {"ndcg@10": 0.5, "mrr@10": 0.5}


def test_queries_without_relevant_docs_are_not_counted() -> None:
    qrels: Qrels = {"q1": {"a": 1}, "q2": {"b": 0}}
    assert evaluate(qrels, {"q1": {"a": 1.0}}, ["recall@10"]) == {"recall@10": 1.0}
    with pytest.raises(ValidationError, match="no query with a relevant"):
        evaluate({"q2": {"b": 0}}, {}, ["recall@10"])


def test_run_from_rankings_keeps_the_given_order() -> None:
    run = run_from_rankings({"q": ["b", "a", "c"]})
    assert rank(run["q"]) == ["b", "a", "c"]
    with pytest.raises(ValidationError, match="twice"):
        run_from_rankings({"q": ["a", "a"]})


def test_recall_fraction() -> None:
    assert recall_fraction({"a", "b"}, ["a", "c", "b"], 1) == 0.5
    assert recall_fraction(["a", "b", "a"], ["a", "c", "b"], 3) == 1.0
    assert recall_fraction(["a"], [], 10) == 0.0
    with pytest.raises(ValidationError):
        recall_fraction([], ["a"], 5)
    with pytest.raises(ValidationError):
        recall_fraction(["a"], ["a"], 0)


def _random_cases(seed: int, n_cases: int) -> tuple[Qrels, Run]:
    """Random graded qrels and runs with many score ties; ~10% of queries missing from the run."""
    rng = np.random.default_rng(seed)
    qrels: Qrels = {}
    run: Run = {}
    for case in range(n_cases):
        pool = [f"d{i}" for i in range(int(rng.integers(1, 40)))]
        for j in range(int(rng.integers(1, 6))):
            query_id = f"c{case}q{j}"
            judged = rng.choice(pool, size=int(rng.integers(1, len(pool) + 1)), replace=False)
            grades = {str(doc): int(rng.integers(0, 4)) for doc in judged}
            if not any(grade > 0 for grade in grades.values()):
                grades[str(judged[0])] = int(rng.integers(1, 4))
            qrels[query_id] = grades
            if rng.random() < 0.1:
                continue
            docs = rng.choice(pool, size=int(rng.integers(0, len(pool) + 1)), replace=False)
            if rng.random() < 0.5:
                scores = rng.integers(0, 4, size=len(docs)).astype(float)  # heavy ties
            else:
                scores = np.round(rng.normal(size=len(docs)), 1)  # some ties
            run[query_id] = {
                str(doc): float(score) for doc, score in zip(docs, scores, strict=True)
            }
    return qrels, run


def test_matches_trec_eval_with_ties() -> None:
    """pytrec_eval is trec_eval itself (what BEIR calls); ties included, 1e-6 on every query."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = _random_cases(seed=7, n_cases=300)
    mine = evaluate_per_query(qrels, run, CROSS_METRICS)
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg", "ndcg_cut.3,10", "recall.5,10", "P.3,10", "map_cut.5,100", "map"}
    )
    reference = evaluator.evaluate(run)  # only the queries the run answers
    assert len(mine) == len(qrels) > 500
    for query_id, values in mine.items():
        for name, trec_name in TREC_EVAL_NAMES.items():
            expected = reference.get(query_id, {}).get(trec_name, 0.0)  # trec_eval -c: 0
            assert values[name] == pytest.approx(expected, abs=1e-6), (query_id, name)
    means = evaluate(qrels, run, list(TREC_EVAL_NAMES))
    for name, trec_name in TREC_EVAL_NAMES.items():
        expected = fmean(reference.get(q, {}).get(trec_name, 0.0) for q in qrels)
        assert means[name] == pytest.approx(expected, abs=1e-6)


def test_matches_ranx() -> None:
    """ranx agrees on every metric, mrr@k included, given a tie-free copy of the same ranking.

    ranx orders tied scores by its (unstable) sort, not by doc ID, so the tie rule itself is
    checked against trec_eval above.
    """
    ranx = pytest.importorskip("ranx")
    qrels, run = _random_cases(seed=11, n_cases=300)
    tie_free = run_from_rankings({query_id: rank(scores) for query_id, scores in run.items()})
    assert evaluate_per_query(qrels, tie_free, CROSS_METRICS) == evaluate_per_query(
        qrels, run, CROSS_METRICS
    )
    mine = evaluate_per_query(qrels, run, CROSS_METRICS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's uint64 cast warnings inside ranx
        reference = ranx.evaluate(
            ranx.Qrels(qrels),
            ranx.Run({q: docs for q, docs in tie_free.items() if docs}),
            CROSS_METRICS,
            return_mean=False,
            make_comparable=True,  # queries missing from the run score 0, as here
        )
    query_ids = sorted(qrels)
    for name in CROSS_METRICS:
        expected = reference[name]
        assert len(expected) == len(query_ids)
        for query_id, value in zip(query_ids, expected, strict=True):
            assert mine[query_id][name] == pytest.approx(float(value), abs=1e-6), (query_id, name)
