"""Parsed benchmark datasets: BEIR-format corpora with qrels, and LoCoMo conversations.

Parsing only; putting the documents into a memory is the runners' job. Both loaders take a
path (the data lives outside the repository, e.g. ``../shared/datasets/scifact``).

LoCoMo's annotation faults are repaired or dropped explicitly and every case is counted in
:attr:`LocomoDataset.faults` (keys in :data:`LOCOMO_FAULT_KINDS`):

- ``evidence_split``: one string holding several IDs (``'D8:6; D9:17'``), split into IDs;
- ``evidence_extra_colon``: ``'D:11:26'`` read as ``D11:26``;
- ``evidence_leading_zero``: ``'D30:05'`` read as ``D30:5``;
- ``evidence_unparseable``: no dialog ID in it at all (``'D'``), dropped;
- ``evidence_not_found``: a well-formed ID that no turn of the conversation has, dropped;
- ``evidence_duplicate``: the same ID twice in one question's evidence, kept once;
- ``questions_without_evidence``: annotated with no evidence, question skipped;
- ``questions_evidence_all_dropped``: every evidence ID dropped, question skipped;
- ``answer_not_string``: a non-string answer (e.g. the year ``2022``) kept as its string;
- ``turn_dia_id_normalised``: a turn's own ``dia_id`` was not canonical and was normalised;
- ``session_date_unparsed``: a session date that is not ``"<h:mm> <am|pm> on <d> <Month>, <yyyy>"``
  or ``"<d> <Month>, <yyyy>"``, kept raw.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from dmf_hybrid._internal.errors import ValidationError
from evaluation.metrics import Qrels

logger = logging.getLogger(__name__)

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

LOCOMO_FAULT_KINDS = (
    "answer_not_string",
    "evidence_duplicate",
    "evidence_extra_colon",
    "evidence_leading_zero",
    "evidence_not_found",
    "evidence_split",
    "evidence_unparseable",
    "questions_evidence_all_dropped",
    "questions_without_evidence",
    "session_date_unparsed",
    "turn_dia_id_normalised",
)


# --------------------------------------------------------------------------- BEIR


@dataclass(frozen=True)
class BeirDoc:
    """One corpus document of a BEIR dataset."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR corpus, the queries judged in one split, and that split's qrels."""

    name: str
    docs: list[BeirDoc]
    queries: dict[str, str]
    qrels: Qrels
    split: str
    sha256: str
    """sha256 hex digest of the uncompressed ``corpus.jsonl`` bytes."""


def load_beir(path: str | Path, split: str = "test") -> BeirDataset:
    """The BEIR dataset in directory ``path`` with the qrels of ``split``.

    Reads ``corpus.jsonl`` (or ``corpus.jsonl.gz`` when there is no plain one),
    ``queries.jsonl`` and ``qrels/<split>.tsv`` (``query-id, corpus-id, score`` separated by tabs,
    header line optional). Queries are restricted to those with qrels, in qrels order. Raises
    FileNotFoundError naming a missing file (and the splits present for a missing split), and
    ValidationError naming the file and line of malformed content.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"BEIR dataset directory not found: {root}")
    qrels = _read_beir_qrels(root, split)
    corpus_path = _beir_corpus_path(root)
    raw = corpus_path.read_bytes()
    if corpus_path.suffix == ".gz":
        raw = gzip.decompress(raw)
    docs = _parse_beir_corpus(raw, corpus_path)
    all_queries = _parse_beir_queries(root / "queries.jsonl")
    missing = [qid for qid in qrels if qid not in all_queries]
    if missing:
        raise ValidationError(
            f"{len(missing)} query IDs of qrels/{split}.tsv are not in queries.jsonl "
            f"(first: {missing[0]!r})",
            field="qrels",
        )
    queries = {qid: all_queries[qid] for qid in qrels}
    return BeirDataset(
        name=root.resolve().name,
        docs=docs,
        queries=queries,
        qrels=qrels,
        split=split,
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def _beir_corpus_path(root: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"no corpus.jsonl or corpus.jsonl.gz in {root}")


def _read_beir_qrels(root: Path, split: str) -> Qrels:
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        present = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise FileNotFoundError(
            f"qrels for split {split!r} not found: {qrels_path}; "
            f"splits present: {', '.join(present) if present else 'none'}"
        )
    qrels: Qrels = {}
    first_line = True
    for number, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        is_first_line, first_line = first_line, False
        columns = line.rstrip("\r").split("\t")
        if len(columns) != 3:
            raise ValidationError(
                f"{qrels_path}:{number}: expected 3 tab-separated columns, got {len(columns)}",
                field="qrels",
            )
        query_id, doc_id, score = (c.strip() for c in columns)
        try:
            relevance = int(score)
        except ValueError:
            if is_first_line:
                continue  # the optional header line, e.g. "query-id  corpus-id  score"
            raise ValidationError(
                f"{qrels_path}:{number}: relevance {score!r} is not an integer", field="qrels"
            ) from None
        qrels.setdefault(query_id, {})[doc_id] = relevance
    return qrels


def _parse_beir_corpus(raw: bytes, source: Path) -> list[BeirDoc]:
    docs: list[BeirDoc] = []
    seen: set[str] = set()
    for number, record in _jsonl_records(raw.decode("utf-8"), source):
        doc_id = _required_id(record, source, number)
        if doc_id in seen:
            raise ValidationError(f"{source}:{number}: duplicate document ID {doc_id!r}")
        seen.add(doc_id)
        docs.append(
            BeirDoc(
                id=doc_id, title=str(record.get("title") or ""), text=str(record.get("text") or "")
            )
        )
    return docs


def _parse_beir_queries(source: Path) -> dict[str, str]:
    if not source.is_file():
        raise FileNotFoundError(f"queries file not found: {source}")
    queries: dict[str, str] = {}
    for number, record in _jsonl_records(source.read_text(encoding="utf-8"), source):
        queries[_required_id(record, source, number)] = str(record.get("text") or "")
    return queries


def _jsonl_records(text: str, source: Path) -> list[tuple[int, dict[str, Any]]]:
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{source}:{number}: invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValidationError(f"{source}:{number}: expected a JSON object")
        records.append((number, record))
    return records


def _required_id(record: dict[str, Any], source: Path, number: int) -> str:
    if record.get("_id") is None:
        raise ValidationError(f"{source}:{number}: missing '_id'", field="_id")
    return str(record["_id"])


# --------------------------------------------------------------------------- LoCoMo


@dataclass(frozen=True)
class DialogTurn:
    """One dialog turn of a LoCoMo conversation: the paper's retrieval unit."""

    conversation: str
    session: int
    session_date: str
    """ISO datetime (``2023-05-08T13:56:00``) or date when parseable, else the raw string."""
    session_date_raw: str
    speaker: str
    dia_id: str
    text: str
    blip_caption: str | None
    turn_index: int
    """0-based position in the conversation, sessions in numeric order."""


@dataclass(frozen=True)
class LocomoQuestion:
    """One LoCoMo question with its normalised evidence dialog IDs (never empty)."""

    conversation: str
    question: str
    answer: str | None
    category: int
    evidence: list[str]
    adversarial_answer: str | None = None


@dataclass
class LocomoDataset:
    """LoCoMo turns and questions, with a count of every data fault repaired or skipped."""

    turns: list[DialogTurn]
    questions: list[LocomoQuestion]
    faults: dict[str, int] = field(default_factory=dict)


def load_locomo(path: str | Path) -> LocomoDataset:
    """The LoCoMo turns and questions of a ``locomo10.json``-style file, faults normalised."""
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"LoCoMo file not found: {source}")
    try:
        samples = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{source}: invalid JSON ({exc.msg})") from None
    if not isinstance(samples, list):
        raise ValidationError(f"{source}: expected a JSON list of conversations")
    faults: Counter[str] = Counter()
    turns: list[DialogTurn] = []
    questions: list[LocomoQuestion] = []
    for sample in samples:
        conversation_id = str(sample["sample_id"])
        conversation_turns = _locomo_turns(conversation_id, sample["conversation"], faults)
        known_ids = {turn.dia_id for turn in conversation_turns}
        turns.extend(conversation_turns)
        for qa in sample.get("qa", []):
            question = _locomo_question(conversation_id, qa, known_ids, faults)
            if question is not None:
                questions.append(question)
    fault_counts = {kind: faults[kind] for kind in LOCOMO_FAULT_KINDS}
    logger.info(
        "loaded LoCoMo %s: %d turns, %d questions, faults %s",
        source,
        len(turns),
        len(questions),
        {k: v for k, v in fault_counts.items() if v},
    )
    return LocomoDataset(turns=turns, questions=questions, faults=fault_counts)


def locomo_unit_text(turn: DialogTurn) -> str:
    """The paper's memory-unit text: ``<speaker> said, "<text>"`` [`` and shared <caption>``]."""
    text = f'{turn.speaker} said, "{turn.text}"'
    if turn.blip_caption:
        text += f" and shared {turn.blip_caption}"
    return text


_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_CANONICAL_DIA_ID = re.compile(r"D[1-9]\d*:[1-9]\d*")
_DATE_TIME = re.compile(
    r"(?:(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+)?(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})",
    re.IGNORECASE,
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}


def parse_session_date(raw: str) -> str | None:
    """The ISO form of a LoCoMo date (``"1:56 pm on 8 May, 2023"`` -> ``2023-05-08T13:56:00``)."""
    match = _DATE_TIME.fullmatch(raw.strip())
    if match is None:
        return None
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        return None
    try:
        if hour is None:
            return date(int(year), month, int(day)).isoformat()
        if not 1 <= int(hour) <= 12:
            return None
        hour_24 = int(hour) % 12 + (12 if half.lower() == "p" else 0)
        return datetime(int(year), month, int(day), hour_24, int(minute)).isoformat()
    except ValueError:
        return None


def _locomo_turns(
    conversation_id: str, conversation: dict[str, Any], faults: Counter[str]
) -> list[DialogTurn]:
    sessions = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.fullmatch(key)))
    turns: list[DialogTurn] = []
    for session in sessions:
        raw_date = str(conversation.get(f"session_{session}_date_time") or "")
        iso_date = parse_session_date(raw_date)
        if iso_date is None:
            faults["session_date_unparsed"] += 1
            logger.warning("%s session %d: unparsed date %r", conversation_id, session, raw_date)
        for turn in conversation[f"session_{session}"]:
            raw_id = str(turn["dia_id"])
            dia_id = _normalise_dia_id(raw_id, Counter())
            if dia_id is None:
                raise ValidationError(
                    f"{conversation_id}: turn dia_id {raw_id!r} is not a dialog ID", field="dia_id"
                )
            if dia_id != raw_id:
                faults["turn_dia_id_normalised"] += 1
            caption = turn.get("blip_caption")
            turns.append(
                DialogTurn(
                    conversation=conversation_id,
                    session=session,
                    session_date=iso_date if iso_date is not None else raw_date,
                    session_date_raw=raw_date,
                    speaker=str(turn["speaker"]),
                    dia_id=dia_id,
                    text=str(turn["text"]),
                    blip_caption=str(caption) if caption else None,
                    turn_index=len(turns),
                )
            )
    return turns


def _locomo_question(
    conversation_id: str, qa: dict[str, Any], known_ids: set[str], faults: Counter[str]
) -> LocomoQuestion | None:
    category = int(qa["category"])
    if category not in CATEGORY_NAMES:
        raise ValidationError(
            f"{conversation_id}: unknown question category {category}", field="category"
        )
    raw_evidence = [str(e) for e in qa.get("evidence") or []]
    if not raw_evidence:
        faults["questions_without_evidence"] += 1
        return None
    evidence: list[str] = []
    for dia_id in _normalise_evidence(raw_evidence, faults):
        if dia_id not in known_ids:
            faults["evidence_not_found"] += 1
        elif dia_id in evidence:
            faults["evidence_duplicate"] += 1
        else:
            evidence.append(dia_id)
    if not evidence:
        faults["questions_evidence_all_dropped"] += 1
        return None
    return LocomoQuestion(
        conversation=conversation_id,
        question=str(qa["question"]),
        answer=_answer_text(qa.get("answer"), faults),
        category=category,
        evidence=evidence,
        adversarial_answer=_answer_text(qa.get("adversarial_answer"), faults),
    )


def _answer_text(value: Any, faults: Counter[str]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    faults["answer_not_string"] += 1
    return str(value)


def _normalise_evidence(raw_evidence: list[str], faults: Counter[str]) -> list[str]:
    ids: list[str] = []
    for entry in raw_evidence:
        pieces = [p for p in re.split(r"[;,\s]+", entry) if p]
        if len(pieces) > 1:
            faults["evidence_split"] += 1
        for piece in pieces or [entry]:
            dia_id = _normalise_dia_id(piece, faults)
            if dia_id is None:
                faults["evidence_unparseable"] += 1
            else:
                ids.append(dia_id)
    return ids


def _normalise_dia_id(raw: str, faults: Counter[str]) -> str | None:
    if _CANONICAL_DIA_ID.fullmatch(raw):
        return raw
    match = _DIA_ID.fullmatch(raw.strip())
    if match is None:
        return None
    session, turn = int(match.group(1)), int(match.group(2))
    if session == 0 or turn == 0:
        return None
    if raw.strip().startswith("D:"):
        faults["evidence_extra_colon"] += 1
    if match.group(1) != str(session) or match.group(2) != str(turn):
        faults["evidence_leading_zero"] += 1
    return f"D{session}:{turn}"


# --------------------------------------------------------------------------- CrossWOZ

#: The slots a free-text lookup names (protocol 2 of the datasets README).
LOOKUP_SLOTS = ("name", "dishes", "facilities")


@dataclass
class CrossWozQuery:
    """One user turn with the database query the system made for it."""

    qid: str
    type: str
    text: str
    slots: dict[str, str]
    where: dict[str, Any] | None
    gold: list[str]


@dataclass
class CrossWozDataset:
    """CrossWOZ's entities (type -> name -> attributes) and the queries of one split."""

    entities: dict[str, dict[str, dict[str, Any]]]
    queries: list[CrossWozQuery]
    sha256: str
    faults: dict[str, int] = field(default_factory=dict)

    def lookups(self) -> list[tuple[CrossWozQuery, str, list[str]]]:
        """Protocol 2: ``(query, slot kind, gold names)`` of the queries whose slots hold
        exactly one of name / dishes / facilities, named verbatim in the text. Gold: the
        selected entities for a name, every entity whose list holds the dish or facility
        otherwise; queries with no gold entity are left out (counted in ``faults``)."""
        out = []
        for q in self.queries:
            kinds = [k for k in q.slots if k in LOOKUP_SLOTS]
            if len(kinds) != 1 or q.slots[kinds[0]] not in q.text:
                continue
            kind, value = kinds[0], q.slots[kinds[0]]
            if kind == "name":
                gold = sorted(set(q.gold))
            else:
                gold = sorted(name for name, attrs in self.entities.get(q.type, {}).items()
                              if value in (attrs.get(kind) or []))
            if gold:
                out.append((q, kind, gold))
        return out


def load_crosswoz(path: str | Path, split: str = "val") -> CrossWozDataset:
    """Parse ``entities.jsonl`` and ``queries-<split>.jsonl`` of a CrossWOZ directory."""
    root = Path(path)
    entities_path, queries_path = root / "entities.jsonl", root / f"queries-{split}.jsonl"
    for needed in (entities_path, queries_path):
        if not needed.is_file():
            raise FileNotFoundError(f"CrossWOZ file not found: {needed}")
    digest = hashlib.sha256()
    entities: dict[str, dict[str, dict[str, Any]]] = {}
    faults: Counter[str] = Counter()
    raw = entities_path.read_bytes()
    digest.update(raw)
    for _, record in _jsonl_records(raw.decode("utf-8"), entities_path):
        by_name = entities.setdefault(str(record["type"]), {})
        if record["name"] in by_name:
            faults["entities_duplicate_name"] += 1
            continue
        by_name[str(record["name"])] = dict(record["attributes"])
    raw = queries_path.read_bytes()
    digest.update(raw)
    queries = []
    for number, record in _jsonl_records(raw.decode("utf-8"), queries_path):
        queries.append(CrossWozQuery(
            qid=f"{record['dialog']}:{record['turn']}:{number}", type=str(record["type"]),
            text=str(record["text"]), slots={k: str(v) for k, v in record["slots"].items()},
            where=record.get("where"), gold=[str(g) for g in record.get("gold", [])]))
    faults["queries_where_unparsed"] = sum(1 for q in queries if q.where is None)
    return CrossWozDataset(entities, queries, digest.hexdigest(), dict(faults))
