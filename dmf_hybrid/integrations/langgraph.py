"""LangGraph's long-term store over dmf-hybrid: ``DMFStore``, a ``BaseStore``.

Each item is one entity of the type ``LangGraphItem`` (namespace, key, value as a ``json``
field, the text its index fields make, its TTL), so every put is one audited entity write and
``history`` / ``as_of`` work on items. A put whose value is unchanged writes nothing; a put
after a delete restores the entity and updates it (two events).

Search: ``filter`` compares keys of the value (``{"a": {"b": 1}}`` and ``{"a.b": 1}`` both
address the nested key) with LangGraph's operators, compiled to path filters of the json
field; ``query`` is a vector search over the items' texts (one vector per item: the texts of
its index fields joined), its ``score`` the cosine similarity. Expired items are omitted from
every read; ``sweep_ttl`` deletes them.

The vectors come from the memory's embedder. With ``memory=None`` the store opens an
in-memory ``Memory`` embedding with ``index["embed"]`` (a model name this project loads, or
the caller's function / ``Embeddings`` wrapped as a ``CallerEmbedder`` with its own model
ID). Given a memory, ``index["embed"]`` must be that memory's model (checked at start).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from ..clock import utcnow
from ..errors import Conflict, FilterError
from ..protocol import MemoryAPI
from ..schema import FieldSpec, TypeDef
from .common import check_model, embedder_for, ensure_type, missing_extra, private_memory, scan

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
    from langgraph.store.base import (
        _validate_namespace as validate_namespace,
    )
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise missing_extra("LangGraph", "langgraph") from exc

ITEM_TYPE = "LangGraphItem"
FILTER_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
SEP = "."  # LangGraph labels never contain a period

ITEM_TYPEDEF = TypeDef(
    name=ITEM_TYPE,
    description="An item of a LangGraph store (dmf_hybrid.integrations.langgraph).",
    fields={
        "namespace": FieldSpec(type="str", required=True, nullable=False),
        "prefixes": FieldSpec(type="list", item="str", description="Every prefix of the "
                              "namespace, joined by periods: what a prefix search matches."),
        "key": FieldSpec(type="str", required=True, nullable=False),
        "value": FieldSpec(type="json"),
        "text": FieldSpec(type="str", description="The embedded text; null: not indexed."),
        "put_at": FieldSpec(type="datetime", description="When the value was last put."),
        "ttl_minutes": FieldSpec(type="float"),
        "expires_at": FieldSpec(type="datetime"),
    },
    identity=("namespace", "key"),
    embed="{text}",
)


def _joined(namespace: tuple[str, ...]) -> str:
    return SEP.join(namespace)


def translate_filter(flt: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """LangGraph's ``filter`` over an item's value as path filters on the ``value`` field."""
    terms: list[dict[str, Any]] = []

    def add(path: str, cond: Any) -> None:
        if isinstance(cond, Mapping) and any(str(k).startswith("$") for k in cond):
            for op in cond:
                if op not in FILTER_OPS:
                    raise FilterError(f"unsupported filter operator {op!r} (LangGraph's: "
                                      f"{', '.join(FILTER_OPS)})", field=f"filter.{path}")
            terms.append({f"value.{path}": dict(cond)})
        elif isinstance(cond, Mapping):
            for k, v in cond.items():
                add(f"{path}.{k}", v)
        elif isinstance(cond, list | tuple):
            raise FilterError("a filter compares with a string, a number or a boolean, not a "
                              "list", field=f"filter.{path}")
        else:
            terms.append({f"value.{path}": {"$eq": cond}})

    for key, cond in (flt or {}).items():
        add(str(key), cond)
    return terms


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[:len(path)] if condition.match_type == "prefix" else (
        namespace[len(namespace) - len(path):])
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class DMFStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are audited dmf-hybrid entities.

    ``memory``: a ``Memory`` or ``MemoryClient`` (None: an in-memory embedded one);
    ``index``: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``);
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``).
    """

    supports_ttl = True
    __slots__ = ("memory", "index_config", "ttl_config", "_fields", "_owned")

    def __init__(self, memory: MemoryAPI | None = None, *, index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None) -> None:
        self.index_config = index
        self.ttl_config = ttl
        embedder = None
        if index is not None:
            embedder = embedder_for(index.get("embed"), index.get("dims"))
        self._owned = memory is None
        self.memory: MemoryAPI = private_memory(embedder) if memory is None else memory
        fields = (index or {}).get("fields") or ["$"]
        self._fields = [(f, tokenize_path(f)) for f in fields]
        ensure_type(self.memory, ITEM_TYPEDEF)
        if memory is not None and index is not None and index.get("embed") is not None:
            check_model(self.memory, ITEM_TYPE, embedder)

    def close(self) -> None:
        """Close the memory if this store opened it."""
        if self._owned:
            self.memory.close()

    # ---------------------------------------------------------------- batch

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                validate_namespace(op.namespace)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # ---------------------------------------------------------------- ops

    def _live(self, now: dt.datetime) -> dict[str, Any]:
        return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now.isoformat()}}]}

    def _find(self, namespace: tuple[str, ...], key: str) -> Any:
        page = self.memory.query(ITEM_TYPE, {"namespace": _joined(namespace), "key": key},
                                 limit=1)
        return page.items[0] if page.items else None

    def _expired(self, entity: Any, now: dt.datetime) -> bool:
        expires = entity.data.expires_at
        return expires is not None and expires <= now

    def _refresh(self, entity: Any, now: dt.datetime) -> Any:
        minutes = entity.data.ttl_minutes
        if minutes is None:
            return entity
        return self.memory.update(entity.id, {
            "expires_at": (now + dt.timedelta(minutes=minutes)).isoformat()})

    def _item(self, entity: Any, cls: type[Item] = Item, score: float | None = None) -> Any:
        data = entity.data
        fields = {"namespace": tuple(data.namespace.split(SEP)), "key": data.key,
                  "value": data.value, "created_at": entity.created_at,
                  "updated_at": max(data.put_at, entity.created_at) if data.put_at else
                  entity.updated_at}
        if cls is SearchItem:
            return SearchItem(**fields, score=score)
        return Item(**fields)

    def _get(self, op: GetOp) -> Item | None:
        now = utcnow()
        entity = self._find(op.namespace, op.key)
        if entity is None or self._expired(entity, now):
            return None
        if op.refresh_ttl:
            entity = self._refresh(entity, now)
        return self._item(entity)  # type: ignore[no-any-return]

    def _text(self, value: Mapping[str, Any], index: Any) -> str | None:
        if self.index_config is None or index is False:
            return None
        paths = self._fields if index is None else [(p, tokenize_path(p)) for p in index]
        texts = [t for _, tokens in paths for t in get_text_at_path(value, tokens)]
        return "\n".join(texts) if texts else None

    def _put(self, op: PutOp) -> None:
        now = utcnow()
        current = self._find(op.namespace, op.key)
        if op.value is None:
            if current is not None:
                self.memory.delete(current.id)
            return
        ttl = op.ttl
        data = {
            "namespace": _joined(op.namespace),
            "prefixes": [_joined(op.namespace[:i]) for i in range(1, len(op.namespace) + 1)],
            "key": op.key, "value": dict(op.value), "text": self._text(op.value, op.index),
            "ttl_minutes": ttl,
            "expires_at": None if ttl is None else (now + dt.timedelta(minutes=ttl)).isoformat(),
        }
        if current is not None:
            old = current.data
            same = (old.value == data["value"] and old.text == data["text"]
                    and old.ttl_minutes == ttl and ttl is None)
            if not same:
                self.memory.update(current.id, {**data, "put_at": now.isoformat()})
            return
        data["put_at"] = now.isoformat()
        try:
            self.memory.create(ITEM_TYPE, data)
        except Conflict as exc:  # the item was deleted: it comes back, as it was put now
            eid = exc.details.get("entity_id")
            if not isinstance(eid, str):
                raise
            self.memory.restore(eid)
            self.memory.update(eid, data)

    def _where(self, op: SearchOp, now: dt.datetime) -> dict[str, Any]:
        terms: list[dict[str, Any]] = [self._live(now), *translate_filter(op.filter)]
        if op.namespace_prefix:
            terms.append({"prefixes": {"$contains": _joined(op.namespace_prefix)}})
        return {"$and": terms}

    def _search(self, op: SearchOp) -> list[SearchItem]:
        now = utcnow()
        if op.limit < 1 or op.offset < 0:
            return []
        where = self._where(op, now)
        found: list[tuple[Any, float | None]]
        if op.query and self.index_config is not None:
            where["$and"].append({"text": {"$ne": None}})
            hits = self.memory.search(ITEM_TYPE, op.query, where=where,
                                      k=op.offset + op.limit, mode="vector").hits
            found = [(h.entity, h.score) for h in hits[op.offset:]]
            if len(found) < op.limit:  # as LangGraph's stores do: unindexed items fill up
                where["$and"][-1] = {"text": None}
                found += [(e, None) for e in scan(self.memory, ITEM_TYPE, where, ["-put_at"],
                                                  stop=op.limit - len(found))]
        else:
            entities = list(scan(self.memory, ITEM_TYPE, where, ["-put_at"],
                                 stop=op.offset + op.limit))
            found = [(e, None) for e in entities[op.offset:]]
        if op.refresh_ttl:
            found = [(self._refresh(e, now), s) for e, s in found]
        return [self._item(e, SearchItem, s) for e, s in found]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        now = utcnow()
        where: dict[str, Any] = self._live(now)
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
                where = {"$and": [where, {"prefixes": {"$contains": _joined(cond.path)}}]}
        spaces = {tuple(e.data.namespace.split(SEP))
                  for e in scan(self.memory, ITEM_TYPE, where)}
        kept = [ns for ns in spaces
                if all(_matches(ns, c) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            kept = list({ns[:op.max_depth] for ns in kept})
        return sorted(kept)[op.offset:op.offset + op.limit]

    # ---------------------------------------------------------------- TTL

    def sweep_ttl(self) -> int:
        """Delete every expired item (audited deletes); returns how many."""
        now = utcnow()
        expired = list(scan(self.memory, ITEM_TYPE, {"expires_at": {"$lte": now.isoformat()}}))
        for entity in expired:
            self.memory.delete(entity.id)
        return len(expired)

    def entity_id(self, namespace: tuple[str, ...], key: str) -> str | None:
        """The entity ID of an item (for ``history`` and ``as_of`` reads), or None."""
        entity = self._find(tuple(namespace), key)
        return None if entity is None else str(entity.id)
