"""Reports of an evaluation run: the JSON document, a markdown table, PNG plots.

:func:`write_report` takes the results of :func:`evaluation.runner.run_beir` /
:func:`~evaluation.runner.run_locomo` and a ``FILE.json`` path and writes, beside it,
``FILE.md`` (our figures per mode with published baselines labelled "published", per-category
figures for LoCoMo, timings and the exact configuration), ``FILE-recall.png`` (recall@k curves
per mode) and ``FILE-latency.png`` (query latency histogram per mode). Plots use matplotlib's
Agg backend (no display needed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Published figures (from ../shared/datasets/README.md), keyed by benchmark / dataset name.
#: SciFact figures are on the BEIR *test* split; LoCoMo's on all 10 conversations.
PUBLISHED: dict[str, list[dict[str, Any]]] = {
    "scifact": [
        {"label": "published: BM25 (Anserini flat), BEIR test split",
         "metrics": {"ndcg@10": 0.679}},
        {"label": "published: BM25 (Anserini multifield), BEIR test split",
         "metrics": {"ndcg@10": 0.665}},
        {"label": "published: all-MiniLM-L6-v2 dense (MTEB), BEIR test split",
         "metrics": {"ndcg@10": 0.645}},
    ],
    "locomo": [
        {"label": "published: DRAGON, dialog units, 10 conversations (Maharana et al. 2024)",
         "metrics": {"recall@5": 0.567, "recall@10": 0.662, "recall@25": 0.767,
                     "recall@50": 0.827}},
    ],
}

#: Reference figures measured on this machine by simple implementations (datasets README).
REFERENCE: dict[str, list[dict[str, Any]]] = {
    "scifact": [
        {"label": "reference: BM25 (stemmed, k1 0.9, b 0.4), test split",
         "metrics": {"ndcg@10": 0.681}},
        {"label": "reference: MiniLM dense, test split", "metrics": {"ndcg@10": 0.645}},
        {"label": "reference: RRF k=60, test split", "metrics": {"ndcg@10": 0.713}},
        {"label": "reference: RRF k=20, test split", "metrics": {"ndcg@10": 0.721}},
    ],
    "crosswoz": [
        {"label": "reference: BM25 whitespace tokens, val lookups",
         "metrics": {"success@5": 0.305}},
        {"label": "reference: BM25 jieba words, val lookups", "metrics": {"success@5": 0.750}},
        {"label": "reference: BM25 character bigrams, val lookups",
         "metrics": {"success@5": 0.922}},
        {"label": "reference: RRF of m3e-small and bigram BM25, val lookups",
         "metrics": {"success@5": 0.82}},
    ],
    "locomo": [
        {"label": "reference: BM25, 10 conversations",
         "metrics": {"recall@10": 0.599, "recall@50": 0.755}},
        {"label": "reference: MiniLM dense, 10 conversations",
         "metrics": {"recall@10": 0.466, "recall@50": 0.693}},
        {"label": "reference: RRF k=60, 10 conversations",
         "metrics": {"recall@10": 0.575, "recall@50": 0.823}},
    ],
}


def baseline_key(results: Mapping[str, Any]) -> str:
    """Which published figures apply: ``"locomo"``, ``"crosswoz"``, or the BEIR dataset's."""
    if results["benchmark"] in ("locomo", "crosswoz"):
        return str(results["benchmark"])
    return str(results["dataset"]["name"]).lower()


def write_report(results: Mapping[str, Any], out: str | Path, *, plots: bool = True
                 ) -> list[Path]:
    """Write ``out`` (JSON), the markdown report and the plots beside it; the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = public_results(results)
    out.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    md = out.with_suffix(".md")
    md.write_text(markdown(document, plot_stem=out.stem if plots else None))
    written = [out, md]
    if plots:
        written += write_plots(results, out)
    return written


def public_results(results: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document: the results without private keys, plus the applicable baselines."""
    document = {k: v for k, v in results.items() if not k.startswith("_")}
    key = baseline_key(results)
    document["published"] = PUBLISHED.get(key, [])
    document["reference"] = REFERENCE.get(key, [])
    return document


def _fmt(value: float | None, percent: bool) -> str:
    if value is None:
        return "–"
    return f"{value * 100:.1f}" if percent else f"{value:.3f}"


def _session_lines(modes: dict[str, Any]) -> list[str]:
    """LoCoMo's session-level figures (session hit@k, all evidence sessions in the top k),
    overall and per category, when the run has them."""
    if not any("sessions" in f for f in modes.values()):
        return []
    lines = ["## Sessions (in %): a turn of an evidence session in the top k (hit), every "
             "evidence session there (all)", ""]
    names = [n for n in next(f for f in modes.values() if "sessions" in f)["sessions"]]
    rows = []
    for mode, figures in modes.items():
        if "sessions" not in figures:
            continue
        rows.append([mode, "all", ""] + [_fmt(figures["sessions"][n], True) for n in names])
        for category, values in figures["per_category"].items():
            rows.append([mode, category, str(values["questions"])]
                        + [_fmt(values.get(n), True) for n in names])
    return lines + _table(["mode", "category", "questions", *names], rows) + [""]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(document: Mapping[str, Any], plot_stem: str | None = None) -> str:
    """The markdown report of a results document (see :func:`public_results`)."""
    locomo = document["benchmark"] == "locomo"
    data = document["dataset"]
    config = document["config"]
    modes: Mapping[str, Any] = document["modes"]
    names = list(document["metrics"])
    lines = [f"# Retrieval evaluation: {data['name']}"
             + (f" ({data['split']} split)" if "split" in data else ""), ""]
    if "command" in config:
        lines += ["```", config["command"], "```", ""]
    unit = " (recall in %, evidence dialog IDs)" if locomo else ""
    lines += [f"## Results{unit}", ""]
    rows = [[f"dmf-hybrid {mode}" + (" **(headline)**" if mode == document["headline_mode"]
                                     else "")]
            + [_fmt(figures["metrics"].get(n), locomo) for n in names]
            for mode, figures in modes.items()]
    for baseline in [*document.get("published", []), *document.get("reference", [])]:
        rows.append([baseline["label"]]
                    + [_fmt(baseline["metrics"].get(n), locomo) for n in names])
    lines += _table(["system", *names], rows) + [""]
    if document.get("published"):
        lines += ["Rows labelled *published* are figures from the literature on the protocol "
                  "described in the datasets README, not produced by this code; *reference* rows "
                  "are simple implementations measured on this machine (same README).", ""]
    if document["benchmark"] == "crosswoz":
        lines += ["## Lookups per slot kind", ""]
        header = ["mode", "slot", "queries", "success@1", "success@5", "mrr@5"]
        rows = [[mode, kind, str(values["queries"])]
                + [_fmt(values[n], False) for n in header[3:]]
                for mode, figures in modes.items()
                for kind, values in figures["per_category"].items()]
        lines += _table(header, rows) + ["", "## Filtered search (k = 50)", ""]
        header = ["mode", "queries", "exact", "with a hit failing the filter",
                  "missing an entity", "p50 ms"]
        rows = [[mode, *(str(figures["filtered"][n]) for n in (
            "queries", "exact", "with_violating_hit", "incomplete")),
            str(figures["filtered"]["latency_ms"]["p50"])] for mode, figures in modes.items()]
        lines += _table(header, rows) + [""]
    if locomo:
        lines += ["## Per category (recall in %)", ""]
        header = ["mode", "category", "questions", *names]
        rows = []
        for mode, figures in modes.items():
            for category, values in figures["per_category"].items():
                rows.append([mode, category, str(values["questions"])]
                            + [_fmt(values.get(n), True) for n in names])
        lines += _table(header, rows) + [""]
        lines += _session_lines(modes)
    lines += ["## Timings" + (" (lookups)" if document["benchmark"] == "crosswoz" else ""), ""]
    timings = document["timings"]
    rows = [[k, str(v)] for k, v in timings.items() if k != "first_ingest"]
    if timings.get("first_ingest"):
        rows.append(["first ingest (cached run)", json.dumps(timings["first_ingest"])])
    lines += _table(["timing", "value"], rows) + [""]
    rows = [[mode, *(str(figures["latency_ms"][p]) for p in ("p50", "p95", "p99", "mean")),
             str(figures["index_load_s"])] for mode, figures in modes.items()]
    lines += _table(["mode", "p50 ms", "p95 ms", "p99 ms", "mean ms", "index load s"], rows)
    plain = [[mode, str(f["latency_ms"]["p50"]), str(f["plain_latency_ms"]["p50"]),
              str(f["p50_vs_plain"])] for mode, f in modes.items() if "plain_latency_ms" in f]
    if plain:  # each query also searched plainly (no profile) right after it
        lines += ["", "Side by side, each query with the type's profile and as a plain "
                  "search (no profile):", ""]
        lines += _table(["mode", "p50 ms, profile", "p50 ms, plain", "ratio"], plain)
    lines += ["", "## Configuration", "", "```json",
              json.dumps({"dataset": data, **config}, indent=2), "```", ""]
    if plot_stem is not None:
        lines += [f"![recall@k per mode]({plot_stem}-recall.png)", "",
                  f"![query latency]({plot_stem}-latency.png)", ""]
    return "\n".join(lines)


def write_plots(results: Mapping[str, Any], out: Path) -> list[Path]:
    """``<stem>-recall.png`` (recall@k per mode) and ``<stem>-latency.png``; the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title = str(results["dataset"]["name"])
    recall_png = out.with_name(f"{out.stem}-recall.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, figures in results["modes"].items():
        curve = figures["recall_curve"]
        ks = [int(k) for k in curve]
        ax.plot(ks, [curve[str(k)] for k in ks], marker="o", markersize=3, label=mode)
    for baseline in PUBLISHED.get(baseline_key(results), []):
        points = sorted((int(n.split("@")[1]), v) for n, v in baseline["metrics"].items()
                        if n.startswith("recall@"))
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="--",
                    marker="x", color="grey", label=baseline["label"].split(",")[0])
    ax.set_xscale("log")
    ax.set_xlabel("k")
    measure = "success@k" if results["benchmark"] == "crosswoz" else "recall@k"
    ax.set_ylabel(measure)
    ax.set_title(f"{title}: {measure} per mode")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(recall_png, dpi=120)
    plt.close(fig)

    latency_png = out.with_name(f"{out.stem}-latency.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    samples: Mapping[str, Sequence[float]] = results.get("_latencies_ms", {})
    values = [v for series in samples.values() for v in series]
    if values:
        top = sorted(values)[int(0.99 * (len(values) - 1))] * 1.2 or 1.0
        bins = [top * i / 50 for i in range(51)]
        for mode, series in samples.items():
            ax.hist([min(v, top) for v in series], bins=bins, alpha=0.5, label=mode)
    ax.set_xlabel("query latency, ms (clipped at 1.2 x p99)")
    ax.set_ylabel("queries")
    ax.set_title(f"{title}: search latency per mode")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(latency_png, dpi=120)
    plt.close(fig)
    return [recall_png, latency_png]
