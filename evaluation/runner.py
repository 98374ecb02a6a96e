"""Retrieval evaluation runners: ingest a benchmark through ``Memory``, search, score.

Both runners put the data into a memory directory (``workdir``) with ``Memory.create_many``,
then, for each mode, open the memory afresh (its own query cache and fusion settings), run
every query through the product's search and score the ranked gold-comparable IDs:

- :func:`run_beir`: any BEIR-format dataset; documents are :class:`~evaluation.types.Document`
  entities; metrics are trec_eval's (nDCG@10, recall@10/100, MRR@10, MAP ...).
- :func:`run_locomo`: LoCoMo; dialog turns go into the conversation log
  (``Memory.add_messages``, the bundled ``Message`` type) and are searched with its search
  profile; each question searches its own conversation only (``where={"conversation": ...}``);
  the metric is evidence recall@k over dialog units, averaged over questions, overall and per
  category. (:class:`~evaluation.types.DialogTurn` holds the paper's unit for
  ``evaluation.compare``.)

Ingest is cached: the workdir keeps the entities and the embedding cache, and a manifest
(:data:`MANIFEST`) records what was ingested; a re-run (another mode, another fusion setting)
finds the data there and does not ingest, nor embed, again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from statistics import fmean
from typing import Any

from dmf_hybrid import Entity, Hit, Memory, Settings
from dmf_hybrid._internal.analyzers import DEFAULT_ANALYZER
from dmf_hybrid._internal.bundled import bundled_types
from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from dmf_hybrid._internal.conversations import MESSAGE_TYPE
from dmf_hybrid._internal.embeddings import Embedder
from dmf_hybrid._internal.errors import ValidationError
from evaluation import datasets as ds
from evaluation.metrics import evaluate, recall_fraction, run_from_rankings
from evaluation.types import (
    DIALOG_TURN_EMBED,
    DIALOG_TURN_IDENTITY,
    DIALOG_TURN_TYPE,
    DOCUMENT_EMBED,
    DOCUMENT_IDENTITY,
    DOCUMENT_TYPE,
    DialogTurn,
    Document,
)

logger = logging.getLogger(__name__)

MODES = ("vector", "keyword", "hybrid")
#: Modes run by ``--mode all``, in this order; the headline figures are the last one's.
ALL_MODES = ("keyword", "vector", "hybrid")
HEADLINE_MODE = "hybrid"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORK_DIR = RESULTS_DIR / "work"
MANIFEST = "eval-ingest.json"
#: Rows per ``create_many`` call: small enough for the progress bar to move while embedding.
INGEST_SLICE = 256
BEIR_DEPTH = 100
BEIR_CURVE = (1, 2, 3, 5, 10, 20, 30, 50, 100)
LOCOMO_KS = (5, 10, 25, 50)
LOCOMO_DEPTH = 50
LOCOMO_CURVE = (1, 2, 3, 5, 10, 15, 20, 25, 30, 40, 50)


@dataclass(frozen=True)
class RunOptions:
    """How to run an evaluation (the CLI's options)."""

    modes: tuple[str, ...] = ALL_MODES
    k: int = 10
    """The main cutoff (nDCG@k, recall@k, MRR@k); searches fetch at least the curve depth."""
    rrf_k: int | None = None
    """Reciprocal rank fusion constant; None = the type's profile, else the memory's (60)."""
    fusion: str | None = None
    """Fusion method of hybrid search (``dmf_hybrid._internal.search.fusion``); None = the type's
    profile, else the memory's default."""
    analyzer: str | None = None
    """Keyword analyzer the evaluation types are defined with; None = the default."""
    weights: Mapping[str, float] | None = None
    """Fusion weight per leg (``{"vector": w, "keyword": w}``); None = the type's profile,
    else the fusion's defaults."""
    workdir: Path | None = None
    """Memory directory reused across runs; None = ``results/work/<dataset hash>``."""
    embedder: str = DEFAULT_EMBEDDER
    """An ``embedder`` setting (default: the product's): ``"minilm-onnx"``, ``"minilm"``,
    ``"m3e-small"``, ``"e5-small"``, ``"hash"`` or a model directory
    (``dmf_hybrid._internal.embeddings.embedder_named``)."""
    threads: int | None = None
    """Threads of the model's runtime, torch or ONNX (None = the runtime's default)."""
    context: int | None = None
    """LoCoMo: embed each turn after the texts of up to this many preceding turns of its
    session (the ``Message`` type's group context); None = the type's (1); 0 = the turn alone
    (the paper's unit)."""
    neighbour_weight: float | None = None
    """LoCoMo: the share of the better score of the turns right before and after a turn in its
    session that the turn gains (the profile's ordered-neighbour support); None = the type's
    (0.5); 0 = off."""
    query_stopwords: bool | None = None
    """Drop English stopwords (NLTK's list: question words, pronouns, auxiliaries) from each
    query before searching (both legs); None = the type's profile (``query_terms``)."""
    limit: int | None = None
    """Evaluate only the first ``limit`` queries (quick looks; the figures are then partial)."""
    progress: bool = True


@dataclass
class IngestStats:
    """What ingesting cost, or that it was skipped because the workdir had the data."""

    entities: int
    skipped: bool
    seconds: float
    per_second: float | None
    first_ingest: dict[str, Any] = field(default_factory=dict)
    created: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"entities": self.entities, "created": self.created, "skipped": self.skipped,
                "ingest_s": round(self.seconds, 3),
                "embed_throughput_per_s": None if self.per_second is None
                else round(self.per_second, 2), "first_ingest": self.first_ingest}


@dataclass
class ModeRun:
    """One mode's ranked gold-comparable IDs per query and its per-query latencies (ms)."""

    mode: str
    rankings: dict[str, list[str]]
    latencies_ms: list[float]
    index_load_s: float
    plain_latencies_ms: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- shared


def make_embedder(name: str, threads: int | None = None) -> Embedder:
    """The embedder an option names (one per process: the model loads once)."""
    from dmf_hybrid._internal.embeddings import embedder_named

    return embedder_named(name, num_threads=threads, onnx_threads=threads)


def default_workdir(dataset_sha256: str, variant: str = "") -> Path:
    """``results/work/<hash>[-<variant>]``, made git-ignored (workdirs are large and local)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    ignore = WORK_DIR / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# memory directories of evaluation runs (local cache)\n*\n")
    return WORK_DIR / (dataset_sha256[:16] + (f"-{variant}" if variant else ""))


def code_version() -> str:
    """``git describe --always --dirty`` of the checkout, else the package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root,
                             capture_output=True, text=True, timeout=10, check=True)
        return f"git:{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"dmf-hybrid {version('dmf-hybrid')}"
        except PackageNotFoundError:
            return "unknown"


def open_memory(workdir: Path, embedder: Embedder, rrf_k: int | None,
                fusion: str | None = None) -> Memory:
    """The memory in ``workdir`` with this embedder (fusion constant ``rrf_k`` and fusion
    method ``fusion`` if given)."""
    overrides: dict[str, Any] = {"rrf_k": rrf_k, "fusion": fusion}
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    return Memory.open(workdir, embedder=embedder, settings=settings)


def _tqdm(iterable: Any = None, **kwargs: Any) -> Any:
    from tqdm import tqdm

    return tqdm(iterable, **kwargs)


def ingest(mem: Memory, type_name: str, rows: Sequence[Any], *, dataset_sha256: str,
           variant: str = "", progress: bool = True,
           create: Callable[[Sequence[Any]], list[Entity]] | None = None) -> IngestStats:
    """Create ``rows`` as entities of ``type_name`` unless the memory already holds them all
    (``create``: how a slice of rows is written; default ``create_many``).

    The check is the workdir's manifest (same dataset hash, variant, type and count) plus the
    live count in DuckDB; a partial earlier ingest resumes (existing identities are no-ops).
    A workdir holds one variant: the same identities with other data would not be updated.
    """
    manifest_path = mem.path / MANIFEST if mem.path is not None else None
    manifest: dict[str, Any] = {}
    if manifest_path is not None and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
    entry = manifest.get(type_name, {})
    if entry and entry.get("variant", "") != variant:
        raise ValidationError(f"{mem.path} holds the {type_name} variant "
                              f"{entry.get('variant', '')!r}, not {variant!r}: use another "
                              "workdir", field="workdir")
    if (entry.get("dataset_sha256") == dataset_sha256 and entry.get("entities") == len(rows)
            and mem.count(type_name) == len(rows)):
        logger.info("%s: %d entities already ingested, skipping", type_name, len(rows))
        return IngestStats(len(rows), True, 0.0, None, entry)
    bar = _tqdm(total=len(rows), desc=f"ingest {type_name}", unit="row", disable=not progress)
    start = time.perf_counter()
    created = 0
    try:
        for i in range(0, len(rows), INGEST_SLICE):
            part = rows[i:i + INGEST_SLICE]
            if create is not None:
                entities = create(part)
                bar.update(len(part))
            else:
                entities = mem.create_many(type_name, part, progress=bar.update,
                                           actor="evaluation", reason="benchmark ingest")
            created += sum(1 for e in entities if e.created)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    # a resumed ingest only embeds what it creates: the throughput counts those
    stats = IngestStats(len(rows), False, seconds, created / seconds if seconds else None,
                        created=created)
    if manifest_path is not None:
        manifest[type_name] = {
            "dataset_sha256": dataset_sha256, "variant": variant, "entities": len(rows),
            "created": created,
            "ingest_s": round(seconds, 3),
            "embed_throughput_per_s": None if stats.per_second is None
            else round(stats.per_second, 2),
            "model_id": mem.engine.embedder.model_id,
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return stats


def define_types(mem: Memory, analyzer: str | None = None) -> None:
    """Register (idempotently) the evaluation entity types (keyword ``analyzer`` if given)."""
    mem.define(Document, identity=list(DOCUMENT_IDENTITY), embed=DOCUMENT_EMBED,
               name=DOCUMENT_TYPE, analyzer=analyzer)
    mem.define(DialogTurn, identity=list(DIALOG_TURN_IDENTITY), embed=DIALOG_TURN_EMBED,
               name=DIALOG_TURN_TYPE, analyzer=analyzer)


def run_queries(mem: Memory, type_name: str, queries: Sequence[tuple[str, str]], *,
                mode: str, depth: int, key_of: Callable[[Hit], str],
                where_of: Callable[[str], Mapping[str, Any] | None] | None = None,
                options: RunOptions | None = None, plain: bool = False,
                progress: bool = True,
                reference_of: Callable[[str], dt.datetime | None] | None = None) -> ModeRun:
    """Search every ``(query_id, text)``; the ranked keys (``key_of`` each hit) per query.

    Searches run with the type's search profile and the overrides ``options`` gives (its
    ``fusion``, ``rrf_k``, ``weights``, ``query_stopwords``, ``neighbour_weight``). ``plain``:
    also time each query as a plain search (no profile, no override) right after it, so the
    two latencies are measured side by side (``ModeRun.plain_latencies_ms``).
    ``reference_of``: the time a query is asked at (its time phrases are read against it).
    """
    overrides = search_overrides(options or RunOptions())
    start = time.perf_counter()
    # the first search loads the keyword index and the vector mirror: timed apart
    mem.search(type_name, "warm up", k=1, mode="keyword")
    index_load_s = time.perf_counter() - start
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    plain_latencies: list[float] = []
    for query_id, text in _tqdm(queries, desc=f"search {mode}", unit="q", disable=not progress):
        if not text.strip():
            rankings[query_id] = []  # an empty query cannot be searched: scores 0
            continue
        where = where_of(query_id) if where_of is not None else None
        asked = reference_of(query_id) if reference_of is not None else None
        began = time.perf_counter()
        if overrides:
            result = mem.engine.search(mem.tenant, type_name, text, where=where, k=depth,
                                       mode=mode, reference_time=asked, **overrides)
        else:
            result = mem.search(type_name, text, where=where, k=depth, mode=mode,
                                reference_time=asked)
        latencies.append((time.perf_counter() - began) * 1000)
        if plain:
            began = time.perf_counter()
            mem.engine.search(mem.tenant, type_name, text, where=where, k=depth, mode=mode,
                              profile=False, reference_time=asked)
            plain_latencies.append((time.perf_counter() - began) * 1000)
        rankings[query_id] = list(dict.fromkeys(key_of(hit) for hit in result.hits))
    return ModeRun(mode, rankings, latencies, index_load_s, plain_latencies)


def search_overrides(options: RunOptions) -> dict[str, Any]:
    """The explicit search arguments the options give (none: the type's profile decides)."""
    given = {"fusion": options.fusion, "rrf_k": options.rrf_k, "weights": options.weights,
             "neighbour_weight": options.neighbour_weight,
             "query_terms": None if options.query_stopwords is None
             else "drop_stopwords" if options.query_stopwords else "all"}
    return {k: v for k, v in given.items() if v is not None}


def field_key(name: str) -> Callable[[Hit], str]:
    """A hit's key: the value of one of its fields, as a string."""
    return lambda hit: str(getattr(hit.entity.data, name))


def latency_summary(latencies: Sequence[float]) -> dict[str, float | None]:
    """p50 / p95 / p99 / mean / max of per-query latencies in ms (None when there are none)."""
    if not latencies:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "max": None}
    ordered = sorted(latencies)
    return {"p50": round(_percentile(ordered, 50), 3), "p95": round(_percentile(ordered, 95), 3),
            "p99": round(_percentile(ordered, 99), 3), "mean": round(fmean(ordered), 3),
            "max": round(ordered[-1], 3)}


def _percentile(ordered: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(ordered) - 1) * pct / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _check_options(options: RunOptions) -> None:
    unknown = [m for m in options.modes if m not in MODES]
    if unknown or not options.modes:
        raise ValidationError(f"modes must be among {', '.join(MODES)}", field="mode")
    if options.k < 1:
        raise ValidationError("k must be a positive integer", field="k")
    if options.neighbour_weight is not None and not (
            math.isfinite(options.neighbour_weight) and options.neighbour_weight >= 0):
        raise ValidationError("neighbour_weight must be a finite number >= 0",
                              field="neighbour_weight")
    if options.context is not None and options.context < 0:
        raise ValidationError("context must be >= 0", field="context")
    if options.weights is not None:
        bad = sorted(set(options.weights) - {"vector", "keyword", "exact"})
        if bad or any(not math.isfinite(w) or w < 0 for w in options.weights.values()):
            raise ValidationError("weights take vector=<w>,keyword=<w>,exact=<w> with finite "
                                  "w >= 0", field="weights")


def machine_load() -> dict[str, Any]:
    """CPU count and 1-minute load average: timings mean little on a busy machine."""
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "loadavg_1m": load}


def _config(options: RunOptions, embedder: Embedder, data_path: Path, sha256: str,
            faults: Mapping[str, int], extra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "model": embedder.model_id, "modes": list(options.modes), "k": options.k,
        "rrf_k": options.rrf_k if options.rrf_k is not None else Settings().rrf_k,
        "fusion": options.fusion or Settings().fusion,
        "analyzer": options.analyzer or DEFAULT_ANALYZER,
        "weights": dict(options.weights) if options.weights is not None else None,
        "dataset_path": str(data_path), "dataset_sha256": sha256,
        "code_version": code_version(), "data_faults": dict(faults),
        "query_stopwords": options.query_stopwords, "query_limit": options.limit,
        "machine_at_end": machine_load(), **extra,
    }


def _headline(modes: Mapping[str, Any], order: Sequence[str]) -> str:
    return HEADLINE_MODE if HEADLINE_MODE in modes else order[-1]


def _timings(ingest_stats: IngestStats, runs: Mapping[str, ModeRun], headline: str,
             model_load_s: float | None) -> dict[str, Any]:
    head = latency_summary(runs[headline].latencies_ms)
    return {**ingest_stats.as_dict(), "model_load_s": model_load_s,
            "index_load_s": round(runs[headline].index_load_s, 3),
            "query_p50_ms": head["p50"], "query_p95_ms": head["p95"],
            "query_latency_mode": headline}


def begin(options: RunOptions | None) -> tuple[RunOptions, dict[str, Any]]:
    """The checked options of a run (defaults if None) and the machine's load at its start."""
    options = options or RunOptions()
    _check_options(options)
    return options, machine_load()


def ready_embedder(options: RunOptions, embedder: Embedder | None
                   ) -> tuple[Embedder, float | None]:
    """The run's embedder (the given one, else the option's), loaded; and its load seconds."""
    embedder = embedder or make_embedder(options.embedder, options.threads)
    return embedder, _load_model(embedder)


def _load_model(embedder: Embedder) -> float | None:
    load = getattr(embedder, "load", None)
    if not callable(load):
        return None
    start = time.perf_counter()
    load()
    return round(time.perf_counter() - start, 3)


# --------------------------------------------------------------------------- BEIR

BEIR_METRICS_AT = ("ndcg", "recall", "mrr", "map", "precision")


def beir_metric_names(k: int) -> list[str]:
    """The metrics a BEIR run reports: the families at ``k``, recall@100 and MAP (depth 100)."""
    names = [f"{family}@{k}" for family in BEIR_METRICS_AT]
    names += [f"recall@{BEIR_DEPTH}", "map"]
    return list(dict.fromkeys(names))


def run_beir(data: str | Path, split: str = "test", options: RunOptions | None = None, *,
             embedder: Embedder | None = None) -> dict[str, Any]:
    """Ingest and evaluate a BEIR-format dataset; the results document (see report.py)."""
    options, machine_at_start = begin(options)
    path = Path(data)
    dataset = ds.load_beir(path, split)
    corpus_ids = {d.id for d in dataset.docs}
    faults = {
        "documents_empty": sum(1 for d in dataset.docs if not (d.title or d.text).strip()),
        "queries_empty": sum(1 for t in dataset.queries.values() if not t.strip()),
        "qrels_documents_not_in_corpus": sum(
            1 for judged in dataset.qrels.values() for doc in judged if doc not in corpus_ids),
    }
    embedder, model_load_s = ready_embedder(options, embedder)
    workdir = options.workdir or default_workdir(dataset.sha256)
    rows = [Document(doc_id=d.id, title=d.title, text=d.text) for d in dataset.docs]
    with open_memory(workdir, embedder, options.rrf_k, options.fusion) as mem:
        define_types(mem, options.analyzer)
        stats = ingest(mem, DOCUMENT_TYPE, rows, dataset_sha256=dataset.sha256,
                       progress=options.progress)
    queries = list(dataset.queries.items())[: options.limit]
    qrels = {qid: dataset.qrels[qid] for qid, _ in queries}
    depth = max(options.k, BEIR_DEPTH)
    names = beir_metric_names(options.k)
    curve = sorted({*BEIR_CURVE, options.k})
    modes: dict[str, Any] = {}
    runs: dict[str, ModeRun] = {}
    for mode in options.modes:
        with open_memory(workdir, embedder, options.rrf_k, options.fusion) as mem:
            run = run_queries(mem, DOCUMENT_TYPE, queries, mode=mode, depth=depth,
                              key_of=field_key("doc_id"), options=options,
                              progress=options.progress)
        runs[mode] = run
        scored = run_from_rankings(run.rankings)
        modes[mode] = {
            "metrics": _rounded(evaluate(qrels, scored, names)),
            "recall_curve": {name.split("@")[1]: v for name, v in _rounded(
                evaluate(qrels, scored, [f"recall@{k}" for k in curve])).items()},
            "latency_ms": latency_summary(run.latencies_ms),
            "index_load_s": round(run.index_load_s, 3),
        }
    headline = _headline(modes, options.modes)
    return {
        "benchmark": "beir",
        "dataset": {"name": dataset.name, "path": str(path), "split": split,
                    "sha256": dataset.sha256, "documents": len(dataset.docs),
                    "queries": len(queries)},
        "metrics": modes[headline]["metrics"],
        "headline_mode": headline,
        "modes": modes,
        "config": _config(options, embedder, path, dataset.sha256, faults,
                          {"split": split, "workdir": str(workdir), "search_depth": depth,
                           "machine_at_start": machine_at_start}),
        "timings": _timings(stats, runs, headline, model_load_s),
        "_latencies_ms": {m: r.latencies_ms for m, r in runs.items()},
    }


def _rounded(values: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in values.items()}


# --------------------------------------------------------------------------- LoCoMo


def locomo_turn_rows(dataset: ds.LocomoDataset, context: int = 0) -> list[DialogTurn]:
    """The ``DialogTurn`` entities of a LoCoMo dataset (paper unit text; dates typed).

    ``context`` > 0 fills each turn's ``context`` with the unit texts of up to that many
    preceding turns of the same conversation and session, oldest first.
    """
    if context < 0:
        raise ValidationError("context must be >= 0", field="context")
    rows: list[DialogTurn] = []
    for i, turn in enumerate(dataset.turns):
        before = [dataset.turns[j] for j in range(max(0, i - context), i)]
        before = [t for t in before
                  if (t.conversation, t.session) == (turn.conversation, turn.session)]
        rows.append(DialogTurn(
            conversation=turn.conversation, session=turn.session,
            session_date=_parse_date(turn.session_date), speaker=turn.speaker,
            dia_id=turn.dia_id, text=turn.text, blip_caption=turn.blip_caption,
            turn_index=turn.turn_index, unit_text=ds.locomo_unit_text(turn),
            context=" ".join(ds.locomo_unit_text(t) for t in before)))
    return rows


def _parse_date(value: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None  # counted by the loader as session_date_unparsed


def locomo_messages(dataset: ds.LocomoDataset) -> list[dict[str, Any]]:
    """The dataset's turns as conversation-log messages (``add_messages``), each with its
    ``conversation``; the paper's unit text is what ``Message`` embeds: ``<speaker> said,
    "<text>"`` (a shared image's caption inside the quotes, `` and shared <caption>``)."""
    return [{"conversation": t.conversation, "speaker": t.speaker,
             "text": t.text + (f" and shared {t.blip_caption}" if t.blip_caption else ""),
             "turn": t.turn_index, "session": t.session,
             "time": _parse_date(t.session_date)} for t in dataset.turns]


def question_times(dataset: ds.LocomoDataset) -> dict[str, dt.datetime]:
    """When each conversation's questions are asked: its last session's date (the questions
    come after the conversation), so "last year" in a question is read against it."""
    last: dict[str, dt.datetime] = {}
    for turn in dataset.turns:
        when = _parse_date(turn.session_date)
        if when is not None and (turn.conversation not in last
                                 or when > last[turn.conversation]):
            last[turn.conversation] = when
    return last


def message_variant(context: int | None) -> str:
    """The workdir variant of a LoCoMo ingest: a hash of what the ``Message`` definition
    stores (fields, embed template, group context, grounded dates: a change needs the rows
    written again; its search profile does not) and the context."""
    typedef = bundled_types()[MESSAGE_TYPE]
    stored = typedef.model_dump(mode="json", include={"fields", "embed", "context", "dates"})
    digest = hashlib.sha256(json.dumps(stored, sort_keys=True).encode()).hexdigest()[:8]
    return f"message-{digest}" + (f"-context{context}" if context is not None else "")


def define_message_type(mem: Memory, context: int | None, analyzer: str | None) -> None:
    """Register the bundled ``Message`` type (its group context ``context`` turns if given:
    0 drops it; its keyword ``analyzer`` if given)."""
    typedef = bundled_types()[MESSAGE_TYPE]
    changes: dict[str, Any] = {}
    if context is not None:
        assert typedef.context is not None
        changes["context"] = (None if context == 0 else
                              typedef.context.model_copy(update={"turns": context}))
    if analyzer is not None:
        changes["analyzer"] = analyzer
    mem.define_type(typedef.model_copy(update=changes).check() if changes else typedef)


def _add_messages(mem: Memory) -> Callable[[Sequence[Any]], list[Entity]]:
    def add(rows: Sequence[Any]) -> list[Entity]:
        out: list[Entity] = []
        for conversation, group in groupby(rows, key=lambda r: r["conversation"]):
            out += mem.add_messages(
                conversation, [{k: v for k, v in r.items() if k != "conversation"}
                               for r in group], actor="evaluation", reason="benchmark ingest")
        return out
    return add


def run_locomo(data: str | Path, options: RunOptions | None = None, *,
               embedder: Embedder | None = None) -> dict[str, Any]:
    """Ingest LoCoMo into the conversation log and evaluate it (evidence recall@k per
    question); the results document. Searches use the ``Message`` type's search profile
    unless the options override it; the hybrid mode also times a plain hybrid search (no
    profile) beside each query."""
    options, machine_at_start = begin(options)
    path = Path(data)
    dataset = ds.load_locomo(path)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    embedder, model_load_s = ready_embedder(options, embedder)
    variant = message_variant(options.context)
    workdir = options.workdir or default_workdir(sha256, variant)
    rows = locomo_messages(dataset)
    with open_memory(workdir, embedder, None) as mem:
        define_message_type(mem, options.context, options.analyzer)
        stats = ingest(mem, MESSAGE_TYPE, rows, dataset_sha256=sha256, variant=variant,
                       progress=options.progress, create=_add_messages(mem))
        typedef = mem.get_type(MESSAGE_TYPE).typedef
    dia_ids = {(t.conversation, t.turn_index): t.dia_id for t in dataset.turns}
    asked_at = question_times(dataset)
    questions = dataset.questions[: options.limit]
    qids = [f"q{i}" for i in range(len(questions))]
    by_id = dict(zip(qids, questions, strict=True))
    depth = max(options.k, LOCOMO_DEPTH)
    ks = sorted({*LOCOMO_KS, options.k})
    curve = sorted({*LOCOMO_CURVE, options.k})
    modes: dict[str, Any] = {}
    runs: dict[str, ModeRun] = {}
    for mode in options.modes:
        with open_memory(workdir, embedder, None) as mem:
            run = run_queries(
                mem, MESSAGE_TYPE, [(q, by_id[q].question) for q in qids], mode=mode,
                depth=depth, key_of=lambda h: dia_ids[h.entity.data.conversation,
                                                      h.entity.data.turn],
                where_of=lambda q: {"conversation": by_id[q].conversation},
                options=options, plain=mode == "hybrid", progress=options.progress,
                reference_of=lambda q: asked_at.get(by_id[q].conversation))
        runs[mode] = run
        modes[mode] = {
            **locomo_scores(by_id, run.rankings, ks, curve),
            "latency_ms": latency_summary(run.latencies_ms),
            "index_load_s": round(run.index_load_s, 3),
        }
        if run.plain_latencies_ms:
            plain = latency_summary(run.plain_latencies_ms)
            modes[mode]["plain_latency_ms"] = plain
            modes[mode]["p50_vs_plain"] = round(
                modes[mode]["latency_ms"]["p50"] / plain["p50"], 3) if plain["p50"] else None
    headline = _headline(modes, options.modes)
    return {
        "benchmark": "locomo",
        "dataset": {"name": path.stem, "path": str(path), "sha256": sha256,
                    "conversations": len({t.conversation for t in dataset.turns}),
                    "turns": len(dataset.turns), "questions": len(questions)},
        "metrics": modes[headline]["metrics"],
        "per_category": modes[headline]["per_category"],
        "headline_mode": headline,
        "modes": modes,
        "config": _config(options, embedder, path, sha256, dataset.faults,
                          {"workdir": str(workdir), "search_depth": depth,
                           "search_scope": "conversation",
                           "context_turns": typedef.context.turns if typedef.context else 0,
                           "neighbour_weight": options.neighbour_weight,
                           "profile": None if typedef.search is None
                           else typedef.search.model_dump(mode="json"),
                           "unit": "dialog turn (Message)",
                           "machine_at_start": machine_at_start}),
        "timings": _timings(stats, runs, headline, model_load_s),
        "_latencies_ms": {m: r.latencies_ms for m, r in runs.items()},
    }


def dialog_session(dia_id: str) -> str:
    """The session of a LoCoMo dialog ID: ``"D3:11"`` -> ``"3"``."""
    return dia_id.split(":", 1)[0].lstrip("D")


def session_scores(evidence: Sequence[str], ranked: Sequence[str], k: int
                   ) -> tuple[float, float]:
    """(session hit@k, all evidence sessions@k) of one question: whether the top ``k`` turns
    come from at least one / every session holding its evidence (1.0 or 0.0)."""
    wanted = {dialog_session(e) for e in evidence}
    got = {dialog_session(r) for r in ranked[:k]}
    return float(bool(wanted & got)), float(wanted <= got)


def locomo_scores(questions: Mapping[str, ds.LocomoQuestion],
                  rankings: Mapping[str, Sequence[str]], ks: Sequence[int],
                  curve: Sequence[int]) -> dict[str, Any]:
    """Evidence recall@k averaged over questions: overall, per category, and the curve; beside
    it the session-level figures others publish: session hit@k (a turn of an evidence session
    in the top k) and all-sessions@k (every evidence session there)."""
    per_question = {
        qid: {k: recall_fraction(q.evidence, rankings.get(qid, []), k) for k in curve}
        for qid, q in questions.items()}
    if not per_question:
        raise ValidationError("no question to evaluate", field="questions")
    sessions = {qid: {k: session_scores(q.evidence, rankings.get(qid, []), k) for k in ks}
                for qid, q in questions.items()}

    def means(ids: Sequence[str], cutoffs: Sequence[int]) -> dict[str, float]:
        return {f"recall@{k}": round(fmean(per_question[q][k] for q in ids), 6)
                for k in cutoffs}

    def session_means(ids: Sequence[str]) -> dict[str, float]:
        return {**{f"session_hit@{k}": round(fmean(sessions[q][k][0] for q in ids), 6)
                   for k in ks},
                **{f"all_sessions@{k}": round(fmean(sessions[q][k][1] for q in ids), 6)
                   for k in ks}}

    all_ids = sorted(per_question)
    per_category: dict[str, Any] = {}
    for number, name in sorted(ds.CATEGORY_NAMES.items()):
        ids = [q for q in all_ids if questions[q].category == number]
        if ids:
            per_category[name] = {"questions": len(ids), **means(ids, ks),
                                  **session_means(ids)}
    return {
        "metrics": means(all_ids, ks),
        "sessions": session_means(all_ids),
        "per_category": per_category,
        "recall_curve": {str(k): v for k, v in
                         ((k, means(all_ids, [k])[f"recall@{k}"]) for k in curve)},
    }
