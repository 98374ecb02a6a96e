"""The ``dmf`` command: serve, ingest, read, search, audit and maintain a memory.

Every data command works against a local memory directory (``--data DIR``, default the
``DMF_DATA_DIR`` setting) or a running server (``--url URL --api-key KEY``). DuckDB lets one
process open a directory, so while ``dmf serve`` runs, talk to it with ``--url``.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from .client import MemoryClient
from .config import Settings
from .errors import DMFError, PlanError, StoreLocked, ValidationError
from .protocol import MemoryAPI
from .schema import load_toml

app = typer.Typer(help="dmf-hybrid: a deterministic memory for AI agents.",
                  no_args_is_help=True, add_completion=False)
INGEST_BATCH = 500
MAX_CELL = 60
MAX_ERRORS_SHOWN = 10

DataOpt = Annotated[Path | None, typer.Option(
    "--data", help="Memory directory (default: the DMF_DATA_DIR setting, ./dmf-data).")]
UrlOpt = Annotated[str | None, typer.Option(
    "--url", help="Talk to a running server instead, e.g. http://127.0.0.1:8000.")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", help="API key for --url.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WhereOpt = Annotated[str | None, typer.Option(
    "--where", help='Filter as JSON, e.g. \'{"budget": {"$lte": 5000}}\'.')]


# ---------------------------------------------------------------- plumbing


def settings_from(**overrides: Any) -> Settings:
    """Settings from DMF_* variables with the given (non-None) command-line values on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def target(data: Path | None, url: str | None, api_key: str | None,
           settings: Settings | None = None) -> Iterator[MemoryAPI]:
    """A Memory on ``data`` or a MemoryClient on ``url``; errors become a message and exit code."""
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
        try:
            mem = Memory.open(settings.data_dir, settings=settings)
        except StoreLocked as exc:
            raise _fail(
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
        raise _fail(f"{exc.code}: {exc.message}") from None
    except DMFError as exc:
        raise _fail(f"{exc.code}: {exc.message}") from None


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


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(to_jsonable(value),
                                                           ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as an aligned plain-text table."""
    cells = [[_cell(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    typer.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    typer.echo("  ".join("-" * w for w in widths))
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _data(entity: Any) -> dict[str, Any]:
    data = to_jsonable(entity.data)
    return data if isinstance(data, dict) else {}


def print_entities(entities: Sequence[Any]) -> None:
    """Print entities as a table: ID, type, version and their non-empty fields."""
    names: list[str] = []
    for entity in entities:
        for name, value in _data(entity).items():
            if value not in (None, [], "") and name not in names:
                names.append(name)
    rows = [[e.id, e.type, e.version] + [_data(e).get(n) for n in names] for e in entities]
    print_table(["id", "type", "v"] + names, rows)


def parse_json_option(text: str | None, name: str) -> Any:
    """A JSON command-line option, or a usage error naming it."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not valid JSON: {exc}", param_hint=name) from None


# ---------------------------------------------------------------- service


@app.command()
def serve(
    data: DataOpt = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
) -> None:
    """Run the HTTP service (OpenAPI docs at /docs) on a memory directory."""
    from .api.server import run  # start-up cost: FastAPI and uvicorn, only to serve

    try:
        run(settings_from(data_dir=data, host=host, port=port))
    except StoreLocked as exc:
        raise _fail(f"{exc.message}\nhint: is a server already running on it? Talk to it "
                    "with --url, or serve another --data DIR.", 2) from None
    except DMFError as exc:
        raise _fail(f"{exc.code}: {exc.message}") from None


@app.command()
def mcp(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None) -> None:
    """Run an MCP server on stdio exposing the memory tools (for agent hosts)."""
    from .mcp_server import serve_stdio  # the mcp package, only for this command

    with target(data, url, api_key) as mem:
        serve_stdio(mem)


@app.command(name="eval", context_settings={"allow_extra_args": True,
                                            "ignore_unknown_options": True,
                                            "help_option_names": []})
def eval_(ctx: typer.Context) -> None:
    """Run the retrieval evaluation: `dmf eval ARGS` = `python -m evaluation ARGS`."""
    args = list(ctx.args) or ["--help"]
    raise typer.Exit(subprocess.call([sys.executable, "-m", "evaluation", *args]))


# ---------------------------------------------------------------- writes


def read_rows(path: Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """The rows of a JSONL or CSV file (CSV: empty cells omitted, JSON-looking cells parsed)."""
    kind = fmt or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    if kind not in ("csv", "jsonl"):
        raise ValidationError("format must be csv or jsonl", field="format")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", newline="") as handle:
        if kind == "csv":
            for record in csv.DictReader(handle):
                row: dict[str, Any] = {}
                for key, cell in record.items():
                    if key is None or cell is None or cell == "":
                        continue
                    if cell[:1] in "[{":
                        try:
                            row[key] = json.loads(cell)
                            continue
                        except json.JSONDecodeError:
                            pass
                    row[key] = cell
                rows.append(row)
            return rows
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"{path}:{number}: not valid JSON: {exc}",
                                      field="file") from None
            if not isinstance(value, dict):
                raise ValidationError(f"{path}:{number}: each line must be a JSON object",
                                      field="file")
            rows.append(value)
    return rows


def ingest_rows(mem: MemoryAPI, type_name: str, rows: list[dict[str, Any]], batch: int,
                progress: bool = True) -> dict[str, Any]:
    """Create rows in batches; bad rows are counted and skipped. {created, existing, errors}."""
    from tqdm import tqdm  # start-up cost: only ingest draws a progress bar

    created = existing = 0
    errors: list[tuple[int, str]] = []
    bar = tqdm(total=len(rows), desc=f"ingest {type_name}", unit="row", disable=not progress,
               file=sys.stderr)
    try:
        for start in range(0, len(rows), batch):
            pending = list(range(start, min(start + batch, len(rows))))
            while pending:
                try:
                    entities = mem.create_many(type_name, [rows[i] for i in pending])
                except ValidationError as exc:
                    bad = exc.details.get("row") if len(pending) > 1 else 0
                    if not isinstance(bad, int) or not 0 <= bad < len(pending):
                        raise
                    errors.append((pending[bad] + 1, re.sub(r"^row \d+: ", "", exc.message)))
                    del pending[bad]
                    continue
                created += sum(1 for e in entities if e.created)
                existing += sum(1 for e in entities if not e.created)
                break
            bar.update(min(batch, len(rows) - start))
    finally:
        bar.close()
    return {"created": created, "existing": existing, "errors": len(errors),
            "error_rows": [{"row": r, "message": m} for r, m in errors]}


@app.command()
def ingest(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                         help="A .jsonl or .csv file, one entity per row.")],
    type_name: Annotated[str, typer.Option("--type", "-t", help="Entity type of the rows.")],
    fmt: Annotated[str | None, typer.Option("--format", help="csv or jsonl (default: "
                                                             "from the file suffix).")] = None,
    batch: Annotated[int, typer.Option(min=1, max=100_000,
                                       help="Rows per create_many call.")] = INGEST_BATCH,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create entities from a JSONL or CSV file, in batches, with a progress bar."""
    with target(data, url, api_key) as mem:
        rows = read_rows(file, fmt)
        summary = ingest_rows(mem, type_name, rows, batch, progress=not as_json)
    if as_json:
        print_json({"file": str(file), "type": type_name, **summary})
    else:
        for err in summary["error_rows"][:MAX_ERRORS_SHOWN]:
            typer.echo(f"  row {err['row']}: {err['message']}", err=True)
        typer.echo(f"ingested {file.name} into {type_name}: {summary['created']} created, "
                   f"{summary['existing']} existing, {summary['errors']} errors")
    if summary["errors"]:
        raise typer.Exit(1)


@app.command()
def define(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                         help="A TOML file of [types.Name] tables.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Register the entity types of a TOML definition file (like indexes/travel.toml)."""
    with target(data, url, api_key) as mem:
        if url:
            types = [mem.define_type(t.model_dump(mode="json")) for t in load_toml(file)]
        else:
            types = mem.load_definitions(file)
        out = [{"name": t.name, "version": t.version} for t in types]
    if as_json:
        print_json(out)
    else:
        print_table(["type", "version"], [[t["name"], t["version"]] for t in out])


# ---------------------------------------------------------------- reads


@app.command()
def get(
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Entity ID.")],
    as_of: Annotated[int | None, typer.Option("--as-of", help="Audit seq to read at.")] = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show one entity (now, or as of an audit seq)."""
    with target(data, url, api_key) as mem:
        entity = mem.get(entity_id, as_of=as_of)
    if as_json:
        print_json(entity)
        return
    rows: list[list[Any]] = [["id", entity.id], ["type", entity.type],
                             ["version", entity.version], ["updated_at", entity.updated_at]]
    print_table(["field", "value"], rows + [[k, v] for k, v in _data(entity).items()])


@app.command()
def query(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="Entity type.")],
    where: WhereOpt = None,
    order_by: Annotated[str | None, typer.Option(
        "--order-by", help="Comma-separated fields, '-field' descending.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Page size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of a previous page.")] = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """List entities of a type matching exact filters, one page at a time."""
    order = [o.strip() for o in order_by.split(",") if o.strip()] if order_by else None
    filt = parse_json_option(where, "--where")
    with target(data, url, api_key) as mem:
        page = mem.query(type_name, filt, order, limit, cursor)
    if as_json:
        print_json(page)
        return
    print_entities(page.items)
    typer.echo(f"{len(page.items)} item(s)"
               + (f"; next page: --cursor {page.next_cursor}" if page.next_cursor else ""))


@app.command()
def search(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="Entity type.")],
    text: Annotated[str, typer.Argument(help="What to look for.")],
    where: WhereOpt = None,
    k: Annotated[int, typer.Option(min=1, help="How many hits.")] = 10,
    mode: Annotated[str, typer.Option(help="hybrid, vector or keyword.")] = "hybrid",
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Similarity search (hybrid by default), resolved from DuckDB, with a receipt."""
    filt = parse_json_option(where, "--where")
    with target(data, url, api_key) as mem:
        result = mem.search(type_name, text, where=filt, k=k, mode=mode)
    if as_json:
        print_json(result)
        return
    rows = [[rank, f"{hit.score:.4f}", hit.entity.id,
             ",".join(f"{leg}#{s.rank}" for leg, s in sorted(hit.legs.items())),
             _data(hit.entity)] for rank, hit in enumerate(result.hits, 1)]
    print_table(["#", "score", "id", "legs", "data"], rows)
    r = result.receipt
    typer.echo(f"{len(result.hits)} hit(s); mode {r.mode}, plan {r.plan}, {r.candidates} "
               f"candidates, resolved at seq {r.resolved_at_seq}")


@app.command()
def history(
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Entity ID.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show every audit event of an entity, oldest first."""
    with target(data, url, api_key) as mem:
        events = mem.history(entity_id)
    if as_json:
        print_json(events)
        return
    rows = [[e.seq, e.ts.isoformat(timespec="seconds"), e.op,
             f"{e.version_before or '-'}->{e.version_after or '-'}", e.actor or "",
             e.reason or ""] for e in events]
    print_table(["seq", "time (UTC)", "op", "version", "actor", "reason"], rows)


# ---------------------------------------------------------------- maintenance


@app.command()
def verify(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
           as_json: JsonOpt = False) -> None:
    """Verify the audit log's hash chain (exit 1 if it does not verify)."""
    with target(data, url, api_key) as mem:
        report = mem.verify_audit()
    if as_json:
        print_json(report)
    elif report.ok:
        typer.echo(f"audit log OK: {report.events_checked} events, last seq {report.last_seq}")
    else:
        typer.echo(f"audit log BROKEN at seq {report.first_bad_seq}: {report.problem}")
    if not report.ok:
        raise typer.Exit(1)


def _counts(name: str, counts: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        print_json(counts)
    else:
        typer.echo(f"{name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


@app.command()
def reconcile(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
              as_json: JsonOpt = False) -> None:
    """Compare the vector index with DuckDB and repair drift (missing, stale, orphan)."""
    with target(data, url, api_key) as mem:
        counts = mem.reconcile()
    _counts("reconcile", counts, as_json)


@app.command()
def reindex(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
            as_json: JsonOpt = False) -> None:
    """Rebuild the vector index from DuckDB and the embedding cache."""
    with target(data, url, api_key) as mem:
        counts = mem.reindex()
    _counts("reindex", counts, as_json)


@app.command()
def snapshot(
    dest: Annotated[Path, typer.Argument(help="New (or empty) directory for the snapshot.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Export the whole database (Parquet) into DEST (on the server's disk with --url)."""
    with target(data, url, api_key) as mem:
        manifest = mem.snapshot(dest if not url else str(dest))
    if as_json:
        print_json(manifest)
    else:
        typer.echo(f"snapshot written to {dest}: last seq {manifest.get('last_seq')}")


@app.command()
def restore(
    src: Annotated[Path, typer.Argument(help="A snapshot directory (from `dmf snapshot`).")],
    dest: Annotated[Path, typer.Argument(help="New (or empty) memory directory.")],
    as_json: JsonOpt = False,
) -> None:
    """Make a new memory directory from a snapshot and rebuild its vector index."""
    from .memory import Memory  # start-up cost: DuckDB and Chroma

    settings = settings_from(data_dir=dest)
    try:
        with Memory.restore_snapshot(src, dest, settings=settings) as mem:
            report = mem.verify_audit()
            counts = {t.name: mem.count(t.name) for t in mem.types()}
    except DMFError as exc:
        raise _fail(f"{exc.code}: {exc.message}") from None
    if as_json:
        print_json({"dest": str(dest), "last_seq": report.last_seq, "counts": counts})
    else:
        typer.echo(f"restored {src} into {dest}: last seq {report.last_seq}, "
                   + ", ".join(f"{n} {c}" for n, c in counts.items()))


def main() -> None:
    """Entry point of the dmf console script."""
    app()


if __name__ == "__main__":
    main()
