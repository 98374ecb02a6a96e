"""Memory: the facade where the store, the indexer and search meet (in-process)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .config import Settings
from .errors import Conflict, SchemaError, ValidationError
from .models import AuditEvent, AuditReport, Entity, Page, Related
from .schema import EntityType, RelationSpec, TypeDef, load_toml, typedef_from_model
from .store import Store
from .store.store import AsOf

if TYPE_CHECKING:
    from .lifecycle import ArchiveResult, MemoryContext, SummaryResult

log = logging.getLogger(__name__)

DB_FILE = "memory.duckdb"
SNAPSHOT_MANIFEST = "dmf-snapshot.json"


class Memory:
    """A deterministic agent memory: typed entities, relations, audit log, search.

    Open one per data directory and process (DuckDB allows one process per file); share it
    between threads. ``for_tenant`` gives a view confined to another tenant.
    """

    def __init__(self, store: Store, settings: Settings, tenant: str,
                 path: Path | None, engine: Any = None) -> None:
        self._store = store
        self.settings = settings
        self.tenant = tenant
        self.path = path
        self._engine = engine

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, path: str | Path | None, *, embedder: Any = None,
             settings: Settings | None = None, tenant: str | None = None,
             vector_index: Any = None, replay: bool = True) -> Memory:
        """Open (creating if needed) the memory in directory ``path``; None = in memory only.

        Opening replays outbox rows a crash left pending and repairs index drift, which may
        load the embedding model; ``replay=False`` leaves that to ``mem.engine.catch_up()``
        (the HTTP service does it in the background, so it answers /healthz at once).
        """
        settings = settings or Settings()
        directory = None if path is None else Path(path)
        if directory is not None:
            if directory.exists() and not directory.is_dir():
                raise ValidationError(f"{directory} is not a directory", field="path")
            directory.mkdir(parents=True, exist_ok=True)
        store = Store(None if directory is None else directory / DB_FILE)
        from .lifecycle import install
        from .search.engine import SearchEngine

        try:
            install(store)
            engine = SearchEngine.open(store, settings, directory, embedder=embedder,
                                       vector_index=vector_index, replay=replay)
        except BaseException:
            store.close()
            raise
        return cls(store, settings, tenant or settings.tenant, directory, engine)

    def for_tenant(self, tenant: str) -> Memory:
        """A view of the same memory confined to ``tenant``."""
        if not isinstance(tenant, str) or not tenant or len(tenant) > 128:
            raise ValidationError("tenant must be a non-empty string", field="tenant")
        return Memory(self._store, self.settings, tenant, self.path, self._engine)

    def close(self) -> None:
        """Flush pending index work and close everything."""
        if self._engine is not None:
            self._engine.close()
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Memory]:
        """All writes inside the block commit together or not at all."""
        with self._store.db.write():
            yield self

    @property
    def last_seq(self) -> int:
        """The audit seq of the newest committed event (in a write transaction: its newest).

        Another thread's open transaction does not count until it commits, so a seq read
        here is always a stable ``as_of`` for every reader.
        """
        return self._store.committed_seq

    # ---------------------------------------------------------------- schema

    def define(self, model: type[BaseModel], *, identity: Sequence[str] | None = None,
               relations: Mapping[str, RelationSpec | Mapping[str, Any]] | None = None,
               embed: str | None = None, name: str | None = None,
               actor: str | None = None, reason: str | None = None,
               analyzer: str | None = None) -> EntityType:
        """Register a pydantic model as an entity type (or a compatible new version).

        ``analyzer`` names the keyword analyzer (default ``"english"``; see
        ``dmf_hybrid.search.text``); a field may name its own with
        ``Field(json_schema_extra={"analyzer": ...})``.
        """
        typedef = typedef_from_model(model, name=name, identity=identity, relations=relations,
                                     embed=embed, analyzer=analyzer)
        return self._store.define(typedef, model, tenant=self.tenant, actor=actor, reason=reason)

    def define_type(self, typedef: TypeDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> EntityType:
        """Register a type given as data (the TOML / JSON form)."""
        if not isinstance(typedef, TypeDef):
            try:
                typedef = TypeDef.model_validate(typedef)
            except Exception as exc:  # pydantic.ValidationError
                raise SchemaError(f"invalid type definition: {exc}") from None
        return self._store.define(typedef, tenant=self.tenant, actor=actor, reason=reason)

    def load_definitions(self, path: str | Path, *, actor: str | None = None) -> list[EntityType]:
        """Register every type (and rule) of an ``indexes/*.toml`` file, in one transaction."""
        from .lifecycle.rules import load_rules_toml

        typedefs = load_toml(path)
        rules = load_rules_toml(path)
        with self.transaction():
            types = [self._store.define(t, tenant=self.tenant, actor=actor,
                                        reason=f"load {Path(path).name}") for t in typedefs]
            for rule in rules:
                self.define_rule(rule, actor=actor, reason=f"load {Path(path).name}")
            return types

    def define_rule(self, rule: Any, *, actor: str | None = None,
                    reason: str | None = None) -> dict[str, Any]:
        """Register a rule (a RuleDef or its TOML / JSON form); its definition and version."""
        from .lifecycle import install
        from .lifecycle.rules import rule_json

        compiled = install(self._store).define(rule, tenant=self.tenant, actor=actor,
                                               reason=reason)
        return rule_json(compiled)

    def rules(self) -> list[dict[str, Any]]:
        """Every active rule: definition, version and the relations it depends on."""
        from .lifecycle import install
        from .lifecycle.rules import rule_json

        return [rule_json(r) for r in install(self._store).rules()]

    def types(self) -> list[EntityType]:
        """Every registered entity type."""
        return self._store.types()

    def get_type(self, name: str) -> EntityType:
        """One registered entity type."""
        return self._store.type_of(name)

    # ---------------------------------------------------------------- entities

    def create(self, type_name: str, data: Mapping[str, Any] | BaseModel, *, id: str | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Create an entity; the same identity again returns the existing one (created=False)."""
        return self._store.create(self.tenant, type_name, _as_data(data), id=id, actor=actor,
                                  reason=reason, trace_id=trace_id)

    def create_many(self, type_name: str, rows: Sequence[Mapping[str, Any] | BaseModel], *,
                    progress: Callable[[int], None] | bool | None = None,
                    actor: str | None = None, reason: str | None = None,
                    trace_id: str | None = None) -> list[Entity]:
        """Create many entities: validated first, written and embedded in batches."""
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
            raise ValidationError("rows must be a list of objects", field="rows")
        callback = progress if callable(progress) else None
        bar = None
        if progress is True:
            from tqdm import tqdm

            bar = tqdm(total=len(rows), desc=f"create {type_name}", unit="row")
            callback = bar.update
        try:
            entities = self._store.create_many(
                self.tenant, type_name, [_as_data(r) for r in rows], actor=actor,
                reason=reason, trace_id=trace_id, progress=callback)
        finally:
            if bar is not None:
                bar.close()
        if self._engine is not None:
            self._engine.drain()
        return entities

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        """The entity now or at ``as_of`` (seq or datetime); NotFound if absent or deleted."""
        return self._store.get(self.tenant, entity_id, as_of)

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        """One page of entities matching ``where`` in a deterministic order."""
        return self._store.query(self.tenant, type_name, where, order_by, limit, cursor, as_of,
                                 max_limit=self.settings.max_page_size)

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        """How many entities of a type match ``where``."""
        return self._store.count(self.tenant, type_name, where, as_of)

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Change fields; VersionConflict if ``expected_version`` is stale."""
        return self._store.update(self.tenant, entity_id, changes,
                                  expected_version=expected_version, actor=actor, reason=reason,
                                  trace_id=trace_id)

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Append to a list field atomically."""
        return self._store.append(self.tenant, entity_id, field, values,
                                  expected_version=expected_version, actor=actor, reason=reason,
                                  trace_id=trace_id)

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Soft-delete (restorable; still visible to ``as_of`` reads before it)."""
        return self._store.delete(self.tenant, entity_id, expected_version=expected_version,
                                  actor=actor, reason=reason, trace_id=trace_id)

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        """Undo a soft delete."""
        return self._store.restore(self.tenant, entity_id, expected_version=expected_version,
                                   actor=actor, reason=reason, trace_id=trace_id)

    def erase(self, entity_id: str, *, actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> int:
        """Remove an entity's content everywhere, keeping the audit chain verifiable."""
        return self._store.erase(self.tenant, entity_id, actor=actor, reason=reason,
                                 trace_id=trace_id)

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        """Link two entities; False when the link already existed."""
        return self._store.link(self.tenant, from_id, relation, to_id, actor=actor,
                                reason=reason, trace_id=trace_id)

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        """Remove a link; NotFound if it does not exist."""
        return self._store.unlink(self.tenant, from_id, relation, to_id, actor=actor,
                                  reason=reason, trace_id=trace_id)

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        """Entities linked to ``entity_id`` (nearest first, then relation, then ID)."""
        return self._store.related(self.tenant, entity_id, relation, direction, depth, as_of)

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        """Every audit event of an entity, oldest first."""
        return self._store.history(self.tenant, entity_id)

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """This tenant's audit events with since_seq < seq <= until_seq."""
        return self._store.events(self.tenant, since_seq, until_seq, limit)

    def verify_audit(self) -> AuditReport:
        """Verify the audit log's hash chain."""
        return self._store.verify_audit()

    # ---------------------------------------------------------------- snapshots

    def snapshot(self, dest_dir: str | Path) -> dict[str, Any]:
        """Export the whole database (DuckDB EXPORT, Parquet) into a new directory."""
        dest = Path(dest_dir)
        if dest.exists() and any(dest.iterdir()):
            raise Conflict(f"snapshot directory {dest} exists and is not empty", field="dest")
        dest.mkdir(parents=True, exist_ok=True)
        from .lifecycle.archive import exporting

        with self._store.db.write() as con:
            with exporting(self._store, con, dest):
                con.execute(f"EXPORT DATABASE '{_sql_path(dest)}' (FORMAT parquet)")
            manifest = {"format": 1, "last_seq": self._store.last_seq,
                        "last_hash": self.verify_audit().last_hash}
        # written last and atomically: a snapshot with a manifest is a complete snapshot
        partial = dest / f"{SNAPSHOT_MANIFEST}.partial"
        partial.write_text(json.dumps(manifest, indent=2))
        os.replace(partial, dest / SNAPSHOT_MANIFEST)
        return manifest

    @classmethod
    def restore_snapshot(cls, src_dir: str | Path, path: str | Path, **open_kwargs: Any
                         ) -> Memory:
        """A new memory directory made from a snapshot; the vector index is rebuilt."""
        src, dest = Path(src_dir), Path(path)
        manifest_path = src / SNAPSHOT_MANIFEST
        if not manifest_path.is_file():
            raise ValidationError(f"{src} is not a dmf-hybrid snapshot (no {SNAPSHOT_MANIFEST})",
                                  field="src")
        try:
            manifest = json.loads(manifest_path.read_text())
            int(manifest["last_seq"])
        except (ValueError, KeyError, TypeError):
            raise ValidationError(f"{src}: the snapshot manifest is unreadable",
                                  field="src") from None
        if dest.exists() and any(dest.iterdir()):
            raise Conflict(f"restore target {dest} exists and is not empty", field="path")
        dest.mkdir(parents=True, exist_ok=True)
        import duckdb

        try:
            con = duckdb.connect(str(dest / DB_FILE))
            try:
                con.execute(f"IMPORT DATABASE '{_sql_path(src)}'")
                from .lifecycle.archive import restore_files

                restore_files(con, src, dest)
            finally:
                con.close()
        except Exception:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        memory = cls.open(dest, **open_kwargs)
        report = memory.verify_audit()
        if not report.ok or report.last_seq != manifest["last_seq"]:
            memory.close()
            raise ValidationError("restored audit log does not match the snapshot manifest",
                                  field="src")
        memory.reindex()
        return memory

    # ---------------------------------------------------------------- search & index

    @property
    def engine(self) -> Any:
        """The search engine (indexer, vector and keyword legs)."""
        return self._engine

    def search(self, type_name: str, text: str | None = None, *,
               where: Mapping[str, Any] | None = None, k: int = 10, mode: str = "hybrid",
               related_to: Mapping[str, Any] | None = None, as_of: AsOf = None) -> Any:
        """Similarity search; hits are resolved from DuckDB (see SearchResult)."""
        return self._engine.search(self.tenant, type_name, text, where=where, k=k, mode=mode,
                                   related_to=related_to, as_of=as_of)

    def reconcile(self) -> dict[str, int]:
        """Compare the vector index with DuckDB and repair drift; returns counts."""
        return dict(self._engine.reconcile())

    def reindex(self) -> dict[str, int]:
        """Rebuild the vector index from DuckDB and the embedding cache."""
        return dict(self._engine.reindex())

    def flush(self) -> int:
        """Process pending outbox rows now; returns how many were applied."""
        return int(self._engine.drain())

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5) -> MemoryContext:
        """A compact, deterministic prompt context (MemoryContext: text + data) within budget."""
        from .lifecycle.context import build_context

        return build_context(self, focus_ids, query, budget_tokens, as_of, k=k)

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        """A MemorySummary of a scope's audit events in a window (SummaryResult; empty ok)."""
        from .lifecycle.summaries import summarize

        return summarize(self, scope, since_seq, until_seq, summariser=summariser, actor=actor,
                         reason=reason)

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        """Move audit events with seq < before_seq to Parquet under dest (ArchiveResult)."""
        from .lifecycle.archive import archive_events

        return archive_events(self._store, before_seq, dest, tenant=self.tenant, actor=actor,
                              reason=reason)

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        """The work queue: open Constraint entities (oldest first), optionally filtered."""
        from .lifecycle.rules import CONSTRAINT_TYPE

        if where is not None and not isinstance(where, Mapping):
            raise ValidationError("where must be an object of field conditions", field="where")
        return self.query(CONSTRAINT_TYPE, {**(where or {}), "status": "open"},
                          order_by=["created_at"], limit=limit, cursor=cursor, as_of=as_of)

    # ---------------------------------------------------------------- agent tools & plans

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """Function-calling definitions of the memory operations ("openai" or "json_schema")."""
        from .tools import tool_definitions

        return tool_definitions(self, format)

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> Any:
        """Validate and execute one tool call; its JSON-able result (PlanError if invalid)."""
        from .tools import call_tool

        return call_tool(self, name, arguments, actor=actor, reason=reason, trace_id=trace_id)

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> dict[str, Any]:
        """Validate a plan and run it in one transaction: {results, diff, committed, seq_range}."""
        from .plans import execute_plan

        return execute_plan(self, ops, dry_run=dry_run, actor=actor, reason=reason,
                            trace_id=trace_id)


def _as_data(data: Any) -> Any:
    if isinstance(data, BaseModel):
        return data.model_dump()
    return data


def _sql_path(path: Path) -> str:
    text = str(path.resolve())
    if "'" in text:
        raise ValidationError("paths with quotes are not supported", field="path")
    return text
