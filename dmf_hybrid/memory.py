"""Memory: the facade where the store, the indexer and search meet (in-process).

Every public method is a :class:`~dmf_hybrid.protocol.MemoryAPI` method (its docstring lives
there); the embedded-only extras are ``open``, ``for_tenant``, ``transaction``,
``restore_snapshot``, ``engine`` and ``reads``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel

from . import plans, requests, tools
from .checks import TENANT_RE, AsOf, full_match
from .config import Settings, is_postgres_url
from .conversations import MESSAGE_TYPE, check_conversation, check_log_type, message_rows
from .embeddings import Embedder
from .errors import Conflict, SchemaError, ValidationError, first_problem
from .expiry import TTL, ExpiresAt
from .factories import make_embedder, make_vector_index
from .lifecycle import context, install, summaries
from .models import (
    ArchiveResult,
    AuditEvent,
    AuditReport,
    BundleManifest,
    Entity,
    JSONObject,
    JSONValue,
    MemoryContext,
    Page,
    PlanOutcome,
    ReconcileCounts,
    ReindexCounts,
    Related,
    RuleInfo,
    SearchResult,
    SnapshotManifest,
    SummaryResult,
)
from .profiles import GroupContext, SearchProfile
from .protocol import MemoryAPI
from .ruledefs import CONSTRAINT_TYPE, RuleDef, load_rules_toml
from .schema import EntityType, RelationSpec, TypeDef, load_toml, typedef_from_model
from .search.engine import SearchEngine
from .store import Store, archive, bundle
from .store.dialect import store_target
from .store.integrity import (
    rebuild_id_indexes,
    repair_indexes,
    unclean_shutdown,
    unreachable_by_id,
    unreachable_count,
    unreachable_problem,
)
from .store.reads import Reads
from .store.rules import rule_json
from .vector.base import VectorIndex

log = logging.getLogger(__name__)

DB_FILE = "memory.duckdb"
SNAPSHOT_MANIFEST = "dmf-snapshot.json"


class Memory(MemoryAPI):
    """A deterministic agent memory: typed entities, relations, audit log, search.

    Open one per data directory and process (DuckDB allows one process per file); share it
    between threads. ``for_tenant`` gives a view confined to another tenant.
    """

    def __init__(self, store: Store, settings: Settings, tenant: str,
                 path: Path | None, engine: SearchEngine, principal: str | None = None) -> None:
        self._store = store
        self.settings = settings
        self.tenant = tenant
        #: who authenticated this view's writes (an API key's label), recorded in each of
        #: their audit events; None for an in-process caller
        self.principal = principal
        self.path = path
        self._engine = engine
        self._reads = Reads(store, tenant)

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, path: str | Path | None, *, embedder: Embedder | None = None,
             settings: Settings | None = None, tenant: str | None = None,
             vector_index: VectorIndex | None = None, replay: bool = True) -> Memory:
        """Open (creating if needed) the memory in directory ``path``; None = in memory only.

        ``path`` may instead be a ``postgresql://`` URL (or ``settings.store_url`` set, and
        ``path`` a directory for what stays local: the embedded Chroma): the store is then
        that PostgreSQL database.

        Opening replays outbox rows a crash left pending and repairs index drift, which may
        load the embedding model; ``replay=False`` leaves that to ``mem.engine.catch_up()``
        (the HTTP service does it in the background, so it answers /healthz at once). After
        an unclean shutdown DuckDB's own indexes are probed and rebuilt first, before
        anything reads (``store.integrity``).
        """
        settings = settings or Settings()
        path, url = store_target(path, settings.store_url)
        directory = None if path is None else Path(path)
        if directory is not None:
            if directory.exists() and not directory.is_dir():
                raise ValidationError(f"{directory} is not a directory", field="path")
            directory.mkdir(parents=True, exist_ok=True)
        db_file = None if directory is None or url is not None else directory / DB_FILE
        recovering = unclean_shutdown(db_file)  # seen before DuckDB replays the WAL
        store = Store(db_file, settings.limits(), settings.duckdb_memory_limit, url=url)
        try:
            if recovering:
                repair_indexes(store.db)
            install(store)
            engine = SearchEngine.open(
                store, settings, embedder or make_embedder(settings),
                vector_index or make_vector_index(settings, directory), replay=replay)
        except BaseException:
            store.close()
            raise
        return cls(store, settings, tenant or settings.tenant, directory, engine)

    def for_tenant(self, tenant: str, *, principal: str | None = None) -> Memory:
        """A view of the same memory confined to ``tenant``; ``principal``: who authenticated
        its writes (each of their audit events records it; the service passes the API key's
        label)."""
        if not full_match(TENANT_RE, tenant):
            raise ValidationError(f"tenant must be a name matching {TENANT_RE.pattern}",
                                  field="tenant")
        if principal is not None and not isinstance(principal, str):
            raise ValidationError("principal must be a string", field="principal")
        return Memory(self._store, self.settings, tenant, self.path, self._engine, principal)

    def close(self) -> None:
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
    def reads(self) -> Reads:
        """The read-only view of this tenant's part of the store (for lifecycle and plans)."""
        return self._reads

    def last_seq(self) -> int:
        if not self._store.db.in_transaction:
            self._store.db.sync()  # the shared engine: other processes' commits too
        return self._store.committed_seq

    # ---------------------------------------------------------------- schema

    def define(self, model: type[BaseModel], *, identity: Sequence[str] | None = None,
               relations: Mapping[str, RelationSpec | Mapping[str, Any]] | None = None,
               embed: str | None = None, name: str | None = None,
               actor: str | None = None, reason: str | None = None,
               analyzer: str | None = None,
               search: SearchProfile | Mapping[str, Any] | None = None,
               context: GroupContext | Mapping[str, Any] | None = None,
               ttl: float | dt.timedelta | None = None) -> EntityType:
        typedef = typedef_from_model(model, name=name, identity=identity, relations=relations,
                                     embed=embed, analyzer=analyzer,
                                     search=search, context=context, ttl=ttl)
        return self._store.define(typedef, model, tenant=self.tenant, actor=actor, reason=reason,
                                  principal=self.principal)

    def define_type(self, typedef: TypeDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> EntityType:
        if not isinstance(typedef, TypeDef):
            try:
                typedef = TypeDef.model_validate(typedef)
            except pydantic.ValidationError as exc:
                loc, msg = first_problem(exc)
                raise SchemaError(f"invalid type definition: {loc}: {msg}",
                                  field=loc or None) from None
            except (TypeError, ValueError):  # not JSON-shaped: no internal text in the answer
                raise SchemaError("invalid type definition: not an object of the documented "
                                  "shape") from None
        return self._store.define(typedef, tenant=self.tenant, actor=actor, reason=reason,
                                  principal=self.principal)

    def load_definitions(self, path: str | Path, *, actor: str | None = None
                         ) -> list[EntityType]:
        typedefs = load_toml(path)
        rules = load_rules_toml(path)
        with self.transaction():
            types = [self._store.define(t, tenant=self.tenant, actor=actor,
                                        reason=f"load {Path(path).name}",
                                        principal=self.principal) for t in typedefs]
            for rule in rules:
                self.define_rule(rule, actor=actor, reason=f"load {Path(path).name}")
            return types

    def define_rule(self, rule: RuleDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> RuleInfo:
        compiled = install(self._store).define(rule, tenant=self.tenant, actor=actor,
                                               reason=reason, principal=self.principal)
        return rule_json(compiled)

    def rules(self) -> list[RuleInfo]:
        return [rule_json(r) for r in install(self._store).rules(self.tenant)]

    def types(self) -> list[EntityType]:
        return self._store.types(self.tenant)

    def get_type(self, name: str) -> EntityType:
        return self._store.type_of(name, self.tenant)

    # ---------------------------------------------------------------- entities

    def create(self, type_name: str, data: Mapping[str, Any] | BaseModel, *,
               id: str | None = None, on_conflict: str = "return", actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        req = requests.EntityCreate.of(data=data, id=id, on_conflict=on_conflict, ttl=ttl,
                                       expires_at=expires_at)
        return self._store.create(self.tenant, type_name, req.data, id=req.id,
                                  on_conflict=req.on_conflict, actor=actor, reason=reason,
                                  trace_id=trace_id, principal=self.principal, ttl=req.ttl,
                                  expires_at=req.expires_at)

    def add_messages(self, conversation: str, messages: Sequence[Mapping[str, Any]], *,
                     type_name: str = MESSAGE_TYPE, actor: str | None = None,
                     reason: str | None = None, trace_id: str | None = None) -> list[Entity]:
        conversation = check_conversation(conversation)
        req = requests.MessagesAppend.of(messages=messages, type_name=type_name)
        # the next turn and the new rows in one state; a bad call leaves no bundled type
        with self.transaction():
            etype = self._store.type_of(req.type_name, self.tenant, principal=self.principal)
            check_log_type(etype)
            last = self.query(etype.name, {"conversation": conversation}, order_by="-turn",
                              limit=1).items
            next_turn = int(last[0].data.turn) + 1 if last else 0
            rows = message_rows(conversation, req.messages, next_turn)
            stored = self.create_many(etype.name, rows, actor=actor, reason=reason,
                                      trace_id=trace_id)
            for i, entity in enumerate(stored):
                if entity.differs:  # raised inside the transaction: nothing of the call stays
                    raise Conflict(
                        f"messages[{i}]: turn {rows[i]['turn']} of conversation "
                        f"{conversation} is {entity.id}, with another "
                        f"{', '.join(entity.differs)}; send it without a turn to append it",
                        field=f"messages[{i}].turn", entity_id=entity.id,
                        differs=entity.differs)
            return stored

    def create_many(self, type_name: str, rows: Sequence[Mapping[str, Any] | BaseModel], *,
                    progress: Callable[[int], None] | bool | None = None,
                    on_conflict: str = "return", actor: str | None = None,
                    reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
                    expires_at: ExpiresAt = None) -> list[Entity]:
        req = requests.EntityBatchCreate.of(rows=rows, on_conflict=on_conflict, ttl=ttl,
                                            expires_at=expires_at)
        callback = progress if callable(progress) else None
        bar = None
        if progress is True:
            from tqdm import tqdm  # start-up cost: only a progress bar needs it

            bar = tqdm(total=len(req.rows), desc=f"create {type_name}", unit="row")
            callback = bar.update
        try:
            entities = self._store.create_many(
                self.tenant, type_name,
                [r.model_dump() if isinstance(r, BaseModel) else r for r in req.rows],
                on_conflict=req.on_conflict, actor=actor, reason=reason, trace_id=trace_id,
                principal=self.principal, progress=callback, ttl=req.ttl,
                expires_at=req.expires_at)
        finally:
            if bar is not None:
                bar.close()
        self._engine.drain()
        return entities

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        return self._store.get(self.tenant, entity_id, as_of)

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        req = requests.EntityQuery.of(where=where, order_by=order_by, limit=limit, cursor=cursor,
                                      as_of=as_of)
        return self._store.query(self.tenant, type_name, req.where, req.order_by, req.limit,
                                 req.cursor, req.as_of, max_limit=self.settings.max_page_size)

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        req = requests.EntityCount.of(where=where, as_of=as_of)
        return self._store.count(self.tenant, type_name, req.where, req.as_of)

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        req = requests.EntityUpdate.of(data=changes, ttl=ttl, expires_at=expires_at)
        return self._store.update(self.tenant, entity_id, req.data,
                                  expected_version=expected_version, actor=actor, reason=reason,
                                  trace_id=trace_id, principal=self.principal, ttl=req.ttl,
                                  expires_at=req.expires_at)

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        req = requests.EntityAppend.of(field=field, values=values)
        return self._store.append(self.tenant, entity_id, req.field, req.values,
                                  expected_version=expected_version, actor=actor, reason=reason,
                                  trace_id=trace_id, principal=self.principal)

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        return self._store.delete(self.tenant, entity_id, expected_version=expected_version,
                                  actor=actor, reason=reason, trace_id=trace_id,
                                  principal=self.principal)

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        return self._store.restore(self.tenant, entity_id, expected_version=expected_version,
                                   actor=actor, reason=reason, trace_id=trace_id,
                                   principal=self.principal)

    def sweep_expired(self) -> int:
        swept = self._store.sweep_expired(self.tenant, principal=self.principal)
        if swept:
            self._engine.drain()
        return swept

    def sweep_every_tenant(self) -> int:
        """``sweep_expired`` for every tenant of the store (what the service runs)."""
        swept = self._store.sweep_expired(principal=self.principal)
        if swept:
            self._engine.drain()
        return swept

    def erase(self, entity_id: str, *, actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> int:
        return self._store.erase(self.tenant, entity_id, actor=actor, reason=reason,
                                 trace_id=trace_id, principal=self.principal)

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        req = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id)
        return self._store.link(self.tenant, req.from_id, req.relation, req.to_id, actor=actor,
                                reason=reason, trace_id=trace_id, principal=self.principal)

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        req = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id)
        return self._store.unlink(self.tenant, req.from_id, req.relation, req.to_id,
                                  actor=actor, reason=reason, trace_id=trace_id,
                                  principal=self.principal)

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        return self._store.related(self.tenant, entity_id, relation, direction, depth, as_of)

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        return self._store.history(self.tenant, entity_id)

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        return self._store.events(self.tenant, since_seq, until_seq, limit)

    def verify_audit(self) -> AuditReport:
        report = self._store.verify_audit()
        lost = unreachable_count(unreachable_by_id(self._store.db))
        if not lost:
            return report
        return report.model_copy(update={"ok": False, "unreachable_by_id": lost,
                                         "problem": report.problem or unreachable_problem(lost)})

    # ---------------------------------------------------------------- snapshots

    def snapshot(self, dest: str | Path) -> SnapshotManifest:
        archive.duckdb_only(self._store, "a snapshot",
                            "export a bundle instead (export), or back the database up")
        directory = Path(dest)
        if directory.exists() and any(directory.iterdir()):
            raise Conflict(f"snapshot directory {directory} exists and is not empty",
                           field="dest")
        directory.mkdir(parents=True, exist_ok=True)
        last_seq, last_hash = archive.export_database(self._store, directory)
        manifest = SnapshotManifest(format=1, last_seq=last_seq, last_hash=last_hash)
        # written last and atomically: a snapshot with a manifest is a complete snapshot
        partial = directory / f"{SNAPSHOT_MANIFEST}.partial"
        partial.write_text(json.dumps(manifest.model_dump(exclude_none=True), indent=2))
        os.replace(partial, directory / SNAPSHOT_MANIFEST)
        return manifest

    def export(self, dest: str | Path) -> BundleManifest:
        return bundle.export_bundle(self._store, Path(dest))

    @classmethod
    def import_bundle(cls, src: str | Path, path: str | Path, **open_kwargs: Any) -> Memory:
        """A new memory directory (or a store in the empty PostgreSQL database ``path`` names)
        made from a bundle (:meth:`export`): the bundle is checked whole first (its hash
        chain, counts and every entity against its last event; a bad one is refused naming
        the first bad event or line, and nothing is written), then written in one
        transaction; the vector index is rebuilt."""
        if is_postgres_url(path):  # into an empty PostgreSQL database
            manifest = bundle.import_bundle(Path(src), str(path))
            memory = cls.open(path, **open_kwargs)
        else:
            with archive.new_directory(Path(path), "import"):
                manifest = bundle.import_bundle(Path(src), Path(path) / DB_FILE)
                memory = cls.open(path, **open_kwargs)
        report = memory.verify_audit()
        if not report.ok or report.last_seq < manifest.last_seq:
            memory.close()
            raise ValidationError("the imported audit log does not verify", field="src")
        memory.reindex()
        return memory

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
        with archive.new_directory(dest, "restore"):
            archive.import_database(src, dest / DB_FILE)
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
    def engine(self) -> SearchEngine:
        """The search engine (indexer, vector and keyword legs)."""
        return self._engine

    def search(self, type_name: str, text: str | None = None, *,
               where: Mapping[str, Any] | None = None, k: int = 10, mode: str = "hybrid",
               related_to: Mapping[str, Any] | None = None, as_of: AsOf = None,
               conversation: str | None = None,
               reference_time: dt.datetime | dt.date | str | None = None) -> SearchResult:
        req = requests.SearchRequest.of(
            type=type_name, text=text, where=where, k=k, mode=mode, related_to=related_to,
            as_of=as_of, conversation=conversation, reference_time=reference_time)
        return self._engine.search(self.tenant, req.type, req.text, where=req.where, k=req.k,
                                   mode=req.mode, related_to=req.related_to, as_of=req.as_of,
                                   conversation=req.conversation,
                                   reference_time=req.reference_time)

    def reconcile(self) -> ReconcileCounts:
        lost = unreachable_by_id(self._store.db)
        if lost:
            rebuild_id_indexes(self._store.db, sorted(lost))
        counts = self._engine.reconcile()
        counts.unreachable_by_id = unreachable_count(lost)
        return counts

    def reindex(self) -> ReindexCounts:
        return self._engine.reindex()

    def flush(self) -> int:
        return int(self._engine.drain())

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5,
                conversation: str | None = None, turns: int | None = None) -> MemoryContext:
        return context.build_context(self, requests.ContextRequest.of(
            focus_ids=focus_ids, query=query, budget_tokens=budget_tokens, as_of=as_of, k=k,
            conversation=conversation, turns=turns))

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        req = requests.SummaryRequest.of(scope=scope, since_seq=since_seq, until_seq=until_seq)
        return summaries.summarize(self, req.scope, req.since_seq, req.until_seq,
                                   summariser=summariser, actor=actor, reason=reason)

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        return archive.archive_events(self._store, before_seq, dest, tenant=self.tenant,
                                      actor=actor, reason=reason, principal=self.principal)

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        req = requests.ConstraintQuery.of(where=where, limit=limit, cursor=cursor, as_of=as_of)
        return self.query(CONSTRAINT_TYPE, {**(req.where or {}), "status": "open"},
                          order_by=["created_at"], limit=req.limit, cursor=req.cursor,
                          as_of=req.as_of)

    # ---------------------------------------------------------------- agent tools & plans

    def tools(self, format: str = "openai", *, profile: str = "compact",
              internal: bool = False) -> list[JSONObject]:
        return tools.tool_definitions(self, format, profile, internal)

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> JSONValue:
        return tools.call_tool(self, name, arguments, actor=actor, reason=reason,
                               trace_id=trace_id)

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> PlanOutcome:
        return plans.execute_plan(self, ops, dry_run=dry_run, actor=actor, reason=reason,
                                  trace_id=trace_id)


#: mypy checks that Memory is a complete MemoryAPI (no member missing or mistyped).
_CONTRACT: type[MemoryAPI] = Memory
