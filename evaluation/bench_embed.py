"""Benchmark of every embedder side by side: passages/s, single-query latency, load time, agreement.

``python -m evaluation.bench_embed [--scifact ../shared/datasets/scifact] [--rounds 3]``

Each embedder variant (an ``embedder`` setting, optionally ``@threads`` and ``/workers``:
``minilm@2`` is the torch model with ``torch_threads`` 2, ``minilm-onnx@2`` the ONNX build with
``onnx_threads`` 2, ``minilm-onnx/1`` the ONNX build with ``onnx_workers`` 1, one text after
another; without them the settings' defaults: one thread, and two ONNX workers)
runs in its own worker process, made with the package's own ``make_embedder`` from a
``Settings``, so what is measured is what the service runs. The workers are started one after
another (the time from spawn to a loaded model is the *load* figure: imports plus model load;
an ONNX build exported beforehand, as the service finds it after its first start), then stay
alive and idle while the others work. Every round asks each worker in turn, in an order rotated
every round, to

1. embed ``--passages`` SciFact abstracts (title + text, the corpus's first ones) in one call,
2. embed ``--sentences`` synthetic 20-word sentences in one call,
3. embed ``--queries`` SciFact claims one at a time (a search's query embedding),

so the slow drift of a shared machine spreads over all variants. Passages/s is the median over
rounds; query latencies are pooled over rounds (p50, p95). Agreement: every worker's vectors of
the passages and claims are compared with the first variant's (the torch model): cosine min and
mean.

Writes JSON (``--out``), a markdown table beside it (``.md``) and a PNG (``.png``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.plotting import (
    environment,
    latency_summary,
    markdown_table,
    save_figure,
    write_json,
)

log = logging.getLogger("bench_embed")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_embed.json"
DEFAULT_SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
#: Every embedder ``make_embedder`` knows, and the thread counts worth comparing.
VARIANTS = ("minilm", "minilm@2", "minilm-onnx/1", "minilm-onnx", "minilm-onnx@2/1", "hash")
WORKER_TIMEOUT = 900.0
SENTENCE_WORDS = 20
WORDS = (
    "the model reads each sentence and returns a vector that places similar meaning close "
    "together while unrelated text lands far away so a memory can find what an agent said "
    "about travel plans budgets museums flights hotels dinners friends meetings deadlines "
    "weather trains tickets prices reviews recipes gardens rivers mountains islands bridges"
).split()

WORKER = r"""
import json, sys, time
import numpy as np
started = time.perf_counter()
from dmf_hybrid._internal.config import Settings
from dmf_hybrid._internal.factories import make_embedder
name, threads, workers, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] or None
settings = Settings(embedder=name, torch_threads=threads, onnx_threads=threads,
                    **({"onnx_workers": int(workers)} if workers else {}),
                    onnx_cache_dir=cache)
model = make_embedder(settings)
load = getattr(model, "load", None)
if callable(load):
    load()
model.embed(["warm up the first call"])
print(json.dumps({"ready": round(time.perf_counter() - started, 3),
                  "model_id": model.model_id}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    texts = job.get("texts", [])
    if job["op"] == "batch":
        t = time.perf_counter(); vectors = model.embed(texts); seconds = time.perf_counter() - t
        if job.get("save"):
            np.save(job["save"], vectors)
        print(json.dumps({"seconds": seconds}), flush=True)
    elif job["op"] == "each":
        out = []
        for text in texts:
            t = time.perf_counter(); model.embed([text]); out.append(time.perf_counter() - t)
        print(json.dumps({"seconds": out}), flush=True)
    else:
        break
"""


@dataclass
class Worker:
    """One embedder variant in its own process, driven by JSON lines."""

    variant: str
    proc: subprocess.Popen[str]
    ready_s: float = 0.0
    model_id: str = ""
    passages: list[float] = field(default_factory=list)
    sentences: list[float] = field(default_factory=list)
    queries: list[float] = field(default_factory=list)

    @classmethod
    def start(cls, variant: str, cache: Path | None) -> Worker:
        name, _, workers = variant.partition("/")
        name, _, threads = name.partition("@")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}
        env["HF_HUB_OFFLINE"] = "1"
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, name, threads or "1", workers,
             str(cache or "")], cwd=ROOT,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        worker = cls(variant, proc)
        first = worker.read()
        worker.ready_s, worker.model_id = first["ready"], first["model_id"]
        return worker

    @property
    def slug(self) -> str:
        """The variant as a file name."""
        return self.variant.replace("/", "-w")

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.variant} exited with {self.proc.wait(30)}")
        return dict(json.loads(line))

    def ask(self, op: str, texts: Sequence[str], save: Path | None = None) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "texts": list(texts),
                                          "save": str(save) if save else None}) + "\n")
        self.proc.stdin.flush()
        return self.read()["seconds"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(30)


def scifact_texts(root: Path, passages: int, queries: int) -> tuple[list[str], list[str]]:
    """The first ``passages`` abstracts (title + " " + text) and ``queries`` claims."""
    from evaluation.datasets import load_beir

    data = load_beir(root, split="train")
    docs = [f"{d.title} {d.text}".strip() for d in data.docs[:passages]]
    return docs, list(data.queries.values())[:queries]


def sentences(count: int, seed: int = 3) -> list[str]:
    """``count`` synthetic sentences: 20 random words and the sentence's number (distinct)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=SENTENCE_WORDS)) + f" {i}" for i in range(count)]


def agreement(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    cosine = (vectors.astype(np.float64) * reference.astype(np.float64)).sum(axis=1)
    return {"min": round(float(cosine.min()), 5), "mean": round(float(cosine.mean()), 5)}


def ensure_onnx(variants: Sequence[str], cache: Path | None) -> dict[str, Any]:
    """Export the ONNX build once, untimed by the load figures; its manifest (or empty)."""
    if not any(v.partition("/")[0].partition("@")[0] == "minilm-onnx" for v in variants):
        return {}
    from dmf_hybrid._internal.embeddings.onnx_int8 import (
        OnnxEmbedder,
        default_cache_dir,
        export_onnx,
    )

    model = OnnxEmbedder(cache_dir=cache)
    path = export_onnx(model.model_path, cache or default_cache_dir())
    return dict(json.loads((path.parent / "manifest.json").read_text(encoding="utf-8")))


def run(*, scifact: Path, variants: Sequence[str] = VARIANTS, rounds: int = 3,
        passages: int = 128, sentence_count: int = 256, queries: int = 100,
        cache: Path | None = None) -> dict[str, Any]:
    """Measure every variant (see the module doc); the results document."""
    began = time.perf_counter()
    docs, claims = scifact_texts(scifact, passages, queries)
    short = sentences(sentence_count)
    export = ensure_onnx(variants, cache)
    workers: list[Worker] = []
    with tempfile.TemporaryDirectory(prefix="dmf-bench-embed-") as tmp:
        try:
            for variant in variants:
                workers.append(Worker.start(variant, cache))
                log.info("%s ready in %.1f s", variant, workers[-1].ready_s)
            for r in range(rounds):
                shift = r % len(workers)
                for worker in workers[shift:] + workers[:shift]:
                    save = r == 0
                    worker.passages.append(worker.ask(
                        "batch", docs, Path(tmp) / f"{worker.slug}-docs.npy" if save else None))
                    worker.sentences.append(worker.ask("batch", short))
                    worker.queries.extend(worker.ask(
                        "each", claims, None))
                    if save:
                        worker.ask("batch", claims, Path(tmp) / f"{worker.slug}-claims.npy")
                    log.info("round %d %s: %.1f passages/s", r + 1, worker.variant,
                             len(docs) / worker.passages[-1])
            reference = workers[0]
            ref_docs = np.load(Path(tmp) / f"{reference.slug}-docs.npy")
            ref_claims = np.load(Path(tmp) / f"{reference.slug}-claims.npy")
            results = []
            for worker in workers:
                vec_docs = np.load(Path(tmp) / f"{worker.slug}-docs.npy")
                vec_claims = np.load(Path(tmp) / f"{worker.slug}-claims.npy")
                same_dim = vec_docs.shape[1] == ref_docs.shape[1]
                query = latency_summary(worker.queries)
                results.append({
                    "variant": worker.variant, "model_id": worker.model_id,
                    "load_s": worker.ready_s,
                    "passages_per_s": round(len(docs) / statistics.median(worker.passages), 2),
                    "passages_per_s_rounds": [round(len(docs) / s, 2) for s in worker.passages],
                    "sentences_per_s": round(len(short) / statistics.median(worker.sentences),
                                             2),
                    "query_p50_ms": query["p50_ms"], "query_p95_ms": query["p95_ms"],
                    "cosine_vs_" + reference.variant: {
                        "passages": agreement(vec_docs, ref_docs) if same_dim else None,
                        "queries": agreement(vec_claims, ref_claims) if same_dim else None},
                })
        finally:
            for worker in workers:
                worker.stop()
    base = results[0]
    for row in results:
        row["passages_speedup"] = round(row["passages_per_s"] / base["passages_per_s"], 2)
        row["sentences_speedup"] = round(row["sentences_per_s"] / base["sentences_per_s"], 2)
    return {
        "benchmark": "embedders",
        "config": {"variants": list(variants), "rounds": rounds, "passages": len(docs),
                   "sentences": len(short), "sentence_words": SENTENCE_WORDS,
                   "queries": len(claims), "scifact": str(scifact)},
        "environment": environment(),
        "onnx_export": export,
        "results": results,
        "elapsed_s": round(time.perf_counter() - began, 1),
    }


def markdown(doc: Mapping[str, Any]) -> str:
    """The results as a markdown section."""
    config, results = doc["config"], doc["results"]
    ref = results[0]["variant"]
    rows = []
    for r in results:
        agree = r[f"cosine_vs_{ref}"]
        cos = (f"{agree['passages']['mean']:.4f} / {agree['passages']['min']:.4f}"
               if agree["passages"] else "–")
        rows.append([r["variant"], r["model_id"], r["passages_per_s"], r["passages_speedup"],
                     r["sentences_per_s"], r["sentences_speedup"], r["query_p50_ms"],
                     r["query_p95_ms"], r["load_s"], cos])
    export = doc.get("onnx_export") or {}
    note = (f" The ONNX build was exported beforehand in {export['seconds']} s "
            f"(`{export['recipe']}`)." if export else "")
    return (
        "## Embedders side by side\n\n"
        f"{config['passages']} SciFact abstracts and {config['sentences']} "
        f"{config['sentence_words']}-word sentences per call, {config['queries']} claims "
        f"embedded one at a time, {config['rounds']} rounds in rotated order "
        f"({doc['environment']['cpus']} CPUs, load average "
        f"{doc['environment']['load_average']}). `@2`: two threads, else one; "
        "`/1`: one ONNX worker (texts one after another), else the default two. "
        f"Load: process spawn to a loaded model (imports included).{note}\n\n"
        + markdown_table(["variant", "model_id", "abstracts/s", f"× {ref}", "sentences/s",
                          f"× {ref}", "query p50 ms", "query p95 ms", "load s",
                          f"cosine vs {ref} (mean / min)"], rows)
    )


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """A PNG of three bar panels: abstracts/s, sentences/s, query p50 ms."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: skipping %s", path)
        return None
    results = doc["results"]
    names = [r["variant"] for r in results]
    panels = [("SciFact abstracts / s", "passages_per_s"),
              ("20-word sentences / s", "sentences_per_s"),
              ("single query p50 (ms)", "query_p50_ms")]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.2))
    for ax, (title, key) in zip(axes, panels, strict=True):
        values = [r[key] for r in results]
        bars = ax.bar(names, values, color=[f"C{i}" for i in range(len(names))])
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Embedders side by side (one run)")
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scifact", type=Path, default=DEFAULT_SCIFACT,
                        help="BEIR SciFact directory (default ../shared/datasets/scifact)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS),
                        help="embedder settings, optionally @threads and /workers "
                        "(first = reference)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passages", type=int, default=128)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--onnx-cache", type=Path, default=None,
                        help="ONNX cache directory (default: the setting's default)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    try:
        doc = run(scifact=args.scifact, variants=args.variants, rounds=args.rounds,
                  passages=args.passages, sentence_count=args.sentences, queries=args.queries,
                  cache=args.onnx_cache)
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"bench_embed failed: {exc}", file=sys.stderr)
        return 1
    written = [write_json(args.out, doc)]
    md = args.out.with_suffix(".md")
    md.write_text(markdown(doc), encoding="utf-8")
    written.append(md)
    if not args.no_plot:
        image = plot(doc, args.out.with_suffix(".png"))
        if image is not None:
            written.append(image)
    print(markdown(doc))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
