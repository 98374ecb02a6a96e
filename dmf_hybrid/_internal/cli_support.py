"""What the ``dmf`` commands share: options, the memory they talk to, tables, JSON, ingest.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from wcwidth import wcswidth, wcwidth

from .client import MemoryClient
from .config import Settings, is_postgres_url, redact
from .errors import Conflict, DMFError, NotFound, PlanError, StoreLocked, ValidationError
from .protocol import MemoryAPI

MAX_CELL = 60
MAX_ERRORS_SHOWN = 10
MODEL_TICK_SECONDS = 0.25

DataOpt = Annotated[Path | None, typer.Option(
    "--data", help="Memory directory (default: the DMF_DATA_DIR setting, ./dmf-data).")]
UrlOpt = Annotated[str | None, typer.Option(
    "--url", help="Talk to a running server instead, e.g. http://127.0.0.1:8000.")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", help="API key for --url.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WhereOpt = Annotated[str | None, typer.Option(
    "--where", help='Filter as JSON, e.g. \'{"budget": {"$lte": 5000}}\'.')]
TenantOpt = Annotated[str | None, typer.Option(
    "--tenant", help="Only this tenant's types, entities, relations and audit chain.")]


# ---------------------------------------------------------------- plumbing


def settings_from(**overrides: Any) -> Settings:
    """Settings from DMF_* variables with the given (non-None) command-line values on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def target(data: Path | None, url: str | None, api_key: str | None,
           settings: Settings | None = None, *, create: bool = False) -> Iterator[MemoryAPI]:
    """A Memory on ``data`` or a MemoryClient on ``url``; errors become a message and exit code.

    Only a command that writes (``create=True``) may make a new memory directory: a read of a
    directory that does not exist fails and leaves nothing behind.
    """
    try:
        if url:
            client = MemoryClient(url, api_key=api_key)
            try:
                yield client
            finally:
                close = getattr(client, "close", None)
                if callable(close):
                    close()
            return
        from .memory import Memory  # start-up cost: DuckDB and Chroma, not needed with --url

        settings = settings or settings_from(data_dir=data)
        if not create and not Path(settings.data_dir).is_dir():
            raise fail(f"no memory at {settings.data_dir}\nhint: create one with `dmf define "
                       "FILE` or `dmf ingest`, or pass --data DIR (or --url URL)", 2)
        try:
            mem = Memory.open(settings.data_dir, settings=settings)
        except StoreLocked as exc:
            raise fail(
                f"{exc.message}\nhint: {settings.data_dir} is in use by another process "
                "(probably `dmf serve`); run this command with --url http://HOST:PORT "
                "(and --api-key KEY) to talk to that server.", 2) from None
        with mem:
            yield mem
    except PlanError as exc:
        for problem in exc.details.get("problems", []):
            typer.echo(f"  step {problem.get('step')} {problem.get('field') or ''}: "
                       f"{problem.get('problem')}"
                       + (f" ({problem['hint']})" if problem.get("hint") else ""), err=True)
        raise fail(f"{exc.code}: {exc.message}") from None
    except DMFError as exc:
        raise fail(f"{exc.code}: {exc.message}") from None


def to_jsonable(value: Any) -> Any:
    """Models, lists and dicts of them as JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    """Print a value as indented JSON."""
    typer.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False, default=str))


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: 2 per CJK character, 0 per combining mark."""
    width = wcswidth(text)
    return width if width >= 0 else sum(max(wcwidth(c), 0) for c in text)


def cell(value: Any) -> str:
    """A table cell: one line, at most MAX_CELL columns wide (cut with "…")."""
    text = value if isinstance(value, str) else json.dumps(to_jsonable(value),
                                                           ensure_ascii=False, default=str)
    text = " ".join(text.split())
    if display_width(text) <= MAX_CELL:
        return text
    kept, used = [], 0
    for char in text:
        used += max(wcwidth(char), 0)
        if used > MAX_CELL - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as a plain-text table aligned by display width (Chinese takes two columns)."""
    cells = [[cell(c) for c in row] for row in rows]
    widths = [max([display_width(h)] + [display_width(r[i]) for r in cells])
              for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v + " " * (w - display_width(v))
                         for v, w in zip(values, widths, strict=True)).rstrip()

    typer.echo(line(headers))
    typer.echo("  ".join("-" * w for w in widths))
    for row in cells:
        typer.echo(line(row))


def entity_data(entity: Any) -> dict[str, Any]:
    data = to_jsonable(entity.data)
    return data if isinstance(data, dict) else {}


def print_entities(entities: Sequence[Any]) -> None:
    """Print entities as a table: ID, type, version and their non-empty fields."""
    names: list[str] = []
    for entity in entities:
        for name, value in entity_data(entity).items():
            if value not in (None, [], "") and name not in names:
                names.append(name)
    rows = [[e.id, e.type, e.version] + [entity_data(e).get(n) for n in names]
            for e in entities]
    print_table(["id", "type", "v"] + names, rows)


def parse_json_option(text: str | None, name: str) -> Any:
    """A JSON command-line option, or a usage error naming it."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=name) from None


# ---------------------------------------------------------------- ingest


@dataclass
class Row:
    """One line of an ingest file: an entity (type None: the --type) or a link of keys."""

    line: int
    type: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    link: list[Any] | None = None


@dataclass
class Rows:
    """The rows of a file and the lines that are no row, with their reasons."""

    rows: list[Row] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)


def _row(number: int, value: Any, out: Rows) -> None:
    if not isinstance(value, dict):
        out.errors.append((number, "each line must be a JSON object"))
    elif set(value) == {"link"}:  # the indexes/examples layout: [from_key, relation, to_key]
        out.rows.append(Row(number, link=value["link"]))
    elif isinstance(value.get("data"), dict) and isinstance(value.get("type"), str) \
            and set(value) <= {"type", "data", "key"}:
        key = value.get("key")
        out.rows.append(Row(number, value["type"], value["data"],
                            key if isinstance(key, str) else None))
    else:
        out.rows.append(Row(number, None, value))


def read_rows(path: Path, fmt: str | None = None) -> Rows:
    """The rows of a JSONL or CSV file (CSV: empty cells omitted, JSON-looking cells parsed).

    A JSONL line may be the entity's fields or ``{"type": ..., "data": {...}}`` (the layout of
    ``indexes/examples/*.jsonl``); a line that is not a JSON object is an error of that line.
    """
    kind = fmt or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    if kind not in ("csv", "jsonl"):
        raise ValidationError("format must be csv or jsonl", field="format")
    out = Rows()
    with path.open(encoding="utf-8", newline="") as handle:
        if kind == "csv":
            for number, record in enumerate(csv.DictReader(handle), 2):
                row: dict[str, Any] = {}
                for key, text in record.items():
                    if key is None or text is None or text == "":
                        continue
                    if text[:1] in "[{":
                        try:
                            row[key] = json.loads(text)
                            continue
                        except json.JSONDecodeError:
                            pass
                    row[key] = text
                out.rows.append(Row(number, None, row))
            return out
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                out.errors.append((number, f"not valid JSON: {exc}"))
                continue
            _row(number, value, out)
    return out


def load_model_with_bar(mem: MemoryAPI, progress: bool) -> None:
    """Load a local memory's embedding model, a bar ticking while it loads (seconds)."""
    engine = getattr(mem, "engine", None)
    embedder = getattr(engine, "embedder", None)
    if embedder is None or getattr(embedder, "loaded", True):
        return
    from tqdm import tqdm  # start-up cost: only ingest draws a progress bar

    failure: list[BaseException] = []

    def load() -> None:
        try:
            embedder.embed(["warm-up"])
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=load, name="dmf-model-load", daemon=True)
    with tqdm(desc="loading model", unit="s", disable=not progress, file=sys.stderr,
              bar_format="{desc}: {elapsed}") as bar:
        worker.start()
        while worker.is_alive():
            worker.join(MODEL_TICK_SECONDS)
            bar.update(MODEL_TICK_SECONDS)
    if failure:
        raise failure[0]


@dataclass
class IngestSummary:
    """What an ingest did: counts, and the reason of every row it could not take."""

    created: int = 0
    existing: int = 0
    updated: int = 0
    differ: int = 0
    links: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON values."""
        return {"created": self.created, "existing": self.existing, "updated": self.updated,
                "differ": self.differ, "links": self.links, "errors": len(self.errors),
                "error_rows": self.errors}


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return {value["$ref"]}
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def _resolve(value: Any, ids: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return ids[value["$ref"]]
        return {k: _resolve(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, ids) for v in value]
    return value


class _Ingest:
    """One ingest run: batches of consecutive rows of one type, then their links."""

    def __init__(self, mem: MemoryAPI, default_type: str | None, on_conflict: str,
                 strict: bool) -> None:
        self.mem, self.default_type = mem, default_type
        self.on_conflict, self.strict = on_conflict, strict
        self.summary = IngestSummary()
        self.ids: dict[str, str] = {}

    def bad(self, line: int, message: str) -> None:
        self.summary.errors.append({"row": line, "message": message})
        if self.strict:
            raise StopIteration

    def link(self, row: Row) -> None:
        link = row.link
        if not (isinstance(link, list) and len(link) == 3 and all(
                isinstance(x, str) for x in link)):
            self.bad(row.line, "a link is [from_key, relation, to_key]")
            return
        missing = [k for k in (link[0], link[2]) if k not in self.ids]
        if missing:
            self.bad(row.line, f"link: unknown key {missing[0]!r}")
            return
        try:
            self.mem.link(self.ids[link[0]], link[1], self.ids[link[2]])
        except (ValidationError, Conflict, NotFound) as exc:
            self.bad(row.line, f"{exc.code}: {exc.message}")
            return
        self.summary.links += 1

    def create(self, type_name: str, batch: list[Row]) -> None:
        queue = [batch]
        while queue:
            pending = queue.pop(0)
            if not pending:
                continue
            try:
                entities = self.mem.create_many(
                    type_name, [_resolve(r.data, self.ids) for r in pending],
                    on_conflict=self.on_conflict)
            except (ValidationError, Conflict) as exc:
                at = exc.details.get("row", 0 if len(pending) == 1 else None)
                if not isinstance(at, int) or not 0 <= at < len(pending):
                    queue[:0] = [[r] for r in pending]  # which row? one at a time
                    continue
                self.bad(pending[at].line,
                         f"{exc.code}: " + re.sub(r"^row \d+: ", "", exc.message))
                queue.insert(0, pending[:at] + pending[at + 1:])
                continue
            s = self.summary
            for row, entity in zip(pending, entities, strict=True):
                if row.key is not None:
                    self.ids[row.key] = entity.id
                s.created += entity.created
                s.existing += not entity.created
                if entity.differs:
                    if self.on_conflict == "update":
                        s.updated += 1
                    else:
                        s.differ += 1


def ingest_rows(mem: MemoryAPI, default_type: str | None, rows: Rows, batch: int, *,
                on_conflict: str = "return", strict: bool = False, progress: bool = True
                ) -> IngestSummary:
    """Create rows in batches of consecutive rows of one type, in file order (so ``key`` /
    ``{"$ref": key}`` and link rows work); a bad row is skipped with its reason (``strict``:
    stop at the first)."""
    from tqdm import tqdm  # start-up cost: only ingest draws a progress bar

    run = _Ingest(mem, default_type, on_conflict, strict)
    summary = run.summary
    summary.errors.extend({"row": n, "message": m} for n, m in rows.errors)
    if strict and summary.errors:
        summary.errors.sort(key=lambda e: e["row"])
        del summary.errors[1:]
        return summary
    bar = tqdm(total=len(rows.rows), desc="ingest", unit="row", disable=not progress,
               file=sys.stderr)
    current: list[Row] = []
    current_type: str | None = None

    def flush() -> None:
        nonlocal current
        if current and current_type is not None:
            bar.set_description(f"ingest {current_type}")
            run.create(current_type, current)
            bar.update(len(current))
        current = []

    try:
        for row in rows.rows:
            if row.link is not None:
                flush()
                run.link(row)
                bar.update(1)
                continue
            name = row.type or default_type
            if name is None:
                bar.update(1)
                run.bad(row.line, "no type: give --type, or use {\"type\": ..., \"data\": "
                        "{...}} rows")
                continue
            refs = _refs(row.data)
            pending_keys = {r.key for r in current}
            if name != current_type or len(current) >= batch or refs & pending_keys:
                flush()
                current_type = name
            unknown = sorted(refs - set(run.ids) - pending_keys)
            if unknown:
                bar.update(1)
                run.bad(row.line, f"unknown $ref {unknown[0]!r}")
                continue
            current.append(row)
        flush()
    except StopIteration:
        pass
    finally:
        bar.close()
    summary.errors.sort(key=lambda e: e["row"])
    return summary


def import_into(src: Path, dest: str, as_json: bool, done: str, *,
                snapshot: bool = False) -> None:
    """`dmf import` (a bundle) or `dmf restore-snapshot` (a snapshot) into a new memory
    directory or an empty PostgreSQL database."""
    from .memory import Memory  # start-up cost: DuckDB and Chroma

    url = is_postgres_url(dest)
    make = Memory.restore_snapshot if snapshot else Memory.import_bundle
    try:
        with make(src, dest, settings=settings_from(data_dir=None if url else Path(dest))) as mem:
            report = mem.verify_audit()
            counts = {t.name: mem.count(t.name) for t in mem.types()}
    except DMFError as exc:
        raise fail(f"{exc.code}: {exc.message}") from None
    if as_json:
        print_json({"dest": redact(dest), "last_seq": report.last_seq,
                    "last_hash": report.last_hash, "counts": counts})
    else:
        typer.echo(f"{done}: last seq {report.last_seq}, chain verified; "
                   + ", ".join(f"{n} {c}" for n, c in counts.items()))


def migrate_store(source: str, dest: str, as_json: bool) -> None:
    """`dmf migrate`: export ``source`` to a bundle in a temporary directory, import it."""
    from .memory import Memory  # start-up cost: DuckDB and Chroma

    if not is_postgres_url(source) and not Path(source).is_dir():
        raise fail(f"--from {source}: no memory directory there (nor a postgresql:// URL)", 2)
    with tempfile.TemporaryDirectory(prefix="dmf-migrate-") as tmp:
        carried = Path(tmp) / "store.jsonl.gz"
        try:
            with Memory.open(source, replay=False, settings=settings_from(
                    data_dir=None if is_postgres_url(source) else Path(source))) as mem:
                mem.export(carried)
        except DMFError as exc:
            raise fail(f"{exc.code}: {exc.message}") from None
        import_into(carried, dest, as_json, f"migrated {redact(source)} to {redact(dest)}")
