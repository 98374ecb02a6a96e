"""``python -m evaluation beir|locomo|crosswoz ...``: run a retrieval evaluation, write its report.

Examples::

    python -m evaluation beir --data ../shared/datasets/scifact --split train --mode all \\
        --out evaluation/results/scifact.json
    python -m evaluation locomo --data ../shared/datasets/locomo/locomo7.json --mode all \\
        --out evaluation/results/locomo.json
    python -m evaluation crosswoz --data ../shared/datasets/crosswoz --split val \
        --out evaluation/results/crosswoz.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmf_hybrid._internal.analyzers import DEFAULT_ANALYZER
from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from dmf_hybrid._internal.embeddings import EMBEDDERS
from dmf_hybrid._internal.errors import DMFError
from dmf_hybrid._internal.search.fusion import DEFAULT_FUSION, FUSIONS
from evaluation.runner import ALL_MODES, MODES, RunOptions, run_beir, run_locomo


def parse_weights(text: str) -> dict[str, float]:
    """``{"vector": 0.5, "keyword": 1.0}`` from ``"vector=0.5,keyword=1"``."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected leg=weight, got {part!r}")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"weight of {name!r} is not a number") from None
    return weights


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m evaluation``."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluation",
        description="Retrieval evaluation of dmf-hybrid on BEIR-format datasets, LoCoMo and "
                    "CrossWOZ.")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    beir = sub.add_parser("beir", help="a BEIR-format dataset directory")
    beir.add_argument("--split", default="test", help="qrels split (default: test)")
    locomo = sub.add_parser("locomo", help="a LoCoMo JSON file (locomo10.json style)")
    locomo.add_argument("--context", type=int, default=None,
                        help="embed each turn after up to N preceding turns of its session "
                             "(default: the Message type's, 1; 0: the paper's unit alone)")
    locomo.add_argument("--neighbour-weight", type=float, default=None,
                        help="a turn gains W x the better score of the previous and next "
                             "turn of its session (default: the Message type's, 0.5; 0: off)")
    crosswoz = sub.add_parser("crosswoz", help="a CrossWOZ directory (entities, queries)")
    crosswoz.add_argument("--split", default="val", help="query split (default: val)")
    for p in (beir, locomo, crosswoz):
        p.add_argument("--data", required=True, type=Path, help="dataset directory or file")
        p.add_argument("--mode", default="all", choices=[*MODES, "all"],
                       help="search mode, or all three (default)")
        p.add_argument("--k", type=int, default=10, help="main cutoff (default 10)")
        p.add_argument("--out", type=Path, help="results JSON; .md and .png written beside it")
        p.add_argument("--rrf-k", type=int, default=None,
                       help="reciprocal rank fusion constant (default: the type's profile, "
                            "else the memory's, 60)")
        p.add_argument("--weights", type=parse_weights, default=None,
                       help="fusion weights, e.g. vector=0.5,keyword=1 (default: the type's "
                            "profile)")
        p.add_argument("--fusion", choices=FUSIONS, default=None,
                       help=f"fusion of hybrid search (default: the type's profile, else "
                            f"{DEFAULT_FUSION})")
        p.add_argument("--analyzer", default=None,
                       help=f"keyword analyzer of the types (default: {DEFAULT_ANALYZER})")
        p.add_argument("--query-stopwords", action="store_const", const=True, default=None,
                       help="drop English stopwords (question words, pronouns) from queries "
                            "(default: the type's profile)")
        p.add_argument("--all-query-terms", action="store_const", const=False,
                       dest="query_stopwords", help="keep every query term")
        p.add_argument("--workdir", type=Path, default=None,
                       help="memory directory reused across runs "
                            "(default evaluation/results/work/<dataset hash>)")
        p.add_argument("--embedder", default=DEFAULT_EMBEDDER,
                       help=f"one of {', '.join(EMBEDDERS)} or a model directory "
                            f"(default {DEFAULT_EMBEDDER}, the product's)")
        p.add_argument("--threads", type=int, default=None,
                       help="threads of the model's runtime (torch or ONNX)")
        p.add_argument("--limit", type=int, default=None,
                       help="evaluate only the first N queries (partial figures)")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument("--no-plots", action="store_true", help="write JSON and markdown only")
        p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; 0 on success, 2 on bad input (the message on stderr)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = RunOptions(
        modes=ALL_MODES if args.mode == "all" else (args.mode,), k=args.k, rrf_k=args.rrf_k,
        weights=args.weights, workdir=args.workdir, embedder=args.embedder,
        threads=args.threads, limit=args.limit, progress=not args.no_progress,
        context=getattr(args, "context", None), query_stopwords=args.query_stopwords,
        neighbour_weight=getattr(args, "neighbour_weight", None), fusion=args.fusion,
        analyzer=args.analyzer)
    try:
        if args.benchmark == "beir":
            results = run_beir(args.data, args.split, options)
        elif args.benchmark == "crosswoz":
            from evaluation.crosswoz import run_crosswoz

            results = run_crosswoz(args.data, args.split, options)
        else:
            results = run_locomo(args.data, options)
    except (DMFError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results["config"]["command"] = "python -m evaluation " + " ".join(
        sys.argv[1:] if argv is None else list(argv))
    if args.out is not None:
        from evaluation.report import write_report

        written = write_report(results, args.out, plots=not args.no_plots)
        for path in written:
            print(f"wrote {path}")
    print(_summary(results))
    return 0


def _summary(results: dict[str, Any]) -> str:
    lines = []
    for mode, figures in results["modes"].items():
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in figures["metrics"].items())
        lines.append(f"{mode:8s} {metrics}  (p50 {figures['latency_ms']['p50']} ms)")
    return "\n".join(lines) + "\n" + json.dumps(results["timings"], default=str)


if __name__ == "__main__":
    raise SystemExit(main())
