"""MemoryClient: the HTTP front door with the same methods, results and exceptions as Memory.

    with MemoryClient("http://127.0.0.1:8000", api_key="...") as mem:
        trip = mem.create("Trip", {"user": "linwei", "destination": "Shanghai"})
        trip.data.destination            # the type's model, built from its definition
        mem.update(trip.id, {"budget": 3000}, expected_version=trip.version)  # If-Match

Differences from Memory: the API key decides the tenant (no ``for_tenant``); ``snapshot``
and ``archive_events`` take a name (the server puts the files under its data directory);
``load_definitions`` sends one type or rule at a time; ``summarize`` takes no ``summariser``
(plug-ins run in the server process); there is no ``transaction`` (see the plans API), and
``open``, ``restore_snapshot`` and ``engine`` exist only in-process.
"""

from __future__ import annotations

import datetime as dt
import functools
import json as json_module
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pydantic
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from . import __version__
from .errors import DMFError, SchemaError, ServiceUnavailable, ValidationError, error_from_payload
from .lifecycle.archive import ArchiveResult
from .lifecycle.context import MemoryContext
from .lifecycle.rules import RuleDef, load_rules_toml
from .lifecycle.summaries import SummaryResult
from .models import AuditEvent, AuditReport, Entity, Page, Related
from .schema import EntityType, RelationSpec, TypeDef, build_model, load_toml, typedef_from_model
from .search.results import Hit, LegScore, Receipt, SearchResult

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0  # the first search after a cold start waits for the model (~11 s)

AsOf = int | dt.datetime | None


def _segment(value: Any, field: str, is_id: bool = True) -> str:
    """A value as one URL path segment (IDs that could not be one are rejected like Memory)."""
    if not isinstance(value, str):
        what = "an ID string" if is_id else "a type name string"
        raise ValidationError(f"{field} must be {what}", field=field)
    if is_id and (not value or "/" in value or value in (".", "..")):
        raise ValidationError(f"{field} must be an ID string", field=field)
    return quote(value, safe="")


def _jsonable(value: Any, field: str) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise ValidationError(f"{field} is not JSON-serialisable: {exc}", field=field) from None


def _as_of_value(as_of: Any) -> int | str | None:
    if as_of is None:
        return None
    if isinstance(as_of, bool) or not isinstance(as_of, (int, dt.datetime)):
        raise ValidationError("as_of must be an audit seq (int) or a datetime", field="as_of")
    if isinstance(as_of, int):
        if as_of < 0:
            raise ValidationError("as_of seq must be >= 0", field="as_of")
        return as_of
    return as_of.isoformat()


@functools.lru_cache(maxsize=1024)  # building an adapter costs far more than using it
def _field_adapter(model: type[BaseModel], name: str) -> pydantic.TypeAdapter[Any] | None:
    info = model.model_fields.get(name)
    if info is None or info.annotation is None:
        return None
    return pydantic.TypeAdapter(info.annotation)


def _check_text(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    return value


class MemoryClient:
    """A Memory over HTTP: same method names, arguments, return types and exceptions."""

    def __init__(self, base_url: str, api_key: str | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"User-Agent": f"dmf-hybrid-client/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout,
                                  transport=transport)
        self._types: dict[str, EntityType] = {}
        self._user_models: dict[str, type[BaseModel]] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryClient({self.base_url!r})"

    # ---------------------------------------------------------------- transport

    def _send(self, method: str, path: str, *, json: Any = None,
              params: Mapping[str, Any] | None = None,
              headers: Mapping[str, str] | None = None) -> httpx.Response:
        all_headers = dict(headers or {})
        content = None
        if json is not None:
            try:
                content = json_module.dumps(json, ensure_ascii=False, separators=(",", ":"),
                                            allow_nan=False).encode("utf-8")
            except ValueError:
                raise ValidationError("numbers must be finite (NaN and Infinity are not JSON)",
                                      field="body") from None
            all_headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(
                method, path, content=content,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=all_headers)
        except httpx.TimeoutException as exc:
            raise ServiceUnavailable(f"{method} {path}: timed out ({exc})",
                                     url=self.base_url) from exc
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"cannot reach {self.base_url}: {exc}",
                                     url=self.base_url) from exc
        if response.status_code >= 400:
            raise self._error(response)
        return response

    @staticmethod
    def _error(response: httpx.Response) -> DMFError:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if isinstance(payload, dict) and "error" in payload:
            return error_from_payload(payload, response.status_code)
        text = response.text[:200]
        return DMFError(f"HTTP {response.status_code}: {text}", status=response.status_code)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    @staticmethod
    def _audit(actor: Any = None, reason: Any = None, trace_id: Any = None,
               expected_version: Any = None) -> dict[str, str]:
        headers = {}
        for header, name, value in (("X-Actor", "actor", actor), ("X-Reason", "reason", reason),
                                    ("X-Trace-Id", "trace_id", trace_id)):
            text = _check_text(name, value)
            if text is not None:
                headers[header] = quote(text, safe="")
        if expected_version is not None:
            if isinstance(expected_version, bool) or not isinstance(expected_version, int):
                raise ValidationError("expected_version must be an integer",
                                      field="expected_version")
            headers["If-Match"] = f'"{expected_version}"'
        return headers

    # ---------------------------------------------------------------- result decoding

    def _type_from(self, payload: Mapping[str, Any]) -> EntityType:
        typedef = TypeDef.model_validate(payload["definition"])
        user = self._user_models.get(typedef.name)
        etype = EntityType(typedef, int(payload["version"]), user or build_model(typedef))
        with self._lock:
            self._types[typedef.name] = etype
        return etype

    def _model_for(self, type_name: str, refresh: bool = False) -> type[BaseModel]:
        etype = None if refresh else self._types.get(type_name)
        if etype is None:
            payload = self._call("GET", f"/types/{_segment(type_name, 'type', False)}")
            etype = self._type_from(payload)
        return etype.model

    def _entity(self, payload: Mapping[str, Any]) -> Entity:
        type_name = payload["type"]
        data = payload["data"]
        try:
            model_data: Any = self._model_for(type_name).model_validate(data)
        except pydantic.ValidationError:
            # the type changed on the server (a migration) or a local model is stricter
            self._user_models.pop(type_name, None)
            try:
                model_data = self._model_for(type_name, refresh=True).model_validate(data)
            except pydantic.ValidationError:
                log.warning("entity %s does not fit type %s; data left as a dict",
                            payload.get("id"), type_name)
                model_data = dict(data)
        return Entity.model_validate({**payload, "data": model_data})

    def _python_fields(self, type_name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """JSON field values as the type's Python values (dates, ...), like Memory gives them."""
        try:
            model = self._model_for(type_name)
        except DMFError:
            return dict(fields)
        out: dict[str, Any] = {}
        for name, value in fields.items():
            adapter = _field_adapter(model, name)
            try:
                out[name] = value if adapter is None else adapter.validate_python(value)
            except pydantic.ValidationError:
                out[name] = value
        return out

    def _page(self, payload: Mapping[str, Any]) -> Page:
        return Page(items=[self._entity(e) for e in payload["items"]],
                    next_cursor=payload.get("next_cursor"), as_of_seq=payload.get("as_of_seq"))

    # ---------------------------------------------------------------- schema

    @property
    def last_seq(self) -> int:
        """The audit seq of the newest event."""
        return int(self._call("GET", "/audit/head")["last_seq"])

    def define(self, model: type[BaseModel], *, identity: Sequence[str] | None = None,
               relations: Mapping[str, RelationSpec | Mapping[str, Any]] | None = None,
               embed: str | None = None, name: str | None = None,
               actor: str | None = None, reason: str | None = None,
               analyzer: str | None = None) -> EntityType:
        """Register a pydantic model as an entity type; its entities come back as ``model``."""
        typedef = typedef_from_model(model, name=name, identity=identity, relations=relations,
                                     embed=embed, analyzer=analyzer)
        etype = self.define_type(typedef, actor=actor, reason=reason)
        with self._lock:
            self._user_models[etype.name] = model
            etype = EntityType(etype.typedef, etype.version, model)
            self._types[etype.name] = etype
        return etype

    def define_type(self, typedef: TypeDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> EntityType:
        """Register a type given as data (the TOML / JSON form)."""
        if isinstance(typedef, TypeDef):
            body: Any = typedef.model_dump(mode="json")
        elif isinstance(typedef, Mapping):
            body = _jsonable(dict(typedef), "typedef")
        else:
            raise SchemaError(f"invalid type definition: expected an object, not "
                              f"{type(typedef).__name__}")
        payload = self._call("POST", "/types", json=body,
                             headers=self._audit(actor=actor, reason=reason))
        self._user_models.pop(str(payload["name"]), None)
        return self._type_from(payload)

    def load_definitions(self, path: str | Path, *, actor: str | None = None
                         ) -> list[EntityType]:
        """Register every type (and rule) of an ``indexes/*.toml`` file (one request each)."""
        reason = f"load {Path(path).name}"
        typedefs, rules = load_toml(path), load_rules_toml(path)
        types = [self.define_type(t, actor=actor, reason=reason) for t in typedefs]
        for rule in rules:
            self.define_rule(rule, actor=actor, reason=reason)
        return types

    def define_rule(self, rule: Any, *, actor: str | None = None,
                    reason: str | None = None) -> dict[str, Any]:
        """Register a rule (a RuleDef or its TOML / JSON form); its definition and version."""
        if isinstance(rule, RuleDef):
            body: Any = rule.model_dump(mode="json")
        elif isinstance(rule, Mapping):
            body = _jsonable(dict(rule), "rule")
        else:
            raise SchemaError("a rule must be an object", field="rule")
        return dict(self._call("POST", "/rules", json=body,
                               headers=self._audit(actor=actor, reason=reason)))

    def rules(self) -> list[dict[str, Any]]:
        """Every active rule: definition, version and the relations it depends on."""
        return [dict(r) for r in self._call("GET", "/rules")]

    def types(self) -> list[EntityType]:
        """Every registered entity type."""
        return [self._type_from(t) for t in self._call("GET", "/types")]

    def get_type(self, name: str) -> EntityType:
        """One registered entity type."""
        return self._type_from(self._call("GET", f"/types/{_segment(name, 'type', False)}"))

    # ---------------------------------------------------------------- entities

    def create(self, type_name: str, data: Mapping[str, Any] | BaseModel, *, id: str | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Create an entity; the same identity again returns the existing one (created=False)."""
        body = {"data": _jsonable(data, "data"), "id": id}
        payload = self._call("POST", f"/entities/{_segment(type_name, 'type', False)}",
                             json=body, headers=self._audit(actor, reason, trace_id))
        return self._entity(payload)

    def create_many(self, type_name: str, rows: Sequence[Mapping[str, Any] | BaseModel], *,
                    progress: Callable[[int], None] | bool | None = None,
                    actor: str | None = None, reason: str | None = None,
                    trace_id: str | None = None) -> list[Entity]:
        """Create many entities in one request (progress is reported once, at the end)."""
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
            raise ValidationError("rows must be a list of objects", field="rows")
        body = {"rows": [_jsonable(r, "rows") for r in rows]}
        payload = self._call("POST", f"/entities/{_segment(type_name, 'type', False)}/batch",
                             json=body, headers=self._audit(actor, reason, trace_id))
        entities = [self._entity(e) for e in payload]
        if callable(progress):
            progress(len(entities))
        return entities

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        """The entity now or at ``as_of`` (seq or datetime); NotFound if absent or deleted."""
        payload = self._call("GET", f"/entities/{_segment(entity_id, 'entity_id')}",
                             params={"as_of": _as_of_value(as_of)})
        return self._entity(payload)

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        """One page of entities matching ``where`` in a deterministic order."""
        body = {"where": _jsonable(where, "where"), "order_by": _jsonable(order_by, "order_by"),
                "limit": limit, "cursor": cursor, "as_of": _as_of_value(as_of)}
        payload = self._call("POST", f"/entities/{_segment(type_name, 'type', False)}/query",
                             json=body)
        return self._page(payload)

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        """How many entities of a type match ``where``."""
        body = {"where": _jsonable(where, "where"), "as_of": _as_of_value(as_of)}
        payload = self._call("POST", f"/entities/{_segment(type_name, 'type', False)}/count",
                             json=body)
        return int(payload["count"])

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Change fields; VersionConflict if ``expected_version`` (sent as If-Match) is stale."""
        headers = self._audit(actor, reason, trace_id, expected_version)
        payload = self._call("PATCH", f"/entities/{_segment(entity_id, 'entity_id')}",
                             json={"data": _jsonable(changes, "changes")}, headers=headers)
        return self._entity(payload)

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Append to a list field atomically."""
        headers = self._audit(actor, reason, trace_id, expected_version)
        body = {"field": field, "values": _jsonable(values, "values")}
        payload = self._call("POST", f"/entities/{_segment(entity_id, 'entity_id')}/append",
                             json=body, headers=headers)
        return self._entity(payload)

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Soft-delete (restorable; still visible to ``as_of`` reads before it)."""
        headers = self._audit(actor, reason, trace_id, expected_version)
        payload = self._call("DELETE", f"/entities/{_segment(entity_id, 'entity_id')}",
                             headers=headers)
        return self._entity(payload)

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        """Undo a soft delete."""
        headers = self._audit(actor, reason, trace_id, expected_version)
        payload = self._call("POST", f"/entities/{_segment(entity_id, 'entity_id')}/restore",
                             headers=headers)
        return self._entity(payload)

    def erase(self, entity_id: str, *, actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> int:
        """Remove an entity's content everywhere, keeping the audit chain verifiable."""
        payload = self._call("POST", f"/entities/{_segment(entity_id, 'entity_id')}/erase",
                             headers=self._audit(actor, reason, trace_id))
        return int(payload["seq"])

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        """Link two entities; False when the link already existed."""
        body = {"from_id": from_id, "relation": relation, "to_id": to_id}
        payload = self._call("POST", "/relations", json=body,
                             headers=self._audit(actor, reason, trace_id))
        return bool(payload["linked"])

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        """Remove a link; NotFound if it does not exist."""
        body = {"from_id": from_id, "relation": relation, "to_id": to_id}
        payload = self._call("DELETE", "/relations", json=body,
                             headers=self._audit(actor, reason, trace_id))
        return int(payload["seq"])

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        """Entities linked to ``entity_id`` (nearest first, then relation, then ID)."""
        params = {"relation": relation, "direction": direction, "depth": depth,
                  "as_of": _as_of_value(as_of)}
        payload = self._call("GET", f"/entities/{_segment(entity_id, 'entity_id')}/related",
                             params=params)
        return [Related(relation=r["relation"], direction=r["direction"], depth=r["depth"],
                        from_id=r["from_id"], entity=self._entity(r["entity"]))
                for r in payload]

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        """Every audit event of an entity, oldest first."""
        payload = self._call("GET", f"/entities/{_segment(entity_id, 'entity_id')}/history")
        return [AuditEvent.model_validate(e) for e in payload]

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """This tenant's audit events with since_seq < seq <= until_seq."""
        params = {"since_seq": since_seq, "until_seq": until_seq, "limit": limit}
        return [AuditEvent.model_validate(e)
                for e in self._call("GET", "/audit/events", params=params)]

    def verify_audit(self) -> AuditReport:
        """Verify the audit log's hash chain."""
        return AuditReport.model_validate(self._call("GET", "/audit/verify"))

    # ---------------------------------------------------------------- search & admin

    def search(self, type_name: str, text: str | None = None, *,
               where: Mapping[str, Any] | None = None, k: int = 10, mode: str = "hybrid",
               related_to: Mapping[str, Any] | None = None, as_of: AsOf = None) -> SearchResult:
        """Similarity search; hits are resolved from DuckDB (see SearchResult)."""
        body = {"type": type_name, "text": text, "where": _jsonable(where, "where"), "k": k,
                "mode": mode, "related_to": _jsonable(related_to, "related_to"),
                "as_of": _as_of_value(as_of)}
        payload = self._call("POST", "/search", json=body)
        hits = [Hit(entity=self._entity(h["entity"]), score=h["score"],
                    legs={leg: LegScore.model_validate(v) for leg, v in h["legs"].items()})
                for h in payload["hits"]]
        return SearchResult(hits=hits, receipt=Receipt.model_validate(payload["receipt"]))

    def reconcile(self) -> dict[str, int]:
        """Compare the vector index with DuckDB and repair drift; returns counts (admin)."""
        return dict(self._call("POST", "/admin/reconcile"))

    def reindex(self) -> dict[str, int]:
        """Rebuild the vector index from DuckDB and the embedding cache (admin)."""
        return dict(self._call("POST", "/admin/reindex"))

    def flush(self) -> int:
        """Process pending outbox rows now; returns how many were applied (admin)."""
        return int(self._call("POST", "/admin/flush")["applied"])

    def snapshot(self, name: str) -> dict[str, Any]:
        """Export the database to the server's ``data_dir/snapshots/<name>`` (admin)."""
        return dict(self._call("POST", "/admin/snapshot", json={"name": name}))

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5) -> MemoryContext:
        """A compact, deterministic prompt context (MemoryContext: text + data) within budget."""
        body = {"focus_ids": _jsonable(focus_ids, "focus_ids"), "query": query,
                "budget_tokens": budget_tokens, "as_of": _as_of_value(as_of), "k": k}
        result = MemoryContext.model_validate(self._call("POST", "/context", json=body))
        for item in (*result.focus, *result.constraints):
            item.fields = self._python_fields(item.type, item.fields)
        return result

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        """A MemorySummary of a scope's audit events in a window (SummaryResult; empty ok)."""
        if summariser is not None:
            raise ValidationError(
                "a summariser cannot be sent over HTTP: summariser plug-ins run in the server "
                "process (call Memory.summarize there, or leave summariser out)",
                field="summariser")
        body = {"scope": scope, "since_seq": since_seq, "until_seq": until_seq}
        payload = self._call("POST", "/summaries", json=body,
                             headers=self._audit(actor=actor, reason=reason))
        summary = payload.get("summary")
        return SummaryResult.model_validate(
            {**payload, "summary": None if summary is None else self._entity(summary)})

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        """Move audit events with seq < before_seq to Parquet on the server (ArchiveResult).

        Admin only. ``dest`` is a directory *name*: the server writes under its own
        ``data_dir/archives/<dest>`` and ``file.file`` is relative to its data directory.
        """
        if isinstance(before_seq, bool) or not isinstance(before_seq, int) or before_seq < 1:
            raise ValidationError("before_seq must be a positive integer", field="before_seq")
        if not isinstance(dest, (str, Path)):
            raise ValidationError("dest must be a directory name", field="dest")
        body = {"before_seq": before_seq, "dest": str(dest)}
        payload = self._call("POST", "/admin/archive", json=body,
                             headers=self._audit(actor=actor, reason=reason))
        return ArchiveResult.model_validate(payload)

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        """The work queue: open Constraint entities (oldest first), optionally filtered."""
        body = {"where": _jsonable(where, "where"), "limit": limit, "cursor": cursor,
                "as_of": _as_of_value(as_of)}
        return self._page(self._call("POST", "/constraints/query", json=body))

    # ---------------------------------------------------------------- agent tools

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """Function-calling definitions of the memory operations (see ``Memory.tools``)."""
        return list(self._call("GET", "/tools", params={"format": format}))

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> Any:
        """Execute one tool call; PlanError lists what is wrong with a bad call."""
        return self._call("POST", f"/tools/{_segment(name, 'name')}",
                          json=_jsonable(dict(arguments or {}), "arguments"),
                          headers=self._audit(actor, reason, trace_id))

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> dict[str, Any]:
        """Validate and run a multi-step plan atomically (or return its diff on dry_run)."""
        return dict(self._call("POST", "/plans/execute",
                               json={"ops": _jsonable(ops, "ops"), "dry_run": dry_run},
                               headers=self._audit(actor, reason, trace_id)))

    def health(self) -> dict[str, Any]:
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
