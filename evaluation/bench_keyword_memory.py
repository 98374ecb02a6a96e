"""Benchmark of the service's memory against the entropy of the text it indexes.

``python -m evaluation.bench_keyword_memory [--rows 600] [--kb 120] [--shape words]``

The service runs as a child process (``python -m dmf_hybrid._internal.api.server``, the measured
embedder). A type with two text fields (a field value is at most 64 KiB) is defined and warmed
up (one keyword search loads its BM25 index); then ``--rows`` rows of ``--kb`` KB of random
text each are created over HTTP, and one keyword search brings the index up to date. The
server's RSS (``VmRSS``) is read before and after, and compared with the size of the text.

Shapes of text: ``words`` (random lowercase words of 3-10 letters: every word a new term, the
worst case for a keyword index), ``letters`` (a run of letters without a break per field: one
huge token) and ``prose`` (the benchmark vocabulary of ``bench_http``: few distinct terms).
The target: RSS growth below 2x the text's size. Writes JSON (``--out``) and markdown.
"""

from __future__ import annotations

import argparse
import logging
import random
import string
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.bench_http import WORDS, running_server
from evaluation.chroma_peer import rss_mb
from evaluation.plotting import environment, markdown_table, publish

log = logging.getLogger("bench_keyword_memory")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_keyword_memory.json"
SHAPES = ("words", "letters", "prose")
TYPE = {"name": "Blob", "identity": ["n"], "embed": "{a} {b}",
        "fields": {"n": {"type": "int"}, "a": {"type": "str"}, "b": {"type": "str"}}}
#: The bound of the target: RSS growth below this many times the text's size.
TARGET = 2.0


def make_text(rng: random.Random, chars: int, shape: str) -> str:
    """``chars`` characters of random text of a shape."""
    if shape == "letters":
        return "".join(rng.choices(string.ascii_lowercase, k=chars))
    parts: list[str] = []
    size = 0
    while size < chars:
        word = ("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10)))
                if shape == "words" else rng.choice(WORDS))
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:chars]


def run(*, rows: int, kb: int, shape: str, embedder: str, batch: int,
        workdir: Path | None) -> dict[str, Any]:
    rng = random.Random(7)
    half = kb * 1000 // 2
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        with running_server(Path(tmp) / "data", embedder=embedder,
                            log_path=Path(tmp) / "server.log", ready_timeout=600
                            ) as (server, _times), httpx.Client(
                base_url=server.url, timeout=600) as http:
            http.post("/types", json=TYPE).raise_for_status()
            http.post("/entities/Blob", json={"data": {"n": -1, "a": "warm", "b": "up"}}
                      ).raise_for_status()
            http.post("/search", json={"type": "Blob", "text": "warm", "mode": "keyword"}
                      ).raise_for_status()
            before = rss_mb(server.proc.pid)
            text_bytes = 0
            started = time.perf_counter()
            for start in range(0, rows, batch):
                body = []
                for n in range(start, min(rows, start + batch)):
                    a, b = make_text(rng, half, shape), make_text(rng, half, shape)
                    text_bytes += len(a.encode()) + len(b.encode())
                    body.append({"n": n, "a": a, "b": b})
                http.post("/entities/Blob/batch", json={"rows": body}).raise_for_status()
            ingest_s = time.perf_counter() - started
            hits = http.post("/search", json={"type": "Blob", "text": "warm", "k": 3,
                                              "mode": "keyword"}).json()["hits"]
            after = rss_mb(server.proc.pid)
            peak = rss_mb(server.proc.pid, "VmHWM")
    assert before is not None and after is not None
    growth = after - before
    text_mb = text_bytes / 1e6
    return {"benchmark": "bench_keyword_memory", "environment": environment(),
            "embedder": embedder, "shape": shape, "rows": rows, "kb_per_row": kb,
            "text_mb": round(text_mb, 3), "rss_before_mb": before, "rss_after_mb": after,
            "rss_peak_mb": peak, "growth_mb": round(growth, 1),
            "growth_over_text": round(growth / text_mb, 2), "target": TARGET,
            "ingest_s": round(ingest_s, 1), "search_found_warm_row": bool(hits)}


def markdown(doc: Mapping[str, Any]) -> str:
    rows = [[d["shape"], d["rows"], d["kb_per_row"], d["text_mb"], d["rss_before_mb"],
             d["rss_after_mb"], d["growth_mb"], d["growth_over_text"]]
            for d in doc["runs"]]
    return (f"# Server memory against text entropy ({doc['runs'][0]['embedder']})\n\n"
            + markdown_table(["text", "rows", "KB/row", "text MB", "RSS before MB",
                              "RSS after MB", "growth MB", "growth / text"], rows)
            + f"\nTarget: growth below {TARGET}x the text's size.\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--kb", type=int, default=120, help="KB of text per row")
    parser.add_argument("--shape", choices=SHAPES, action="append",
                        help="text shape (repeatable; default: words and letters)")
    parser.add_argument("--batch", type=int, default=10, help="rows per request")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    doc = {"benchmark": "bench_keyword_memory",
           "runs": [run(rows=args.rows, kb=args.kb, shape=shape, embedder=args.embedder,
                        batch=args.batch, workdir=args.workdir)
                    for shape in args.shape or ("words", "letters")]}
    publish(doc, args.out, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
