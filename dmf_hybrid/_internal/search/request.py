"""A search's checks that need the store: its type, ``k`` within ``max_k``, and what
``related_to`` reaches."""

from __future__ import annotations

from typing import Any

from ..checks import check_k
from ..errors import FilterError, NotFound, SchemaError
from ..schema import EntityType
from ..store import Store


def check_request(store: Store, tenant: str, max_k: int, type_name: Any, k: Any
                  ) -> EntityType:
    """What a search's request model (:class:`~dmf_hybrid._internal.requests.SearchRequest`) cannot
    check alone: that the type exists in the tenant and is searchable, and ``k`` within the
    service's ``max_k``."""
    etype = store.type_of(type_name, tenant)
    if etype.typedef.embed is None:
        raise SchemaError(f"{etype.name} has no embed template, so it is not searchable",
                          field="type")
    check_k(k, max_k)
    return etype


def related_ids(store: Store, tenant: str, etype: EntityType, rel: dict[str, str],
                seq: int | None) -> list[str]:
    """The IDs linked to ``rel["from"]`` (NotFound / FilterError when it makes no sense)."""
    try:
        source = store.timetravel.get(tenant, rel["from"], as_of=seq)
    except NotFound as exc:
        raise NotFound(f"related_to.from: {exc.message}", field="related_to.from",
                       entity_id=rel["from"]) from None
    declaring = (store.type_of(source.type, tenant, define_bundled=False)
                 if rel["direction"] == "out" else etype)
    if rel["relation"] not in declaring.typedef.relations:
        known = ", ".join(sorted(declaring.typedef.relations)) or "none"
        raise FilterError(f"{declaring.name} has no relation {rel['relation']!r} "
                          f"(known: {known})", field="related_to.relation")
    return store.relations.related_ids(tenant, rel["from"], rel["relation"], rel["direction"], seq)
