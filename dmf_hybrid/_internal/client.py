"""MemoryClient: the HTTP front door with the same methods, results and exceptions as Memory.

    with MemoryClient("http://127.0.0.1:8000", api_key="...") as mem:
        trip = mem.create("Trip", {"user": "linwei", "destination": "Shanghai"})
        trip.data.destination            # the type's model, built from its definition
        mem.update(trip.id, {"budget": 3000}, expected_version=trip.version)  # If-Match

Differences from Memory: the API key decides the tenant (no ``for_tenant``); ``snapshot`` and
``archive_events`` take a name (the server puts the files under its data directory);
``summarize`` takes no ``summariser`` (plug-ins run in the server process); no ``transaction``
(see the plans API); ``open``, ``restore_snapshot`` and ``engine`` exist only in-process.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pydantic
from pydantic import BaseModel

from . import operations, requests
from .checks import (
    AsOf,
)
from .conversations import MESSAGE_TYPE
from .encoding import (
    audit_headers,
    field_adapter,
    id_segment,
    jsonable,
    type_segment,
    typedef_body,
)
from .errors import (
    DMFError,
    SchemaError,
    ServiceUnavailable,
    ValidationError,
)
from .expiry import TTL, ExpiresAt
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
    decoding,
)
from .profiles import GroupContext, SearchProfile
from .protocol import MemoryAPI
from .ruledefs import RuleDef, load_rules_toml
from .schema import EntityType, RelationSpec, TypeDef, build_model, load_toml, typedef_from_model
from .transport import Exchange
from .wire import (
    CountPublic,
    HeadPublic,
    LinkPublic,
    SeqPublic,
    TypePublic,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0  # the first search after a cold start waits for the model (~11 s)

Result = TypeVar("Result", bound=BaseModel)


class _Decoder:
    """The client's EntityDecoder: entity data typed by the client's models of the types."""

    def __init__(self, client: MemoryClient) -> None:
        self._client = client

    def data(self, type_name: str, data: dict[str, Any]) -> Any:
        return self._client._decode_data(type_name, data)  # noqa: SLF001 - its own client

    def fields(self, type_name: str, fields: dict[str, Any]) -> dict[str, Any]:
        return self._client._decode_fields(type_name, fields)  # noqa: SLF001


class MemoryClient(MemoryAPI):
    """A Memory over HTTP: same method names, arguments, return types and exceptions.

    Every public method is a :class:`~dmf_hybrid._internal.protocol.MemoryAPI` method (its docstring
    lives there); ``health`` and ``readiness`` are the service's own checks.

    Each answer says the audit seq its process had reached (``X-DMF-Seq``); with
    ``read_your_writes`` (the default) every request asks for at least the newest seq the
    client has been told (``X-DMF-Min-Seq``), so it reads its own writes, and never a state
    older than one it has seen, whichever process of the service answers (``seen_seq()``).
    """

    def __init__(self, base_url: str, api_key: str | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None, *,
                 read_your_writes: bool = True) -> None:
        self.base_url = base_url
        self._exchange = Exchange(base_url, api_key, timeout, transport, read_your_writes)
        self._types: dict[str, EntityType] = {}
        self._user_models: dict[str, type[BaseModel]] = {}
        self._lock = threading.Lock()
        self._decoding = decoding(_Decoder(self))

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        self._exchange.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryClient({self.base_url!r})"

    # ---------------------------------------------------------------- transport

    def seen_seq(self) -> int:
        return self._exchange.seen_seq

    @property
    def read_your_writes(self) -> bool:
        """Whether each request asks for at least ``seen_seq()`` (``X-DMF-Min-Seq``)."""
        return self._exchange.read_your_writes

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self._exchange.send(method, path, **kwargs)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    def _get(self, result: type[Result], method: str, path: str, **kwargs: Any) -> Result:
        """The answer to one request, decoded as ``result`` (entities typed by their model)."""
        return result.model_validate(self._call(method, path, **kwargs),
                                     context=self._decoding)

    def _list(self, item: type[Result], method: str, path: str, **kwargs: Any) -> list[Result]:
        return [item.model_validate(x, context=self._decoding)
                for x in self._call(method, path, **kwargs)]

    _audit = staticmethod(audit_headers)

    # ---------------------------------------------------------------- decoding

    def _decode_data(self, type_name: str, data: dict[str, Any]) -> Any:
        """An entity's JSON data as its type's model (the caller's own model after define)."""
        try:
            return self._model_for(type_name).model_validate(data)
        except pydantic.ValidationError:
            # the type changed on the server (a migration) or a local model is stricter
            self._user_models.pop(type_name, None)
        try:
            return self._model_for(type_name, refresh=True).model_validate(data)
        except (pydantic.ValidationError, DMFError):
            log.warning("an entity does not fit type %s; data left as a dict", type_name)
            return dict(data)

    def _decode_fields(self, type_name: str, fields: dict[str, Any]) -> dict[str, Any]:
        """JSON field values as the type's Python values (dates, ...), like Memory gives them."""
        try:
            model = self._model_for(type_name)
        except DMFError:
            return dict(fields)
        out: dict[str, Any] = {}
        for name, value in fields.items():
            adapter = field_adapter(model, name)
            try:
                out[name] = value if adapter is None else adapter.validate_python(value)
            except pydantic.ValidationError:
                out[name] = value
        return out

    def _type_from(self, info: TypePublic) -> EntityType:
        typedef = info.definition
        user = self._user_models.get(typedef.name)
        etype = EntityType(typedef, info.version, user or build_model(typedef))
        with self._lock:
            self._types[typedef.name] = etype
        return etype

    def _model_for(self, type_name: str, refresh: bool = False) -> type[BaseModel]:
        etype = None if refresh else self._types.get(type_name)
        if etype is None:
            etype = self._type_from(self._get(TypePublic, "GET",
                                              f"/types/{type_segment(type_name)}"))
        return etype.model

    # ---------------------------------------------------------------- schema

    def last_seq(self) -> int:
        return self._get(HeadPublic, "GET", "/audit/head").last_seq

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
        etype = self.define_type(typedef, actor=actor, reason=reason)
        with self._lock:
            self._user_models[etype.name] = model
            etype = EntityType(etype.typedef, etype.version, model)
            self._types[etype.name] = etype
        return etype

    def define_type(self, typedef: TypeDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> EntityType:
        info = self._get(TypePublic, "POST", "/types", json=typedef_body(typedef),
                         headers=self._audit(actor=actor, reason=reason))
        self._user_models.pop(info.name, None)
        return self._type_from(info)

    def load_definitions(self, path: str | Path, *, actor: str | None = None
                         ) -> list[EntityType]:
        reason = f"load {Path(path).name}"
        typedefs, rules = load_toml(path), load_rules_toml(path)
        # in one request, so one transaction: the file's types may target each other
        infos = self._list(TypePublic, "POST", "/types/batch",
                           json=[typedef_body(t) for t in typedefs],
                           headers=self._audit(actor=actor, reason=reason)) if typedefs else []
        types = []
        for info in infos:
            self._user_models.pop(info.name, None)
            types.append(self._type_from(info))
        for rule in rules:
            self.define_rule(rule, actor=actor, reason=reason)
        return types

    def define_rule(self, rule: RuleDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> RuleInfo:
        if isinstance(rule, RuleDef):
            body: Any = rule.model_dump(mode="json")
        elif isinstance(rule, Mapping):
            body = jsonable(dict(rule), "rule")
        else:
            raise SchemaError("a rule must be an object", field="rule")
        return self._get(RuleInfo, "POST", "/rules", json=body,
                         headers=self._audit(actor=actor, reason=reason))

    def rules(self) -> list[RuleInfo]:
        return self._list(RuleInfo, "GET", "/rules")

    def types(self) -> list[EntityType]:
        return [self._type_from(t) for t in self._list(TypePublic, "GET", "/types")]

    def get_type(self, name: str) -> EntityType:
        return self._type_from(self._get(TypePublic, "GET", f"/types/{type_segment(name)}"))

    # ---------------------------------------------------------------- entities

    def create(self, type_name: str, data: Mapping[str, Any] | BaseModel, *,
               id: str | None = None, on_conflict: str = "return", actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        body = requests.EntityCreate.of(data=data, id=id, on_conflict=on_conflict, ttl=ttl,
                                        expires_at=expires_at).body()
        return self._get(Entity, "POST", f"/entities/{type_segment(type_name)}", json=body,
                         headers=self._audit(actor, reason, trace_id))

    def create_many(self, type_name: str, rows: Sequence[Mapping[str, Any] | BaseModel], *,
                    progress: Callable[[int], None] | bool | None = None,
                    on_conflict: str = "return", actor: str | None = None,
                    reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
                    expires_at: ExpiresAt = None) -> list[Entity]:
        body = requests.EntityBatchCreate.of(rows=rows, on_conflict=on_conflict, ttl=ttl,
                                             expires_at=expires_at).body()
        entities = self._list(Entity, "POST", f"/entities/{type_segment(type_name)}/batch",
                              json=body, headers=self._audit(actor, reason, trace_id))
        if callable(progress):
            progress(len(entities))
        return entities

    def add_messages(self, conversation: str, messages: Sequence[Mapping[str, Any]], *,
                     type_name: str = MESSAGE_TYPE, actor: str | None = None,
                     reason: str | None = None, trace_id: str | None = None) -> list[Entity]:
        body = requests.MessagesAppend.of(messages=messages, type_name=type_name).body()
        return self._list(Entity, "POST",
                          f"/conversations/{id_segment(conversation, 'conversation')}/messages",
                          json=body, headers=self._audit(actor, reason, trace_id))

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        return self._get(Entity, "GET", f"/entities/{id_segment(entity_id)}",
                         params=requests.EntityGet.of(as_of=as_of).body())

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        return self._get(Page, "POST", f"/entities/{type_segment(type_name)}/query",
                         json=requests.EntityQuery.of(where=where, order_by=order_by, limit=limit,
                                                      cursor=cursor, as_of=as_of).body())

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        return self._get(CountPublic, "POST", f"/entities/{type_segment(type_name)}/count",
                         json=requests.EntityCount.of(where=where, as_of=as_of).body()).count

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        body = requests.EntityUpdate.of(data=changes, ttl=ttl, expires_at=expires_at).body()
        return self._get(Entity, "PATCH", f"/entities/{id_segment(entity_id)}", json=body,
                         headers=self._audit(actor, reason, trace_id, expected_version))

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        headers = self._audit(actor, reason, trace_id, expected_version)
        body = requests.EntityAppend.of(field=field, values=values).body()
        return self._get(Entity, "POST", f"/entities/{id_segment(entity_id)}/append",
                         json=body, headers=headers)

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        headers = self._audit(actor, reason, trace_id, expected_version)
        return self._get(Entity, "DELETE", f"/entities/{id_segment(entity_id)}",
                         headers=headers)

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        headers = self._audit(actor, reason, trace_id, expected_version)
        return self._get(Entity, "POST", f"/entities/{id_segment(entity_id)}/restore",
                         headers=headers)

    def erase(self, entity_id: str, *, actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> int:
        return self._get(SeqPublic, "POST", f"/entities/{id_segment(entity_id)}/erase",
                         headers=self._audit(actor, reason, trace_id)).seq

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        body = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id).body()
        return self._get(LinkPublic, "POST", "/relations", json=body,
                         headers=self._audit(actor, reason, trace_id)).linked

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        body = requests.LinkRequest.of(from_id=from_id, relation=relation, to_id=to_id).body()
        return self._get(SeqPublic, "DELETE", "/relations", json=body,
                         headers=self._audit(actor, reason, trace_id)).seq

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        query = requests.RelatedQuery.of(relation=relation, direction=direction, depth=depth,
                                         as_of=as_of)
        return self._list(Related, "GET", f"/entities/{id_segment(entity_id)}/related",
                          params=query.body())

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        return self._list(AuditEvent, "GET", f"/entities/{id_segment(entity_id)}/history")

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        query = requests.EventsQuery.of(since_seq=since_seq, until_seq=until_seq, limit=limit)
        return self._list(AuditEvent, "GET", "/audit/events", params=query.body())

    def verify_audit(self) -> AuditReport:
        return self._get(AuditReport, "GET", "/audit/verify")

    # ---------------------------------------------------------------- search & admin

    def search(self, type_name: str, text: str | None = None, *,
               where: Mapping[str, Any] | None = None, k: int = 10, mode: str = "hybrid",
               related_to: Mapping[str, Any] | None = None, as_of: AsOf = None,
               conversation: str | None = None,
               reference_time: dt.datetime | dt.date | str | None = None) -> SearchResult:
        body = requests.SearchRequest.of(
            type=type_name, text=text, where=where, k=k, mode=mode, related_to=related_to,
            as_of=as_of, conversation=conversation, reference_time=reference_time).body()
        return self._get(SearchResult, "POST", "/search", json=body)

    def reconcile(self) -> ReconcileCounts:
        return self._get(ReconcileCounts, "POST", "/admin/reconcile")

    def reindex(self) -> ReindexCounts:
        return self._get(ReindexCounts, "POST", "/admin/reindex")

    def sweep_expired(self) -> int:
        return int(self._call("POST", "/admin/sweep")["swept"])

    def flush(self) -> int:
        return int(self._call("POST", "/admin/flush")["applied"])

    def export(self, dest: str | Path, *, tenant: str | None = None) -> BundleManifest:
        body: dict[str, Any] = {"name": str(dest)}
        if tenant is not None:
            body["tenant"] = tenant
        return self._get(BundleManifest, "POST", "/admin/export", json=body)

    def snapshot(self, dest: str | Path) -> SnapshotManifest:
        return self._get(SnapshotManifest, "POST", "/admin/snapshot", json={"name": str(dest)})

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5,
                conversation: str | None = None, turns: int | None = None) -> MemoryContext:
        body = requests.ContextRequest.of(
            focus_ids=focus_ids, query=query, budget_tokens=budget_tokens, as_of=as_of, k=k,
            conversation=conversation, turns=turns).body()
        return self._get(MemoryContext, "POST", "/context", json=body)

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        if summariser is not None:
            raise ValidationError(
                "a summariser cannot be sent over HTTP: summariser plug-ins run in the server "
                "process (call Memory.summarize there, or leave summariser out)",
                field="summariser")
        body = requests.SummaryRequest.of(scope=scope, since_seq=since_seq,
                                          until_seq=until_seq).body()
        return self._get(SummaryResult, "POST", "/summaries", json=body,
                         headers=self._audit(actor=actor, reason=reason))

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        body = operations.ArchiveRequest.of(before_seq=before_seq, dest=dest).body()
        return self._get(ArchiveResult, "POST", "/admin/archive", json=body,
                         headers=self._audit(actor=actor, reason=reason))

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        return self._get(Page, "POST", "/constraints/query",
                         json=requests.ConstraintQuery.of(where=where, limit=limit, cursor=cursor,
                                                          as_of=as_of).body())

    # ---------------------------------------------------------------- agent tools

    def tools(self, format: str = "openai", *, profile: str = "compact",
              internal: bool = False) -> list[JSONObject]:
        query = operations.ToolsQuery.of(format=format, profile=profile, internal=internal)
        definitions: list[JSONObject] = self._call(
            "GET", "/tools", params={"format": query.format, "profile": query.profile,
                                     "internal": "true" if query.internal else "false"})
        return definitions

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> JSONValue:
        call = operations.ToolCall.of(name=name, arguments=arguments)
        result: JSONValue = self._call("POST", f"/tools/{quote(call.name, safe='')}",
                                       json=call.body()["arguments"],
                                       headers=self._audit(actor, reason, trace_id))
        return result

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> PlanOutcome:
        return self._get(PlanOutcome, "POST", "/plans/execute",
                         json=operations.PlanRequest.of(ops=ops, dry_run=dry_run).body(),
                         headers=self._audit(actor, reason, trace_id))

    # ---------------------------------------------------------------- the service's own

    def health(self) -> dict[str, str]:
        """The liveness answer of ``/healthz``."""
        return dict(self._call("GET", "/healthz"))

    def readiness(self) -> dict[str, Any]:
        """The readiness report of ``/readyz`` (``ready`` false, with ``problems``, on 503)."""
        try:
            return dict(self._call("GET", "/readyz"))
        except ServiceUnavailable as exc:
            if "ready" in exc.details:
                return dict(exc.details)
            raise


#: mypy checks that MemoryClient is a complete MemoryAPI (no member missing or mistyped).
_CONTRACT: type[MemoryAPI] = MemoryClient
