"""The ``dmf`` command: serve, ingest, create and change, read, search, audit and maintain.

Every data command works against a local memory directory (``--data DIR``, default the
``DMF_DATA_DIR`` setting) or a running server (``--url URL --api-key KEY``). DuckDB lets one
process open a directory, so while ``dmf serve`` runs, talk to it with ``--url``. Reads never
create a memory directory; ``define``, ``ingest`` and ``create`` may.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from .checks import ON_CONFLICT
from .cli_support import (
    MAX_ERRORS_SHOWN,
    DataOpt,
    JsonOpt,
    KeyOpt,
    TenantOpt,
    UrlOpt,
    WhereOpt,
    entity_data,
    fail,
    import_into,
    ingest_rows,
    load_model_with_bar,
    migrate_store,
    parse_json_option,
    print_entities,
    print_json,
    print_table,
    read_rows,
    settings_from,
    target,
)
from .config import redact
from .errors import DMFError, StoreLocked
from .expiry import ttl_option

# rich markup would swallow "[types.Name]" in help texts: plain text it is
app = typer.Typer(help="dmf-hybrid: a deterministic memory for AI agents.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)
INGEST_BATCH = 500
OnConflictOpt = Annotated[str, typer.Option(
    "--on-conflict", help=f"When the identity exists: {' | '.join(ON_CONFLICT)} (return: keep "
                          "the stored entity and say which fields differ; raise: an error; "
                          "update: change it to the given values).")]
AuditReasonOpt = Annotated[str | None, typer.Option("--reason", help="Audit reason.")]
TtlOpt = Annotated[str | None, typer.Option(
    "--ttl", help='Expiry in seconds from now ("never": none); the entity then reads as deleted '
                  "and the sweep soft-deletes it.")]
VersionOpt = Annotated[int | None, typer.Option(
    "--expected-version", help="Fail unless the entity is at this version.")]

# ---------------------------------------------------------------- service


@app.command()
def serve(
    data: DataOpt = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Load the example domains (indexes/"
                                       "*.toml) and, into an empty store, their data.")] = False,
    store: Annotated[str | None, typer.Option(
        "--store", help="postgresql://user:password@host:port/database: keep the store in "
                        "PostgreSQL (default: DuckDB in --data; env DMF_STORE_URL).")] = None,
    workers: Annotated[int | None, typer.Option(
        help="Service processes behind the port (needs --store; env DMF_WORKERS).")] = None,
) -> None:
    """Run the HTTP service (OpenAPI docs at /docs, inspector at /ui) on a memory directory."""
    from .api.server import log_to_stderr, run  # start-up cost: FastAPI and uvicorn
    log_to_stderr()
    try:
        run(settings_from(data_dir=data, host=host, port=port, store_url=store,
                          load_examples=True if demo else None, workers=workers))
    except StoreLocked as exc:
        raise fail(f"{exc.message}\nhint: is a server already running on it? Talk to it "
                    "with --url, or serve another --data DIR.", 2) from None
    except DMFError as exc:
        raise fail(f"{exc.code}: {exc.message}") from None


@app.command()
def mcp(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None) -> None:
    """Run an MCP server on stdio exposing the memory tools (for agent hosts)."""
    from .mcp_server import serve_stdio  # the mcp package, only for this command

    with target(data, url, api_key, create=True) as mem:
        serve_stdio(mem)


@app.command(name="eval", context_settings={"allow_extra_args": True,
                                            "ignore_unknown_options": True,
                                            "help_option_names": []})
def eval_(ctx: typer.Context) -> None:
    """Run the retrieval evaluation: `dmf eval ARGS` = `python -m evaluation ARGS`, from a
    clone of the repository (the evaluation code is not installed with the package)."""
    if not (Path.cwd() / "evaluation" / "__main__.py").is_file() \
            and importlib.util.find_spec("evaluation") is None:
        raise fail("dmf eval runs the evaluation/ directory of a dmf-hybrid clone, which is "
                   "not installed with the package: run it from the root of a clone", 2)
    args = list(ctx.args) or ["--help"]
    raise typer.Exit(subprocess.call([sys.executable, "-m", "evaluation", *args]))


# ---------------------------------------------------------------- writes


@app.command()
def ingest(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                         help="A .jsonl or .csv file, one entity per row.")],
    type_name: Annotated[str | None, typer.Option(
        "--type", "-t", help="Entity type of the rows (not needed for {type, data} rows).")
    ] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="csv or jsonl (default: "
                                                             "from the file suffix).")] = None,
    batch: Annotated[int, typer.Option(min=1, max=100_000,
                                       help="Rows per create_many call.")] = INGEST_BATCH,
    on_conflict: OnConflictOpt = "return",
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first bad row.")
                      ] = False,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create entities from a JSONL or CSV file, in batches, with a progress bar.

    A JSONL row is the entity's fields, or {"type": ..., "data": {...}} as in
    indexes/examples/*.jsonl. Bad rows are skipped and listed with their reasons (--strict
    stops at the first); the exit code is 1 if any row failed.
    """
    if on_conflict not in ON_CONFLICT:
        raise typer.BadParameter(f"one of {', '.join(ON_CONFLICT)}", param_hint="--on-conflict")
    with target(data, url, api_key, create=True) as mem:
        rows = read_rows(file, fmt)
        load_model_with_bar(mem, progress=not as_json)
        summary = ingest_rows(mem, type_name, rows, batch, on_conflict=on_conflict,
                              strict=strict, progress=not as_json)
    if as_json:
        print_json({"file": str(file), "type": type_name, **summary.as_json()})
    else:
        if summary.errors:
            print_table(["row", "reason"], [[e["row"], e["message"]]
                                            for e in summary.errors[:MAX_ERRORS_SHOWN]])
            if len(summary.errors) > MAX_ERRORS_SHOWN:
                typer.echo(f"... and {len(summary.errors) - MAX_ERRORS_SHOWN} more "
                           "(--json lists them all)")
        into = f" into {type_name}" if type_name else ""
        typer.echo(f"ingested {file.name}{into}: {summary.created} created, "
                   f"{summary.existing} existing ({summary.differ} with other values, "
                   f"{summary.updated} updated), "
                   + (f"{summary.links} links, " if summary.links else "")
                   + f"{len(summary.errors)} errors"
                   + (" (stopped: --strict)" if strict and summary.errors else ""))
    if summary.errors:
        raise typer.Exit(1)


@app.command()
def define(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                         help="A TOML file of [types.Name] tables.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Register the entity types of a TOML definition file (like indexes/travel.toml)."""
    with target(data, url, api_key, create=True) as mem:
        types = mem.load_definitions(file)  # in one transaction: types may target each other
        out = [{"name": t.name, "version": t.version} for t in types]
    if as_json:
        print_json(out)
    else:
        print_table(["type", "version"], [[t["name"], t["version"]] for t in out])


def _show(entity: Any, as_json: bool, note: str = "") -> None:
    if as_json:
        print_json(entity)
        return
    print_entities([entity])
    if note:
        typer.echo(note)


@app.command()
def create(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="Entity type.")],
    fields: Annotated[str, typer.Argument(metavar="DATA",
                                          help='The fields as JSON, e.g. \'{"name": "Bund"}\'.')],
    entity_id: Annotated[str | None, typer.Option(
        "--id", help="A chosen ID instead of the one derived from the identity.")] = None,
    on_conflict: OnConflictOpt = "return", reason: AuditReasonOpt = None, ttl: TtlOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create an entity; the same identity again meets --on-conflict (default: return)."""
    values = parse_json_option(fields, "DATA")
    with target(data, url, api_key, create=True) as mem:
        entity = mem.create(type_name, values, id=entity_id, on_conflict=on_conflict,
                            reason=reason, ttl=ttl_option(ttl))
    note = "created" if entity.created else "exists" + (
        f"; differs: {', '.join(entity.differs)}" + (" (updated)" if on_conflict == "update"
                                                     else " (kept; --on-conflict update)")
        if entity.differs else "")
    _show(entity, as_json, note)


@app.command()
def update(
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Entity ID.")],
    fields: Annotated[str, typer.Argument(metavar="DATA",
                                          help='Fields to change as JSON, e.g. \'{"cost": 5}\'.')],
    expected_version: VersionOpt = None, reason: AuditReasonOpt = None, ttl: TtlOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Change fields of an entity (identity fields cannot change); DATA '{}' with --ttl
    only renews its expiry."""
    values = parse_json_option(fields, "DATA")
    with target(data, url, api_key) as mem:
        entity = mem.update(entity_id, values, expected_version=expected_version,
                            reason=reason, ttl=ttl_option(ttl))
    _show(entity, as_json)


@app.command()
def delete(
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Entity ID.")],
    expected_version: VersionOpt = None, reason: AuditReasonOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Soft-delete an entity (restorable with `dmf restore`)."""
    with target(data, url, api_key) as mem:
        entity = mem.delete(entity_id, expected_version=expected_version, reason=reason)
    _show(entity, as_json, f"deleted {entity.id} (version {entity.version})")


@app.command()
def restore(
    entity_id: Annotated[str, typer.Argument(metavar="ID", help="Entity ID.")],
    expected_version: VersionOpt = None, reason: AuditReasonOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Undo the soft delete of an entity."""
    with target(data, url, api_key) as mem:
        entity = mem.restore(entity_id, expected_version=expected_version, reason=reason)
    _show(entity, as_json)


FromArg = Annotated[str, typer.Argument(metavar="FROM_ID", help="Source entity ID.")]
RelationArg = Annotated[str, typer.Argument(metavar="RELATION", help="Relation name.")]
ToArg = Annotated[str, typer.Argument(metavar="TO_ID", help="Target entity ID.")]


@app.command()
def link(
    from_id: FromArg, relation: RelationArg, to_id: ToArg,
    reason: AuditReasonOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Link two entities by a relation of the first one's type."""
    with target(data, url, api_key) as mem:
        linked = mem.link(from_id, relation, to_id, reason=reason)
    if as_json:
        print_json({"linked": linked, "from_id": from_id, "relation": relation, "to_id": to_id})
    else:
        typer.echo(f"{'linked' if linked else 'already linked'}: {from_id} -{relation}-> {to_id}")


@app.command()
def unlink(
    from_id: FromArg, relation: RelationArg, to_id: ToArg, reason: AuditReasonOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Remove a link between two entities."""
    with target(data, url, api_key) as mem:
        seq = mem.unlink(from_id, relation, to_id, reason=reason)
    if as_json:
        print_json({"unlinked": True, "seq": seq})
    else:
        typer.echo(f"unlinked {from_id} -{relation}-> {to_id} (seq {seq})")


@app.command()
def types(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
          as_json: JsonOpt = False) -> None:
    """List the registered entity types: version, identity, fields, searchable."""
    with target(data, url, api_key) as mem:
        found = mem.types()
    if as_json:
        print_json([{"name": t.name, "version": t.version,
                     "definition": t.typedef.model_dump(mode="json")} for t in found])
        return
    print_table(["type", "version", "identity", "fields", "searchable"], [
        [t.name, t.version, ", ".join(t.typedef.identity or ()) or "(all fields)",
         ", ".join(t.typedef.fields), "yes" if t.typedef.embed else "no"] for t in found])


@app.command()
def count(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="Entity type.")],
    where: WhereOpt = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """How many entities of a type match an exact filter."""
    filt = parse_json_option(where, "--where")
    with target(data, url, api_key) as mem:
        n = mem.count(type_name, filt)
    if as_json:
        print_json({"type": type_name, "count": n})
    else:
        typer.echo(str(n))


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
    print_table(["field", "value"], rows + [[k, v] for k, v in entity_data(entity).items()])


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
    reference_time: Annotated[str | None, typer.Option(
        help="ISO-8601 date or time the query's time phrases are read against (default "
             "now).")] = None,
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Similarity search (hybrid by default), resolved from DuckDB, with a receipt."""
    filt = parse_json_option(where, "--where")
    with target(data, url, api_key) as mem:
        result = mem.search(type_name, text, where=filt, k=k, mode=mode,
                            reference_time=reference_time)
    if as_json:
        print_json(result)
        return
    rows = [[rank, f"{hit.score:.4f}", hit.entity.id,
             ",".join(f"{leg}#{s.rank}" for leg, s in sorted(hit.legs.items())),
             entity_data(hit.entity)] for rank, hit in enumerate(result.hits, 1)]
    print_table(["#", "score", "id", "legs", "data"], rows)
    r = result.receipt
    typer.echo(f"{len(result.hits)} hit(s); mode {r.mode}, plan {r.plan}, {r.candidates} "
               f"candidates, resolved at seq {r.resolved_at_seq}")
    for w in r.time_windows:
        typer.echo(f"time phrase {w['phrase']!r} read as {w['start']}..{w['end']}")


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
    """Verify the audit log's hash chains (exit 1 if one does not verify)."""
    with target(data, url, api_key) as mem:
        report = mem.verify_audit()
    if as_json:
        print_json(report)
    elif report.ok:
        typer.echo(f"audit log OK: {report.events_checked} events, {report.chains} chains")
    elif report.first_bad_seq is None:  # the chains hold, an index does not
        typer.echo(f"NOT OK: {report.problem}")
    else:  # a tenant's chain
        typer.echo(f"BROKEN at {report.tenant} seq {report.first_bad_seq}: {report.problem}")
    if not report.ok:
        raise typer.Exit(1)


def _counts(name: str, counts: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        print_json(counts)
    else:
        typer.echo(f"{name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


@app.command()
def sweep(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
          as_json: JsonOpt = False) -> None:
    """Soft-delete the entities whose expiry has come (audited, actor system:expiry)."""
    with target(data, url, api_key) as mem:
        swept = mem.sweep_expired()
    _counts("sweep", {"swept": swept}, as_json)


@app.command()
def reconcile(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
              as_json: JsonOpt = False) -> None:
    """Compare the vector index with DuckDB and repair drift (missing, stale, orphan)."""
    with target(data, url, api_key) as mem:
        counts = mem.reconcile()
    _counts("reconcile", counts.model_dump(), as_json)


@app.command()
def reindex(data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None,
            as_json: JsonOpt = False) -> None:
    """Rebuild the vector index from DuckDB and the embedding cache."""
    with target(data, url, api_key) as mem:
        counts = mem.reindex()
    _counts("reindex", counts.model_dump(), as_json)


@app.command()
def snapshot(
    dest: Annotated[Path, typer.Argument(help="New (or empty) directory for the snapshot.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
) -> None:
    """Write the whole store (a bundle, the audit archives, a manifest) into the directory
    DEST (on the server's disk with --url)."""
    with target(data, url, api_key) as mem:
        manifest = mem.snapshot(dest if not url else str(dest))
    if as_json:
        print_json(manifest.model_dump(exclude_none=True))
    else:
        typer.echo(f"snapshot written to {dest}: last seq {manifest.last_seq}")


@app.command(name="restore-snapshot")
def restore_snapshot(
    src: Annotated[Path, typer.Argument(help="A snapshot directory (from `dmf snapshot`).")],
    dest: Annotated[str, typer.Argument(help="New (or empty) memory directory, or the "
                                             "postgresql:// URL of an empty database.")],
    as_json: JsonOpt = False,
) -> None:
    """Make a new memory directory (or a PostgreSQL store) from a snapshot, checked whole
    first, and rebuild its vector index."""
    import_into(src, dest, as_json, f"restored {src} into {redact(dest)}", snapshot=True)


@app.command(name="export")
def export_bundle(
    dest: Annotated[Path, typer.Argument(help="New bundle file (.jsonl, or .jsonl.gz); with "
                                              "--url a name under the server's exports/.")],
    data: DataOpt = None, url: UrlOpt = None, api_key: KeyOpt = None, as_json: JsonOpt = False,
    tenant: TenantOpt = None) -> None:
    """Write the whole store (or one tenant's part) to an engine-neutral bundle file."""
    with target(data, url, api_key) as mem:
        manifest = mem.export(dest if not url else str(dest), tenant=tenant)
    if as_json:
        print_json({"dest": str(dest), **manifest.model_dump(exclude_none=True)})
    else:
        counts = ", ".join(f"{n} {k}" for k, n in manifest.counts.items())
        typer.echo(f"exported to {manifest.path or dest}: {counts}")


@app.command(name="import")
def import_bundle(
    src: Annotated[Path, typer.Argument(help="A bundle file (from `dmf export`).")],
    dest: Annotated[str, typer.Argument(help="New (or empty) memory directory, or the "
                                             "postgresql:// URL of an empty database.")],
    as_json: JsonOpt = False,
) -> None:
    """Check a bundle whole (hash chain, entities), then make a new memory directory (or a
    PostgreSQL store) of it."""
    import_into(src, dest, as_json, f"imported {src} into {redact(dest)}")


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="The memory directory, or the "
                                                       "postgresql:// URL, to copy.")],
    dest: Annotated[str, typer.Option("--to", help="A new (or empty) memory directory, or "
                                                   "the postgresql:// URL of an empty "
                                                   "database.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy a whole store to another engine (DuckDB to PostgreSQL and back): an export and a
    checked import, with the same IDs, versions, seqs and hashes; the copy verifies."""
    migrate_store(source, dest, as_json)


def main() -> None:
    """Entry point of the dmf console script."""
    app()


if __name__ == "__main__":
    main()
