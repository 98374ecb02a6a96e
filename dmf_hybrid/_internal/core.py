"""MemoryCore: one tenant's operations over the store and the search engine (in-process).

What the stages above it (``lifecycle``, ``plans``, ``tools``) build on: the entity, relation, audit
and search operations of :class:`~dmf_hybrid._internal.protocol.MemoryAPI` (their docstrings live
there), and the in-process extras a stage needs: ``tenant``, ``settings``, ``transaction``,
``reads`` (a read-only view of the store) and ``engine``.
:class:`~dmf_hybrid._internal.memory.Memory` is this class plus the operations made of stages
(``context``, ``summarize``, tools, plans, snapshots); a stage gets the memory as a ``MemoryCore``
and calls only down."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import pydantic
from pydantic import BaseModel

from . import requests
from .checks import TENANT_RE, AsOf, full_match
from .config import Settings
from .conversations import MESSAGE_TYPE, check_conversation, check_log_type, message_rows
from .embeddings import Embedder
from .errors import Conflict, SchemaError, ValidationError, first_problem
from .expiry import TTL, ExpiresAt
from .factories import make_embedder, make_vector_index
from .models import (
    AuditEvent,
    AuditReport,
    Entity,
    Page,
    ReconcileCounts,
    ReindexCounts,
    Related,
    RuleInfo,
    SearchResult,
)
from .profiles import GroupContext, SearchProfile
from .protocol import MemoryAPI
from .ruledefs import CONSTRAINT_TYPE, RuleDef, load_rules_toml
from .schema import EntityType, RelationSpec, TypeDef, load_toml, typedef_from_model
from .search.engine import SearchEngine
from .store import Store
from .store.archive import redaction_hook
from .store.dialect import store_target
from .store.integrity import (
    rebuild_id_indexes,
    repair_indexes,
    unclean_shutdown,
    unreachable_by_id,
    unreachable_count,
)
from .store.reads import Reads
from .store.rules import RuleEngine, rule_json
from .vector.base import VectorIndex

log = logging.getLogger(__name__)

DB_FILE = "memory.duckdb"

_RULE_ENGINES: weakref.WeakKeyDictionary[Store, RuleEngine] = weakref.WeakKeyDictionary()
_RULE_ENGINES_LOCK = threading.Lock()


def rule_engine(store: Store) -> RuleEngine:
    """The store's rule engine: loaded, and the write hooks that run inside every write
    transaction registered (erasure reaching the event archive, rule evaluation), the first
    time it is asked for."""
    with _RULE_ENGINES_LOCK:
        engine = _RULE_ENGINES.get(store)
        if engine is None:
            engine = RuleEngine(store)
            store.hooks.add(redaction_hook(store))
            store.hooks.add(engine.on_write)
            _RULE_ENGINES[store] = engine
        return engine


class MemoryCore:
    """One tenant's view of a store and its search engine: the operations the stages use.

    :class:`~dmf_hybrid._internal.memory.Memory` is the class to open; ``open`` and ``for_tenant``
    return an instance of the class they are called on.
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
             vector_index: VectorIndex | None = None, replay: bool = True) -> Self:
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
        if url is not None and settings.store_url != url:  # the settings say where it is
            settings = settings.model_copy(update={"store_url": url})
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
            rule_engine(store)
            engine = SearchEngine.open(
                store, settings, embedder or make_embedder(settings),
                vector_index or make_vector_index(settings, directory), replay=replay)
        except BaseException:
            store.close()
            raise
        return cls(store, settings, tenant or settings.tenant, directory, engine)

    def for_tenant(self, tenant: str, *, principal: str | None = None) -> Self:
        """A view of the same memory confined to ``tenant``; ``principal``: who authenticated
        its writes (each of their audit events records it; the service passes the API key's
        label)."""
        if not full_match(TENANT_RE, tenant):
            raise ValidationError(f"tenant must be a name matching {TENANT_RE.pattern}",
                                  field="tenant")
        if principal is not None and not isinstance(principal, str):
            raise ValidationError("principal must be a string", field="principal")
        return type(self)(self._store, self.settings, tenant, self.path, self._engine,
                          principal)

    def close(self) -> None:
        self._engine.close()
        self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """All writes inside the block commit together or not at all."""
        with self._store.db.write(self.tenant):
            yield self

    @property
    def reads(self) -> Reads:
        """The read-only view of this tenant's part of the store (for lifecycle and plans)."""
        return self._reads

    def seen_seq(self) -> int:
        return self._store.log.committed_head(self.tenant)

    def last_seq(self) -> int:
        if not self._store.db.in_transaction:
            self._store.db.sync()  # the shared engine: other processes' commits too
        return self._store.log.committed_head(self.tenant)

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
        compiled = rule_engine(self._store).define(rule, tenant=self.tenant, actor=actor,
                                               reason=reason, principal=self.principal)
        return rule_json(compiled)

    def rules(self) -> list[RuleInfo]:
        return [rule_json(r) for r in rule_engine(self._store).rules(self.tenant)]

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
        return self._store.bulk.create(self.tenant, type_name, req.data, id=req.id,
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
            entities = self._store.bulk.create_many(self.tenant, type_name, req.rows,
                                                    on_conflict=req.on_conflict, actor=actor,
                                                    reason=reason, trace_id=trace_id,
                                                    principal=self.principal, progress=callback,
                                                    ttl=req.ttl, expires_at=req.expires_at)
        finally:
            if bar is not None:
                bar.close()
        self._engine.drain()
        return entities

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        req = requests.EntityGet.of(as_of=as_of)
        return self._store.timetravel.get(self.tenant, entity_id, req.as_of)

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        req = requests.EntityQuery.of(where=where, order_by=order_by, limit=limit, cursor=cursor,
                                      as_of=as_of)
        return self._store.queries.query(self.tenant, type_name, req.where, req.order_by, req.limit,
                                         req.cursor, req.as_of,
                                         max_limit=self.settings.max_page_size)

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        req = requests.EntityCount.of(where=where, as_of=as_of)
        return self._store.queries.count(self.tenant, type_name, req.where, req.as_of)

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        req = requests.EntityUpdate.of(data=changes, ttl=ttl, expires_at=expires_at)
        return self._store.writes.update(self.tenant, entity_id, req.data,
                                         expected_version=expected_version, actor=actor,
                                         reason=reason, trace_id=trace_id, principal=self.principal,
                                         ttl=req.ttl, expires_at=req.expires_at)

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        req = requests.EntityAppend.of(field=field, values=values)
        return self._store.writes.append(self.tenant, entity_id, req.field, req.values,
                                         expected_version=expected_version, actor=actor,
                                         reason=reason, trace_id=trace_id, principal=self.principal)

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        return self._store.writes.delete(self.tenant, entity_id, expected_version=expected_version,
                                         actor=actor, reason=reason, trace_id=trace_id,
                                         principal=self.principal)

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        return self._store.writes.restore(self.tenant, entity_id, expected_version=expected_version,
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
        return self._store.writes.erase(self.tenant, entity_id, actor=actor, reason=reason,
                                        trace_id=trace_id, principal=self.principal)

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        req = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id)
        return self._store.relations.link(self.tenant, req.from_id, req.relation, req.to_id,
                                          actor=actor, reason=reason, trace_id=trace_id,
                                          principal=self.principal)

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        req = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id)
        return self._store.relations.unlink(self.tenant, req.from_id, req.relation, req.to_id,
                                            actor=actor, reason=reason, trace_id=trace_id,
                                            principal=self.principal)

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        req = requests.RelatedQuery.of(relation=relation, direction=direction, depth=depth,
                                       as_of=as_of)
        return self._store.relations.related(self.tenant, entity_id, req.relation, req.direction,
                                             req.depth, req.as_of)

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        return self._store.history(self.tenant, entity_id)

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        req = requests.EventsQuery.of(since_seq=since_seq, until_seq=until_seq, limit=limit)
        return self._store.events(self.tenant, req.since_seq, req.until_seq, req.limit)

    def verify_audit(self) -> AuditReport:
        return self._store.verify_audit()

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

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        req = requests.ConstraintQuery.of(where=where, limit=limit, cursor=cursor, as_of=as_of)
        return self.query(CONSTRAINT_TYPE, {**(req.where or {}), "status": "open"},
                          order_by=["created_at"], limit=req.limit, cursor=req.cursor,
                          as_of=req.as_of)


def _documented_by(cls: type, protocol: type) -> None:
    """Give each method of ``cls`` that has no docstring the one of the protocol's method of
    that name (the one place it is written), so ``help()`` and the API reference show it."""
    for name, member in vars(cls).items():
        if callable(member) and member.__doc__ is None and callable(getattr(protocol, name,
                                                                            None)):
            member.__doc__ = getattr(protocol, name).__doc__


_documented_by(MemoryCore, MemoryAPI)
