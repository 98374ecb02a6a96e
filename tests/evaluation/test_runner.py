"""Evaluation runners end to end on tiny fixture datasets (hash embedder, real DuckDB/Chroma).

The fixtures are built so that the keyword-mode figures can be worked out by hand: documents
share no content word, so a query's BM25 matches are known exactly; the vector leg scores every
candidate, so whatever its order, recall at a depth covering the whole corpus is 1.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder
from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.ids import entity_id
from evaluation.__main__ import main
from evaluation.counting import CountingEmbedder
from evaluation.report import write_report
from evaluation.runner import (
    MANIFEST,
    RunOptions,
    latency_summary,
    locomo_turn_rows,
    run_beir,
    run_locomo,
)

ROOT = Path(__file__).resolve().parents[2]

DOCS = [
    {"_id": "d1", "title": "Apples", "text": "crisp orchard fruit"},
    {"_id": "d2", "title": "Volcano", "text": "molten lava eruption"},
    {"_id": "d3", "title": "Chess", "text": "bishop knight gambit"},
    {"_id": "d4", "title": "Violin", "text": "strings bow concerto"},
]
QUERIES = [
    {"_id": "q1", "text": "Apples crisp orchard fruit"},  # d1's embedded text, verbatim
    {"_id": "q2", "text": "molten lava"},
    {"_id": "q3", "text": "quantum"},  # no document has this word
    {"_id": "q9", "text": "not judged"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t1\nq3\td4\t1\n"

# keyword mode, by hand: q1 -> [d1]; q2 -> [d2] (d3, grade 1, never matched); q3 -> [].
NDCG_Q2 = 2 / (2 + 1 / math.log2(3))
KEYWORD_EXPECTED = {
    "ndcg@10": (1 + NDCG_Q2 + 0) / 3,
    "recall@10": (1 + 0.5 + 0) / 3,
    "mrr@10": (1 + 1 + 0) / 3,
    "map@10": (1 + 0.5 + 0) / 3,
    "precision@10": (0.1 + 0.1 + 0) / 3,
    "recall@100": (1 + 0.5 + 0) / 3,
    "map": (1 + 0.5 + 0) / 3,
}


def write_beir(root: Path) -> Path:
    """A tiny BEIR-format dataset directory."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    (root / "qrels" / "test.tsv").write_text(QRELS)
    return root


def _turn(speaker: str, dia_id: str, text: str, caption: str | None = None) -> dict[str, Any]:
    turn = {"speaker": speaker, "dia_id": dia_id, "text": text}
    if caption:
        turn["blip_caption"] = caption
    return turn


LOCOMO = [
    {
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Alice", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                _turn("Alice", "D1:1", "I adopted a puppy named Rex"),
                _turn("Bob", "D1:2", "Congrats! What breed?"),
                _turn("Alice", "D1:3", "A beagle, he loves the park", "a photo of a dog on grass"),
            ],
            "session_2_date_time": "10:00 am on 1 June, 2023",
            "session_2": [
                _turn("Bob", "D2:1", "I started learning guitar"),
                _turn("Alice", "D2:2", "Cool, which songs?"),
            ],
        },
        "qa": [
            {"question": "Which puppy did Alice adopt?", "answer": "Rex", "category": 4,
             "evidence": ["D1:1"]},
            {"question": "When did Bob start learning guitar?", "answer": "June 2023",
             "category": 2, "evidence": ["D2:1"]},
            {"question": "Tell me about the puppy", "answer": "Rex", "category": 1,
             "evidence": ["D1:1; D2:1"]},  # malformed: split into two IDs
            {"question": "What breed is Bob's cat?", "adversarial_answer": "beagle",
             "category": 5, "evidence": ["D1:3", "D9:9"]},  # D9:9 does not exist: dropped
            {"question": "No evidence here", "answer": "x", "category": 4, "evidence": []},
        ],
    },
    {
        "sample_id": "conv-b",
        "conversation": {
            "speaker_a": "Carol", "speaker_b": "Dan",
            "session_1_date_time": "9:00 am on 2 May, 2023",
            "session_1": [
                _turn("Carol", "D1:1", "My puppy chewed my shoes"),
                _turn("Dan", "D1:2", "Oh no!"),
            ],
        },
        "qa": [
            # only conv-a has these words: a search leaking out of conv-b would find its D1:1
            {"question": "What did Alice adopt?", "answer": "a puppy", "category": 3,
             "evidence": ["D:1:1"]},  # malformed: extra colon
        ],
    },
]


def write_locomo(path: Path) -> Path:
    """A tiny LoCoMo file: two conversations, six questions with known faults."""
    path.write_text(json.dumps(LOCOMO))
    return path


def _options(tmp_path: Path, **kwargs: Any) -> RunOptions:
    return RunOptions(workdir=tmp_path / "work", embedder="hash", progress=False, **kwargs)


# --------------------------------------------------------------------------- BEIR


def test_beir_keyword_exact_metrics(tmp_path: Path) -> None:
    data = write_beir(tmp_path / "tiny")
    results = run_beir(data, "test", _options(tmp_path, modes=("keyword",)),
                       embedder=HashEmbedder())
    assert results["headline_mode"] == "keyword"
    assert results["metrics"].keys() == KEYWORD_EXPECTED.keys()
    for name, value in KEYWORD_EXPECTED.items():
        assert results["metrics"][name] == pytest.approx(value, abs=1e-6), name
    assert results["dataset"]["documents"] == 4
    assert results["dataset"]["queries"] == 3  # the judged ones
    assert results["config"]["data_faults"] == {
        "documents_empty": 0, "queries_empty": 0, "qrels_documents_not_in_corpus": 0}
    assert results["modes"]["keyword"]["recall_curve"]["1"] == pytest.approx(
        (1 + 0.5 + 0) / 3)


def test_beir_all_modes_and_cached_ingest(tmp_path: Path) -> None:
    data = write_beir(tmp_path / "tiny")
    embedder = CountingEmbedder()
    first = run_beir(data, "test", _options(tmp_path), embedder=embedder)
    assert first["headline_mode"] == "hybrid"
    assert set(first["modes"]) == {"keyword", "vector", "hybrid"}
    assert first["metrics"] == first["modes"]["hybrid"]["metrics"]
    assert first["timings"]["skipped"] is False
    assert embedder.texts == 4 + 3 + 3  # documents once, then the queries of two modes
    # q1 is d1's text: rank 1 in both legs; every leg scores all 4 documents in vector mode
    for mode in ("vector", "hybrid"):
        assert first["modes"][mode]["metrics"]["recall@100"] == 1.0
    assert first["modes"]["vector"]["metrics"]["mrr@10"] >= 1 / 3
    for name, value in KEYWORD_EXPECTED.items():
        assert first["modes"]["keyword"]["metrics"][name] == pytest.approx(value, abs=1e-6)
    manifest = json.loads((tmp_path / "work" / MANIFEST).read_text())
    assert manifest["Document"]["entities"] == 4
    # a second run finds the data in the workdir: nothing ingested, only the queries embedded
    embedded_before = embedder.texts
    second = run_beir(data, "test", _options(tmp_path, modes=("vector",)), embedder=embedder)
    assert second["timings"]["skipped"] is True
    assert second["timings"]["first_ingest"]["entities"] == 4
    assert embedder.texts - embedded_before == 3  # the queries (the warm-up is keyword only)
    assert second["modes"]["vector"]["metrics"] == first["modes"]["vector"]["metrics"]


def test_beir_fusion_options_are_recorded_and_used(tmp_path: Path) -> None:
    data = write_beir(tmp_path / "tiny")
    keyword_only = run_beir(
        data, "test", _options(tmp_path, modes=("hybrid",), rrf_k=5,
                               weights={"vector": 0.0, "keyword": 1.0}),
        embedder=HashEmbedder())
    assert keyword_only["config"]["rrf_k"] == 5
    assert keyword_only["config"]["weights"] == {"vector": 0.0, "keyword": 1.0}
    # with the vector leg weighted 0 the keyword matches come first and the other documents
    # follow with fused score 0, in entity-ID order (the product's tie-break)
    tie_order = [d for _, d in sorted((entity_id("Document", {"doc_id": d}), d)
                                      for d in ("d1", "d2", "d3", "d4"))]
    q2 = ["d2", *(d for d in tie_order if d != "d2")]
    q3 = tie_order
    ndcg_q2 = (2 + 1 / math.log2(q2.index("d3") + 2)) / (2 + 1 / math.log2(3))
    ndcg_q3 = 1 / math.log2(q3.index("d4") + 2)
    assert keyword_only["metrics"]["mrr@10"] == pytest.approx(
        (1 + 1 + 1 / (q3.index("d4") + 1)) / 3, abs=1e-6)
    assert keyword_only["metrics"]["ndcg@10"] == pytest.approx(
        (1 + ndcg_q2 + ndcg_q3) / 3, abs=1e-6)
    with pytest.raises(ValidationError):
        run_beir(data, "test", _options(tmp_path, weights={"dense": 1.0}),
                 embedder=HashEmbedder())


# --------------------------------------------------------------------------- LoCoMo


#: The paper's protocol: the turn alone, plain search (the Message profile overridden).
PAPER = {"context": 0, "neighbour_weight": 0.0, "query_stopwords": False}


def test_locomo_keyword_exact_recall_and_faults(tmp_path: Path) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    results = run_locomo(data, _options(tmp_path, modes=("keyword", "vector"), **PAPER),
                         embedder=HashEmbedder())
    keyword = results["modes"]["keyword"]
    # by hand: single-hop 1, temporal 1, multi-hop 1/2, adversarial 0, open-domain 0 (filter)
    for k in (5, 10, 25, 50):
        assert keyword["metrics"][f"recall@{k}"] == pytest.approx(0.5)
    assert {c: v["recall@10"] for c, v in keyword["per_category"].items()} == {
        "multi-hop": 0.5, "temporal": 1.0, "open-domain": 0.0, "single-hop": 1.0,
        "adversarial": 0.0}
    assert keyword["per_category"]["multi-hop"]["questions"] == 1
    # vector mode scores every turn of the conversation, and only those: all evidence found
    assert results["modes"]["vector"]["metrics"]["recall@5"] == 1.0
    assert results["dataset"]["questions"] == 5
    assert results["dataset"]["turns"] == 7
    faults = results["config"]["data_faults"]
    assert faults["questions_without_evidence"] == 1
    assert faults["evidence_split"] == 1
    assert faults["evidence_extra_colon"] == 1
    assert faults["evidence_not_found"] == 1
    assert results["config"]["search_scope"] == "conversation"
    assert results["per_category"] == results["modes"]["vector"]["per_category"]


def test_locomo_turn_rows_follow_the_paper_unit(tmp_path: Path) -> None:
    from evaluation.datasets import load_locomo

    rows = locomo_turn_rows(load_locomo(write_locomo(tmp_path / "locomo.json")))
    caption_turn = next(r for r in rows if r.dia_id == "D1:3" and r.conversation == "conv-a")
    assert caption_turn.unit_text == (
        'Alice said, "A beagle, he loves the park" and shared a photo of a dog on grass')
    assert caption_turn.session == 1
    assert caption_turn.session_date is not None
    assert caption_turn.session_date.isoformat() == "2023-05-08T13:56:00"
    assert [r.turn_index for r in rows if r.conversation == "conv-a"] == [0, 1, 2, 3, 4]


def test_locomo_context_rows_stay_in_their_session(tmp_path: Path) -> None:
    from evaluation.datasets import load_locomo

    dataset = load_locomo(write_locomo(tmp_path / "locomo.json"))
    rows = {(r.conversation, r.dia_id): r for r in locomo_turn_rows(dataset, context=2)}
    assert rows["conv-a", "D1:1"].context == ""
    assert rows["conv-a", "D1:3"].context == (
        'Alice said, "I adopted a puppy named Rex" Bob said, "Congrats! What breed?"')
    assert rows["conv-a", "D2:1"].context == ""  # a new session starts without context
    assert rows["conv-a", "D2:2"].context == 'Bob said, "I started learning guitar"'
    assert rows["conv-b", "D1:1"].context == ""  # never another conversation's turns
    assert all(r.context == "" for r in locomo_turn_rows(dataset))


def test_locomo_context_option_changes_the_indexed_text(tmp_path: Path) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    plain = run_locomo(data, _options(tmp_path, modes=("keyword",), **PAPER),
                       embedder=HashEmbedder())
    options = RunOptions(workdir=tmp_path / "ctx", embedder="hash", progress=False,
                         modes=("keyword",), neighbour_weight=0.0)
    with_context = run_locomo(data, options, embedder=HashEmbedder())
    assert (plain["config"]["context_turns"], with_context["config"]["context_turns"]) == (0, 1)
    # "What breed is Bob's cat?" (evidence D1:3): D1:3 now carries Bob's "What breed?"
    assert plain["modes"]["keyword"]["per_category"]["adversarial"]["recall@5"] == 0.0
    assert with_context["modes"]["keyword"]["per_category"]["adversarial"]["recall@5"] == 1.0
    # a workdir holds one variant: reusing the plain one with the type's context is refused
    with pytest.raises(ValidationError, match="variant"):
        run_locomo(data, _options(tmp_path, modes=("keyword",)), embedder=HashEmbedder())


def test_locomo_runs_the_product_profile_with_overrides(tmp_path: Path) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    results = run_locomo(data, _options(tmp_path, modes=("hybrid",)), embedder=HashEmbedder())
    profile = results["config"]["profile"]
    assert profile["neighbours"]["weight"] == 0.6 and profile["rrf_k"] == 20
    hybrid = results["modes"]["hybrid"]
    assert hybrid["plain_latency_ms"]["p50"] is not None and hybrid["p50_vs_plain"] > 0
    write_report(results, tmp_path / "out" / "product.json", plots=False)
    assert "| hybrid | " in (tmp_path / "out" / "product.md").read_text().split(
        "Side by side")[1]
    # conv-a has 5 turns and the vector leg proposes each of them: all evidence is found
    assert results["metrics"]["recall@5"] == 1.0
    with pytest.raises(ValidationError):
        run_locomo(data, _options(tmp_path, neighbour_weight=-1.0), embedder=HashEmbedder())


def test_query_stopwords_option(tmp_path: Path) -> None:
    data = write_beir(tmp_path / "tiny")
    results = run_beir(data, "test", _options(tmp_path, modes=("keyword",),
                                              query_stopwords=True), embedder=HashEmbedder())
    assert results["config"]["query_stopwords"] is True
    # the queries have no stopword to drop: the keyword figures are unchanged
    assert results["metrics"]["ndcg@10"] == pytest.approx(KEYWORD_EXPECTED["ndcg@10"], abs=1e-6)


# --------------------------------------------------------------------------- report & CLI


def test_report_files(tmp_path: Path) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    results = run_locomo(data, _options(tmp_path, modes=("keyword",)), embedder=HashEmbedder())
    out = tmp_path / "out" / "locomo.json"
    written = write_report(results, out)
    assert [p.name for p in written] == [
        "locomo.json", "locomo.md", "locomo-recall.png", "locomo-latency.png"]
    document = json.loads(out.read_text())
    assert "_latencies_ms" not in document
    assert document["published"][0]["label"].startswith("published")
    text = (tmp_path / "out" / "locomo.md").read_text()
    assert "| published: DRAGON" in text
    assert "| keyword | adversarial | 1 |" in text
    assert (tmp_path / "out" / "locomo-recall.png").read_bytes()[:4] == b"\x89PNG"


def test_latency_summary() -> None:
    assert latency_summary([]) == {"p50": None, "p95": None, "p99": None, "mean": None,
                                   "max": None}
    summary = latency_summary([float(i) for i in range(1, 101)])
    assert summary["p50"] == 50.5
    assert summary["p95"] == pytest.approx(95.05)
    assert summary["max"] == 100.0


def test_cli_main_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_beir(tmp_path / "tiny")
    out = tmp_path / "res.json"
    code = main(["beir", "--data", str(data), "--mode", "keyword", "--embedder", "hash",
                 "--workdir", str(tmp_path / "work"), "--out", str(out), "--no-progress"])
    assert code == 0
    document = json.loads(out.read_text())
    assert document["metrics"]["ndcg@10"] == pytest.approx(KEYWORD_EXPECTED["ndcg@10"])
    assert document["config"]["command"].startswith("python -m evaluation beir")
    assert main(["beir", "--data", str(tmp_path / "missing"), "--embedder", "hash",
                 "--no-progress"]) == 2
    assert "error:" in capsys.readouterr().err


def test_cli_subprocess_end_to_end(tmp_path: Path) -> None:
    data = write_beir(tmp_path / "tiny")
    out = tmp_path / "cli.json"
    proc = subprocess.run(
        [sys.executable, "-m", "evaluation", "beir", "--data", str(data), "--split", "test",
         "--mode", "all", "--k", "10", "--rrf-k", "20", "--embedder", "hash",
         "--workdir", str(tmp_path / "work"), "--out", str(out), "--no-progress",
         "--no-plots"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert set(document["metrics"]) >= {"ndcg@10", "recall@10", "recall@100", "mrr@10", "map"}
    assert document["metrics"] == document["modes"]["hybrid"]["metrics"]
    assert document["config"]["rrf_k"] == 20
    assert out.with_suffix(".md").is_file()
    assert not (tmp_path / "cli-recall.png").exists()  # --no-plots


def test_locomo_session_figures_count_evidence_sessions(tmp_path: Path) -> None:
    from evaluation.runner import session_scores

    assert session_scores(["D1:3", "D4:2"], ["D1:1", "D1:3", "D2:2"], 2) == (1.0, 0.0)
    assert session_scores(["D1:3", "D4:2"], ["D4:9", "D2:2", "D1:1"], 3) == (1.0, 1.0)
    assert session_scores(["D10:3"], ["D1:3", "D1:0"], 2) == (0.0, 0.0)
    data = write_locomo(tmp_path / "locomo.json")
    results = run_locomo(data, _options(tmp_path, modes=("vector",), **PAPER),
                         embedder=HashEmbedder())
    vector = results["modes"]["vector"]
    # vector mode ranks every turn of the conversation within the top 5: every session found
    assert vector["sessions"]["session_hit@5"] == vector["sessions"]["all_sessions@5"] == 1.0
    assert vector["per_category"]["multi-hop"]["all_sessions@10"] == 1.0
    report = (tmp_path / "out.md")
    from evaluation.report import markdown

    report.write_text(markdown(results))
    assert "session_hit@10" in report.read_text() and "all_sessions@10" in report.read_text()
