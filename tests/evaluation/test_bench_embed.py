"""Smoke test of the embedder benchmark: real worker processes, tiny sizes, shape only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation import bench_embed


def tiny_beir(root: Path) -> Path:
    """A BEIR directory of 6 abstracts and 4 claims with train qrels."""
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"Title {i}", "text": f"abstract number {i} about cells"}
            for i in range(6)]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    claims = [{"_id": f"q{i}", "text": f"claim {i} on cells"} for i in range(4)]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in claims) + "\n")
    (root / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
    return root


@pytest.mark.slow  # starts worker interpreters
@pytest.mark.timeout(180)
def test_bench_embed_smoke(tmp_path: Path) -> None:
    doc = bench_embed.run(scifact=tiny_beir(tmp_path / "beir"), variants=("hash", "hash@2/1"),
                          rounds=2, passages=5, sentence_count=4, queries=3)
    assert doc["config"]["passages"] == 5 and doc["config"]["queries"] == 3
    assert doc["onnx_export"] == {}  # no ONNX variant asked for: nothing exported
    rows = {r["variant"]: r for r in doc["results"]}
    assert set(rows) == {"hash", "hash@2/1"}
    for row in rows.values():
        assert row["model_id"] == "hash-64"
        assert row["passages_per_s"] > 0 and row["sentences_per_s"] > 0
        assert len(row["passages_per_s_rounds"]) == 2
        assert row["query_p95_ms"] >= row["query_p50_ms"] > 0 and row["load_s"] > 0
        assert row["cosine_vs_hash"]["passages"]["min"] == pytest.approx(1.0)
    assert rows["hash"]["passages_speedup"] == 1.0
    md = bench_embed.markdown(doc)
    assert "| hash@2/1 | hash-64 |" in md
    assert bench_embed.plot(doc, tmp_path / "out.png") == tmp_path / "out.png"
    assert len(bench_embed.sentences(3)[0].split()) == bench_embed.SENTENCE_WORDS + 1
