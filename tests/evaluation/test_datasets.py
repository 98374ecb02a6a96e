"""Dataset loaders on small fixture files, and on the real datasets when they are present."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid._internal.errors import ValidationError
from evaluation.datasets import (
    CATEGORY_NAMES,
    LOCOMO_FAULT_KINDS,
    BeirDoc,
    DialogTurn,
    load_beir,
    load_locomo,
    locomo_unit_text,
    parse_session_date,
)

SHARED_DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"

CORPUS_LINES: list[dict[str, Any]] = [
    {"_id": "d1", "title": "Alpha", "text": "first abstract"},
    {"_id": 2, "text": "second abstract, no title"},
    {"_id": "d3", "title": "Gamma", "text": "third", "metadata": {}},
]
QUERY_LINES: list[dict[str, Any]] = [
    {"_id": "q1", "text": "what is alpha"},
    {"_id": "q2", "text": "what is two"},
    {"_id": "q3", "text": "not judged in test"},
]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _write_beir(
    root: Path, *, gz: bool = False, header: bool = True, splits: dict[str, str] | None = None
) -> bytes:
    root.mkdir(parents=True, exist_ok=True)
    corpus = _jsonl(CORPUS_LINES)
    if gz:
        (root / "corpus.jsonl.gz").write_bytes(gzip.compress(corpus))
    else:
        (root / "corpus.jsonl").write_bytes(corpus)
    (root / "queries.jsonl").write_bytes(_jsonl(QUERY_LINES))
    (root / "qrels").mkdir(exist_ok=True)
    default = {"test": "q2\t2\t1\nq1\td1\t2\nq1\td3\t0\n"}
    for split, body in (splits or default).items():
        prefix = "query-id\tcorpus-id\tscore\n" if header else ""
        (root / "qrels" / f"{split}.tsv").write_text(prefix + body)
    return corpus


@pytest.mark.parametrize(("gz", "header"), [(False, True), (True, False), (True, True)])
def test_load_beir(tmp_path: Path, gz: bool, header: bool) -> None:
    corpus = _write_beir(tmp_path / "tiny", gz=gz, header=header)
    dataset = load_beir(tmp_path / "tiny")
    assert dataset.name == "tiny"
    assert dataset.split == "test"
    assert dataset.docs == [
        BeirDoc("d1", "Alpha", "first abstract"),
        BeirDoc("2", "", "second abstract, no title"),
        BeirDoc("d3", "Gamma", "third"),
    ]
    assert dataset.qrels == {"q2": {"2": 1}, "q1": {"d1": 2, "d3": 0}}
    assert dataset.queries == {"q2": "what is two", "q1": "what is alpha"}  # judged ones only
    assert dataset.sha256 == hashlib.sha256(corpus).hexdigest()  # of the uncompressed bytes


def test_missing_split_names_file_and_splits_present(tmp_path: Path) -> None:
    _write_beir(tmp_path, splits={"train": "q1\td1\t1\n", "dev": "q2\t2\t1\n"})
    assert load_beir(tmp_path, split="dev").qrels == {"q2": {"2": 1}}
    with pytest.raises(FileNotFoundError, match=r"test\.tsv.*splits present: dev, train"):
        load_beir(tmp_path)


def test_missing_corpus_and_queries(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    (tmp_path / "queries.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="queries.jsonl"):
        load_beir(tmp_path)
    (tmp_path / "corpus.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="corpus.jsonl"):
        load_beir(tmp_path)
    with pytest.raises(FileNotFoundError, match="directory"):
        load_beir(tmp_path / "nowhere")


def test_malformed_beir_content_names_file_and_line(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    with (tmp_path / "corpus.jsonl").open("a") as corpus:
        corpus.write("{not json\n")
    with pytest.raises(ValidationError, match=r"corpus\.jsonl:4: invalid JSON"):
        load_beir(tmp_path)

    _write_beir(tmp_path, splits={"test": "q1\td1\t1\nq1\td3\tvery\n"})
    with pytest.raises(ValidationError, match=r"test\.tsv:3: relevance 'very'"):
        load_beir(tmp_path)

    _write_beir(tmp_path, splits={"test": "q1\td1\n"})
    with pytest.raises(ValidationError, match="3 tab-separated columns"):
        load_beir(tmp_path)

    _write_beir(tmp_path, splits={"test": "q9\td1\t1\n"})
    with pytest.raises(ValidationError, match="not in queries.jsonl"):
        load_beir(tmp_path)


def _turn(speaker: str, dia_id: str, text: str, **extra: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


def _locomo_fixture() -> list[dict[str, Any]]:
    conversation = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_2_date_time": "12:09 am on 13 September, 2023",
        "session_2": [
            _turn("Ann", "D2:1", "Back again."),
            _turn("Bob", "D2:2", "Look at this.", blip_caption="a photo of a cat", img_url="x"),
        ],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [_turn("Ann", "D1:1", "Hi Bob!"), _turn("Bob", "D1:2", "Hi Ann.")],
        "session_3_date_time": "3:00 pm on 1 June, 2023",  # a date without a session
    }
    qa = [
        {"question": "plain", "answer": "yes", "evidence": ["D1:1"], "category": 4},
        {"question": "split", "answer": "x", "evidence": ["D1:2; D2:1"], "category": 1},
        {"question": "colon", "answer": 2022, "evidence": ["D:2:2"], "category": 2},
        {"question": "zero", "answer": "x", "evidence": ["D2:02", "D2:2"], "category": 3},
        {"question": "junk", "answer": "x", "evidence": ["D", "D1:1"], "category": 4},
        {"question": "gone", "answer": "x", "evidence": ["D9:9", "D2:1"], "category": 4},
        {"question": "none", "answer": "x", "evidence": [], "category": 3},
        {"question": "all gone", "answer": "x", "evidence": ["D7:1"], "category": 1},
        {"question": "adv", "adversarial_answer": "cats", "evidence": ["D2:2"], "category": 5},
    ]
    second = {
        "speaker_a": "Cy",
        "speaker_b": "Di",
        "session_1_date_time": "sometime in spring",
        "session_1": [_turn("Cy", "D1:1", "Hello.")],
    }
    return [
        {"sample_id": "conv-a", "conversation": conversation, "qa": qa},
        {"sample_id": "conv-b", "conversation": second, "qa": []},
    ]


def test_load_locomo_turns(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(_locomo_fixture()))
    dataset = load_locomo(path)
    assert [(t.conversation, t.dia_id, t.turn_index) for t in dataset.turns] == [
        ("conv-a", "D1:1", 0),
        ("conv-a", "D1:2", 1),
        ("conv-a", "D2:1", 2),
        ("conv-a", "D2:2", 3),
        ("conv-b", "D1:1", 0),
    ]
    assert dataset.turns[3] == DialogTurn(
        conversation="conv-a",
        session=2,
        session_date="2023-09-13T00:09:00",
        session_date_raw="12:09 am on 13 September, 2023",
        speaker="Bob",
        dia_id="D2:2",
        text="Look at this.",
        blip_caption="a photo of a cat",
        turn_index=3,
    )
    assert dataset.turns[0].session_date == "2023-05-08T13:56:00"
    assert dataset.turns[4].session_date == "sometime in spring"  # unparsed: kept raw


def test_load_locomo_normalises_and_counts_every_fault(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(_locomo_fixture()))
    dataset = load_locomo(path)
    assert {q.question: q.evidence for q in dataset.questions} == {
        "plain": ["D1:1"],
        "split": ["D1:2", "D2:1"],
        "colon": ["D2:2"],
        "zero": ["D2:2"],
        "junk": ["D1:1"],
        "gone": ["D2:1"],
        "adv": ["D2:2"],
    }
    assert dataset.faults == {
        "answer_not_string": 1,
        "evidence_duplicate": 1,  # 'D2:02' and 'D2:2' are one ID
        "evidence_extra_colon": 1,
        "evidence_leading_zero": 1,
        "evidence_not_found": 2,  # D9:9 and D7:1
        "evidence_split": 1,
        "evidence_unparseable": 1,
        "questions_evidence_all_dropped": 1,
        "questions_without_evidence": 1,
        "session_date_unparsed": 1,
        "turn_dia_id_normalised": 0,
    }
    assert set(dataset.faults) == set(LOCOMO_FAULT_KINDS)
    by_question = {q.question: q for q in dataset.questions}
    assert by_question["colon"].answer == "2022"
    assert by_question["adv"].answer is None
    assert by_question["adv"].adversarial_answer == "cats"
    assert CATEGORY_NAMES[by_question["adv"].category] == "adversarial"


def test_load_locomo_rejects_unknown_category(tmp_path: Path) -> None:
    samples = _locomo_fixture()
    samples[0]["qa"] = [{"question": "?", "answer": "x", "evidence": ["D1:1"], "category": 9}]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(samples))
    with pytest.raises(ValidationError, match="category 9"):
        load_locomo(path)
    with pytest.raises(FileNotFoundError):
        load_locomo(tmp_path / "missing.json")


def test_locomo_unit_text() -> None:
    turn = DialogTurn("c", 1, "2023-05-08", "8 May, 2023", "Ann", "D1:1", "Hi!", None, 0)
    assert locomo_unit_text(turn) == 'Ann said, "Hi!"'
    with_image = DialogTurn("c", 1, "", "", "Bob", "D1:2", "Look.", "a photo of a cat", 1)
    assert locomo_unit_text(with_image) == 'Bob said, "Look." and shared a photo of a cat'


@pytest.mark.parametrize(
    ("raw", "iso"),
    [
        ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00"),
        ("12:09 am on 13 September, 2023", "2023-09-13T00:09:00"),
        ("12:30 pm on 1 January, 2024", "2024-01-01T12:30:00"),
        ("10:04 AM on 19 December, 2023", "2023-12-19T10:04:00"),
        ("8 May, 2023", "2023-05-08"),
        ("13:00 pm on 8 May, 2023", None),
        ("1:00 pm on 31 February, 2023", None),
        ("1:00 pm on 8 Maytime, 2023", None),
        ("yesterday", None),
    ],
)
def test_parse_session_date(raw: str, iso: str | None) -> None:
    assert parse_session_date(raw) == iso


@pytest.mark.skipif(not SHARED_DATASETS.is_dir(), reason="shared datasets not present")
def test_real_datasets() -> None:
    scifact = load_beir(SHARED_DATASETS / "scifact", split="train")
    assert len(scifact.docs) == 5183
    assert scifact.sha256.startswith("dec31c81")
    assert len(scifact.queries) == len(scifact.qrels) == 809
    assert sum(len(judged) for judged in scifact.qrels.values()) == 919
    with pytest.raises(FileNotFoundError, match="splits present: train"):
        load_beir(SHARED_DATASETS / "scifact", split="test")

    locomo = load_locomo(SHARED_DATASETS / "locomo" / "locomo7.json")
    assert len({t.conversation for t in locomo.turns}) == 7
    assert len(locomo.turns) == 4124
    assert len(locomo.questions) == 1345  # 1,347 annotated, 2 without evidence skipped
    assert Counter(q.category for q in locomo.questions) == {4: 563, 5: 312, 2: 214, 1: 192, 3: 64}
    assert {k: v for k, v in locomo.faults.items() if v} == {
        "answer_not_string": 6,
        "evidence_extra_colon": 1,  # 'D:11:26'
        "evidence_not_found": 2,  # D10:19 in conv-42, D4:36 in conv-47
        "evidence_split": 1,  # 'D8:6; D9:17'
        "evidence_unparseable": 1,  # 'D' in conv-42
        "questions_without_evidence": 2,
    }
    assert all(t.session_date[:4] in {"2022", "2023", "2024"} for t in locomo.turns)
