"""Ranking metrics with trec_eval's conventions, the ones BEIR reports through pytrec_eval.

Metric names are lower case, with an optional ``@k`` cutoff: ``ndcg@10``, ``recall@100``,
``precision@10``, ``mrr@10``, ``map@100``, ``map``. Without a cutoff the whole ranking counts.

Conventions (each one is what trec_eval does unless said otherwise):

- **Ranking.** A run gives scores; :func:`rank` orders a query's documents by score descending,
  ties broken by document ID *descending*: trec_eval sorts equal scores by ``strcmp`` of the
  docnos, larger first, and so does pytrec_eval, which BEIR calls (the tests check this against
  it). ranx does not (its tie order is that of an unstable sort). A runner that wants its own tie
  order evaluated, e.g. the product's ``(score desc, id asc)``, should pass strictly decreasing
  scores: :func:`run_from_rankings` makes them from ranked ID lists.
- **Relevance.** A document is relevant when its qrels grade is > 0. nDCG uses the grade itself
  as the gain (Järvelin & Kekäläinen, trec_eval's ``ndcg_cut``) with a ``log2(rank + 1)``
  discount, rank counted from 1; the ideal ranking uses every relevant document of the query,
  retrieved or not. Negative grades count as 0.
- **Which queries count.** The mean is over the queries of the qrels that have at least one
  relevant document (trec_eval would also average in, as 0, a run's query judged only
  non-relevant). Queries of the run absent from the qrels are ignored.
- **Missing queries score 0.** A query of the qrels that the run does not answer (absent or
  empty) scores 0 on every metric and stays in the mean, like ``trec_eval -c``. Plain trec_eval
  and BEIR's ``EvaluateRetrieval.evaluate`` average only over the queries the run answers; with a
  run that answers every query, as BEIR's runs do, the figures are the same.
- ``precision@k`` divides by ``k`` even when fewer than ``k`` documents were retrieved
  (trec_eval's ``P_k``); ``map@k`` divides by the number of relevant documents, not by
  ``min(k, R)`` (trec_eval's ``map_cut_k``); ``mrr@k`` is the reciprocal rank of the first
  relevant document within the top ``k``, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from dmf_hybrid._internal.errors import ValidationError

Qrels = dict[str, dict[str, int]]
"""query_id -> {doc_id: relevance grade}."""
Run = dict[str, dict[str, float]]
"""query_id -> {doc_id: score}."""

METRIC_FAMILIES = ("map", "mrr", "ndcg", "precision", "recall")


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: its family and its cutoff (``None`` for the whole ranking)."""

    family: str
    k: int | None

    @property
    def name(self) -> str:
        """The canonical name, e.g. ``ndcg@10`` or ``map``."""
        return self.family if self.k is None else f"{self.family}@{self.k}"


def parse_metric(name: str) -> MetricSpec:
    """The :class:`MetricSpec` for a name like ``ndcg@10``; ValidationError if it is not one."""
    family, sep, cutoff = name.strip().lower().partition("@")
    if family not in METRIC_FAMILIES:
        raise ValidationError(
            f"unknown metric {name!r}; expected one of {', '.join(METRIC_FAMILIES)} "
            "with an optional @k cutoff",
            field="metrics",
        )
    if not sep:
        return MetricSpec(family, None)
    if not cutoff.isdigit() or int(cutoff) < 1:
        raise ValidationError(
            f"metric {name!r} needs a positive integer cutoff after '@'", field="metrics"
        )
    return MetricSpec(family, int(cutoff))


def rank(run_for_query: Mapping[str, float]) -> list[str]:
    """The document IDs by score descending, ties by document ID descending (trec_eval order)."""
    for doc_id, score in run_for_query.items():
        if math.isnan(score):
            raise ValidationError(f"score of document {doc_id!r} is NaN", field="run")
    return [doc for doc, _ in sorted(run_for_query.items(), key=_score_then_id, reverse=True)]


def _score_then_id(item: tuple[str, float]) -> tuple[float, str]:
    return item[1], item[0]


def run_from_rankings(rankings: Mapping[str, Sequence[str]]) -> Run:
    """A run whose strictly decreasing scores reproduce the given rankings exactly."""
    run: Run = {}
    for query_id, ranked in rankings.items():
        if len(set(ranked)) != len(ranked):
            raise ValidationError(
                f"ranking of query {query_id!r} lists a document twice", field="rankings"
            )
        run[query_id] = {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}
    return run


def evaluate_per_query(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
) -> dict[str, dict[str, float]]:
    """Each counted query's metric values: query_id -> {metric name: value} (see module doc)."""
    specs = [parse_metric(m) for m in metrics]
    if not specs:
        raise ValidationError("no metric requested", field="metrics")
    results: dict[str, dict[str, float]] = {}
    for query_id in sorted(qrels):
        judged = qrels[query_id]
        if not any(rel > 0 for rel in judged.values()):
            continue
        ranked = rank(run.get(query_id, {}))
        results[query_id] = {spec.name: _metric_value(spec, judged, ranked) for spec in specs}
    return results


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
) -> dict[str, float]:
    """Each metric's mean over the counted queries: {metric name: mean} (see module doc)."""
    per_query = evaluate_per_query(qrels, run, metrics)
    if not per_query:
        raise ValidationError("the qrels have no query with a relevant document", field="qrels")
    names = [parse_metric(m).name for m in metrics]
    return {name: fmean(values[name] for values in per_query.values()) for name in names}


def recall_fraction(gold: Collection[str], ranked: Sequence[str], k: int) -> float:
    """The share of the gold IDs found in the top ``k``: |gold ∩ top-k| / |gold| (LoCoMo)."""
    if k < 1:
        raise ValidationError(f"k must be a positive integer, got {k}", field="k")
    gold_set = set(gold)
    if not gold_set:
        raise ValidationError("recall is undefined without gold IDs", field="gold")
    return len(gold_set.intersection(ranked[:k])) / len(gold_set)


def _metric_value(spec: MetricSpec, judged: Mapping[str, int], ranked: list[str]) -> float:
    top = ranked if spec.k is None else ranked[: spec.k]
    hits = [judged.get(doc, 0) > 0 for doc in top]
    n_relevant = sum(1 for rel in judged.values() if rel > 0)
    if spec.family == "recall":
        return sum(hits) / n_relevant
    if spec.family == "precision":
        denominator = spec.k if spec.k is not None else len(top)
        return sum(hits) / denominator if denominator else 0.0
    if spec.family == "mrr":
        return next((1.0 / (i + 1) for i, hit in enumerate(hits) if hit), 0.0)
    if spec.family == "map":
        found = 0
        precision_sum = 0.0
        for i, hit in enumerate(hits):
            if hit:
                found += 1
                precision_sum += found / (i + 1)
        return precision_sum / n_relevant
    return _ndcg(judged, top, spec.k)


def _ndcg(judged: Mapping[str, int], top: list[str], k: int | None) -> float:
    dcg = sum(max(judged.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(top))
    ideal_gains = sorted((rel for rel in judged.values() if rel > 0), reverse=True)
    if k is not None:
        ideal_gains = ideal_gains[:k]
    idcg = sum(gain / math.log2(i + 2) for i, gain in enumerate(ideal_gains))
    return dcg / idcg
