"""LangGraph's long-term store over dmf-hybrid: ``DMFStore``, a ``BaseStore``.

Each item is one entity of the type ``LangGraphItem`` (namespace, key, value as a ``json``
field, its TTL), so every put is one audited entity write and ``history`` / ``as_of`` work
on items. A put whose value is unchanged writes nothing; a put after a delete restores the
entity and updates it (two events).

Semantics are the reference store's (``langgraph.store.memory.InMemoryStore``):

- **Index**: with an ``index`` config, each text an item's index paths make (``fields``,
  default ``["$"]``, the whole value; a put's ``index=[...]`` replaces them for that item,
  ``index=False`` indexes nothing) is embedded on its own, as one ``LangGraphVector`` entity
  (see :mod:`.langgraph_values`).
- **Search** with a ``query`` ranks items by their best text's cosine similarity (``score``);
  ``offset`` / ``limit`` page that ranking; ``filter`` combines with it. Unindexed items fill
  a short page after the ranked ones, unscored. Without a query, items come newest put first.
- **batch** runs every read against the state before the batch's puts, then applies the
  puts (the last put of a key wins), as the reference store does; a ``PutOp`` given straight
  to ``batch`` is accepted as there (only the namespace labels are checked: empty, periods,
  non-strings are refused before anything runs).
- **TTL**: expired items are omitted from every read; ``sweep_ttl`` deletes them.

The vectors come from the memory's embedder. With ``memory=None`` the store opens an
in-memory ``Memory`` embedding with ``index["embed"]`` (a model name this project loads,
LangChain ``Embeddings``, a function of texts, sync or async, or a provider string LangChain
resolves), wrapped as a ``CallerEmbedder`` so documents and queries are embedded as that
object embeds them. Given a memory, ``index["embed"]`` must be that memory's model (checked
at start).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .._internal.clock import utcnow
from .._internal.errors import Conflict, DMFError, ValidationError
from .._internal.protocol import MemoryAPI
from .._internal.schema import FieldSpec, TypeDef
from .common import (
    MAX_K,
    PAGE,
    check_model,
    embedder_for,
    ensure_type,
    missing_extra,
    private_memory,
    scan,
)
from .langgraph_values import (
    check_filter,
    index_paths,
    index_texts,
    json_equal,
    matches,
    pushdown,
)

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
        ensure_embeddings,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise missing_extra("LangGraph", "langgraph") from exc

ITEM_TYPE = "LangGraphItem"
VECTOR_TYPE = "LangGraphVector"
SEP = "."  # LangGraph labels never contain a period
#: The path of the one vector of an item written before each text had its own.
JOINED = "$joined"
#: Most values one ``$in`` / ``$nin`` filter term holds.
MAX_IN = 10_000
#: Namespaces one item lookup names (each is two filter terms).
NAMESPACES_PER_LOOKUP = 50

ITEM_TYPEDEF = TypeDef(
    name=ITEM_TYPE,
    description="An item of a LangGraph store (dmf_hybrid.integrations.langgraph).",
    fields={
        "namespace": FieldSpec(type="str", required=True, nullable=False),
        "prefixes": FieldSpec(type="list", item="str", description="Every prefix of the "
                              "namespace, joined by periods: what a prefix search matches."),
        "key": FieldSpec(type="str", required=True, nullable=False),
        "value": FieldSpec(type="json"),
        "text": FieldSpec(type="str", description="The texts of its index paths, one a line "
                          "(each embedded as a LangGraphVector); null: not indexed."),
        "put_at": FieldSpec(type="datetime", description="When the value was last put."),
        "ttl_minutes": FieldSpec(type="float"),
        "expires_at": FieldSpec(type="datetime"),
    },
    identity=("namespace", "key"),
)

VECTOR_TYPEDEF = TypeDef(
    name=VECTOR_TYPE,
    description="One embedded text of a LangGraph item (dmf_hybrid.integrations.langgraph).",
    fields={
        "item": FieldSpec(type="str", required=True, nullable=False,
                          description="The entity ID of the item."),
        "path": FieldSpec(type="str", required=True, nullable=False,
                          description="The index path that made the text (path.i: its i-th)."),
        "namespace": FieldSpec(type="str"),
        "prefixes": FieldSpec(type="list", item="str"),
        "key": FieldSpec(type="str"),
        "text": FieldSpec(type="str", description="null: the item no longer makes this text."),
        "value": FieldSpec(type="json", description="The item's value (what filters read)."),
    },
    identity=("item", "path"),
    embed="{text}",
)


def _joined(namespace: tuple[str, ...]) -> str:
    return SEP.join(namespace)


def _split(namespace: str) -> tuple[str, ...]:
    return tuple(namespace.split(SEP)) if namespace else ()


def _prefixes(namespace: tuple[str, ...]) -> list[str]:
    return [_joined(namespace[:i]) for i in range(1, len(namespace) + 1)]


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[:len(path)] if condition.match_type == "prefix" else (
        namespace[len(namespace) - len(path):])
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _is_json(value: Mapping[str, Any]) -> bool:
    """Whether ``value`` is JSON as it is (its JSON text reads back as the same value)."""
    try:
        return json_equal(json.loads(json.dumps(value, allow_nan=False)), value)
    except (TypeError, ValueError):
        return False


def _embedder(embed: Any, dims: int | None) -> Any:
    from .._internal.embeddings import EMBEDDERS  # the embedded memory's extra

    if isinstance(embed, str) and embed not in EMBEDDERS:
        embed = ensure_embeddings(embed)  # a provider string, as LangGraph resolves it
    return embedder_for(embed, dims)


class DMFStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are audited dmf-hybrid entities.

    ``memory``: a ``Memory`` or ``MemoryClient`` (None: an in-memory embedded one);
    ``index``: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``);
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` minutes, ``refresh_on_read``).
    """

    supports_ttl = True
    __slots__ = ("memory", "index_config", "ttl_config", "_paths", "_owned")

    def __init__(self, memory: MemoryAPI | None = None, *, index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None) -> None:
        self.index_config = None if index is None else index.copy()
        self.ttl_config = ttl
        embedder = None
        if index is not None and (memory is None or index.get("embed") is not None):
            embedder = _embedder(index.get("embed"), index.get("dims"))
        self._owned = memory is None
        self.memory: MemoryAPI = private_memory(embedder) if memory is None else memory
        self._paths = index_paths((index or {}).get("fields") or ["$"])
        joined = self._embeds_items()
        ensure_type(self.memory, ITEM_TYPEDEF)
        ensure_type(self.memory, VECTOR_TYPEDEF)
        if joined:
            self._keep_joined_vectors()
        if memory is not None and embedder is not None:
            check_model(self.memory, VECTOR_TYPE, embedder)

    def _embeds_items(self) -> bool:
        """Whether the memory's items were written as one vector each (their texts joined
        in the item's ``text``, which its type embedded)."""
        try:
            return self.memory.get_type(ITEM_TYPE).typedef.embed is not None
        except DMFError:  # no such type yet
            return False

    def _keep_joined_vectors(self) -> None:
        """Give each item written as one vector that vector as a row of its own (path
        :data:`JOINED`), so it ranks as it did until its next put replaces it."""
        rows = [{"item": e.id, "path": JOINED, "namespace": e.data.namespace,
                 "prefixes": e.data.prefixes, "key": e.data.key, "text": e.data.text,
                 "value": e.data.value}
                for e in scan(self.memory, ITEM_TYPE, {"text": {"$ne": None}})]
        for i in range(0, len(rows), PAGE):
            self.memory.create_many(VECTOR_TYPE, rows[i:i + PAGE], on_conflict="update")

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
                self._check_put(op)
            elif isinstance(op, SearchOp):
                check_filter(op.filter)
            elif not isinstance(op, GetOp | ListNamespacesOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:  # reads see the state before this batch's puts
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                assert isinstance(op, PutOp)
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
        for put in puts.values():
            self._put(put)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _check_put(self, op: PutOp) -> None:
        """ValidationError for a put no write could store (before anything is written)."""
        if not isinstance(op.key, str):
            raise ValidationError(f"key must be a string, not {type(op.key).__name__}",
                                  field="key")
        if op.value is not None and not isinstance(op.value, Mapping):
            raise ValidationError("value must be a mapping (or None to delete)", field="value")
        if op.value is not None and not _is_json(op.value):
            raise ValidationError("value must hold JSON: string keys, finite numbers, strings, "
                                  "booleans, null, lists and mappings", field="value")
        if op.index not in (None, False) and not (
                isinstance(op.index, list) and all(isinstance(p, str) for p in op.index)):
            raise ValidationError("index must be False, None or a list of paths", field="index")
        if op.ttl is not None and (isinstance(op.ttl, bool)
                                   or not isinstance(op.ttl, int | float) or op.ttl <= 0):
            raise ValidationError("ttl must be a positive number of minutes", field="ttl")

    # ---------------------------------------------------------------- reads

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

    def _item(self, entity: Any, score: float | None = None, search: bool = False) -> Any:
        data = entity.data
        fields = {"namespace": _split(data.namespace), "key": data.key, "value": data.value,
                  "created_at": entity.created_at,
                  "updated_at": max(data.put_at, entity.created_at) if data.put_at else
                  entity.updated_at}
        return SearchItem(**fields, score=score) if search else Item(**fields)

    def _get(self, op: GetOp) -> Item | None:
        now = utcnow()
        entity = self._find(op.namespace, op.key)
        if entity is None or self._expired(entity, now):
            return None
        if op.refresh_ttl:
            entity = self._refresh(entity, now)
        return self._item(entity)  # type: ignore[no-any-return]

    def _scope(self, op: SearchOp) -> list[dict[str, Any]]:
        """The terms a search's prefix and filter narrow items and vector rows by alike."""
        terms = pushdown(op.filter)
        if op.namespace_prefix:
            terms.append({"prefixes": {"$contains": _joined(op.namespace_prefix)}})
        return terms

    def _listed(self, terms: list[dict[str, Any]], flt: Mapping[str, Any] | None
                ) -> Iterator[Any]:
        """Live items the terms select that pass the filter, newest put first."""
        for entity in scan(self.memory, ITEM_TYPE, {"$and": terms}, ["-put_at"]):
            if matches(entity.data.value or {}, flt):
                yield entity

    def _search(self, op: SearchOp) -> list[SearchItem]:
        now = utcnow()
        if op.limit < 1 or op.offset < 0:
            return []
        terms = [self._live(now), *self._scope(op)]
        found: list[tuple[Any, float | None]] = []
        if op.query and self.index_config is not None:
            found = self._ranked(op, now)[op.offset:]
            if len(found) < op.limit:  # as the reference store does: unindexed items fill up
                for entity in self._listed([*terms, {"text": None}], op.filter):
                    if len(found) >= op.limit:
                        break
                    found.append((entity, None))
        else:
            for i, entity in enumerate(self._listed(terms, op.filter)):
                if i >= op.offset + op.limit:
                    break
                if i >= op.offset:
                    found.append((entity, None))
        if op.refresh_ttl:
            found = [(self._refresh(e, now), s) for e, s in found]
        return [self._item(e, s, search=True) for e, s in found]

    def _ranked(self, op: SearchOp, now: dt.datetime) -> list[tuple[Any, float | None]]:
        """The first ``offset + limit`` items of the similarity ranking (each item scored
        by its best text), read from the vector rows best first."""
        assert op.query is not None
        want = op.offset + op.limit
        terms = [{"text": {"$ne": None}}, *self._scope(op)]
        seen: set[str] = set()
        ranked: list[tuple[Any, float | None]] = []
        rows = min(MAX_K, 2 * want + 8)
        while len(ranked) < want:
            exclude = sorted(seen)  # their best rows are behind us: what follows is new items
            where = {"$and": terms + [{"item": {"$nin": exclude[i:i + MAX_IN]}}
                                      for i in range(0, len(exclude), MAX_IN)]}
            hits = self.memory.search(VECTOR_TYPE, op.query, where=where, k=rows,
                                      mode="vector").hits
            best: list[tuple[Any, float]] = []
            for hit in hits:
                if hit.entity.data.item not in seen:
                    seen.add(hit.entity.data.item)
                    best.append((hit.entity.data, hit.score))
            items = self._lookup([row for row, _ in best], now)
            for row, score in best:
                entity = items.get((row.namespace, row.key))
                if entity is not None and matches(entity.data.value or {}, op.filter):
                    ranked.append((entity, score))
            if len(hits) < rows:
                break
            rows = min(MAX_K, 2 * (want - len(ranked)) + 8)
        return ranked[:want]

    def _lookup(self, rows: list[Any], now: dt.datetime) -> dict[tuple[str, str], Any]:
        """The live items of vector rows, by (namespace, key)."""
        keys: dict[str, list[str]] = {}
        for row in rows:
            keys.setdefault(row.namespace, []).append(row.key)
        spaces = sorted(keys)
        found: dict[tuple[str, str], Any] = {}
        for i in range(0, len(spaces), NAMESPACES_PER_LOOKUP):
            which = [{"namespace": ns, "key": {"$in": keys[ns]}}
                     for ns in spaces[i:i + NAMESPACES_PER_LOOKUP]]
            where = {"$and": [self._live(now), which[0] if len(which) == 1 else {"$or": which}]}
            for entity in scan(self.memory, ITEM_TYPE, where):
                found[(entity.data.namespace, entity.data.key)] = entity
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        now = utcnow()
        where: dict[str, Any] = self._live(now)
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
                where = {"$and": [where, {"prefixes": {"$contains": _joined(cond.path)}}]}
        spaces = {_split(e.data.namespace) for e in scan(self.memory, ITEM_TYPE, where)}
        kept = [ns for ns in spaces
                if all(_matches(ns, c) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            kept = list({ns[:op.max_depth] for ns in kept})
        return sorted(kept)[op.offset:op.offset + op.limit]

    # ---------------------------------------------------------------- writes

    def _texts(self, value: Mapping[str, Any], index: Any) -> dict[str, str]:
        if self.index_config is None or index is False:
            return {}
        return index_texts(value, self._paths if index is None else index_paths(index))

    def _put(self, op: PutOp) -> None:
        now = utcnow()
        current = self._find(op.namespace, op.key)
        if op.value is None:
            if current is not None:
                self.memory.delete(current.id)
                self._write_vectors(current.id, op, {}, None, fresh=False)
            return
        value = dict(op.value)
        texts = self._texts(value, op.index)
        ttl = op.ttl
        data = {
            "namespace": _joined(op.namespace), "prefixes": _prefixes(op.namespace),
            "key": op.key, "value": value, "text": "\n".join(texts.values()) or None,
            "ttl_minutes": ttl,
            "expires_at": None if ttl is None else (now + dt.timedelta(minutes=ttl)).isoformat(),
        }
        fresh = False
        if current is not None:
            old = current.data
            same = (json_equal(old.value, value) and old.text == data["text"]
                    and old.ttl_minutes == ttl and ttl is None)
            if not same:
                self.memory.update(current.id, {**data, "put_at": now.isoformat()})
            eid = current.id
        else:
            data["put_at"] = now.isoformat()
            try:
                eid = self.memory.create(ITEM_TYPE, data).id
                fresh = True
            except Conflict as exc:  # the item was deleted: it comes back, as it was put now
                eid = exc.details.get("entity_id")
                if not isinstance(eid, str):
                    raise
                self.memory.restore(eid)
                self.memory.update(eid, data)
        self._write_vectors(eid, op, texts, value, fresh=fresh)

    def _write_vectors(self, eid: str, op: PutOp, texts: dict[str, str],
                       value: dict[str, Any] | None, *, fresh: bool) -> None:
        """Make the item's vector rows its texts (a text no longer made is retired: its row
        keeps its identity with no text, so the same path later revives it)."""
        rows = {} if fresh else {
            e.data.path: e.data for e in scan(self.memory, VECTOR_TYPE,
                                               {"item": eid, "text": {"$ne": None}})}
        common = {"item": eid, "namespace": _joined(op.namespace),
                  "prefixes": _prefixes(op.namespace), "key": op.key}
        writes = [{**common, "path": path, "text": text, "value": value}
                  for path, text in texts.items()
                  if path not in rows or rows[path].text != text
                  or not json_equal(rows[path].value, value)]
        writes += [{**common, "path": path, "text": None, "value": None}
                   for path in rows if path not in texts]
        if writes:
            self.memory.create_many(VECTOR_TYPE, writes, on_conflict="update")

    # ---------------------------------------------------------------- TTL

    def sweep_ttl(self) -> int:
        """Delete every expired item (audited deletes); returns how many."""
        now = utcnow()
        expired = list(scan(self.memory, ITEM_TYPE, {"expires_at": {"$lte": now.isoformat()}}))
        for entity in expired:
            self.memory.delete(entity.id)
            self._write_vectors(entity.id, PutOp(_split(entity.data.namespace),
                                                 entity.data.key, None), {}, None, fresh=False)
        return len(expired)

    def entity_id(self, namespace: tuple[str, ...], key: str) -> str | None:
        """The entity ID of an item (for ``history`` and ``as_of`` reads), or None."""
        entity = self._find(tuple(namespace), key)
        return None if entity is None else str(entity.id)
