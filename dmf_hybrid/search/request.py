"""Request checks of a search: type, text, k, mode and ``related_to``, each naming its field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checks import SEARCH_MODES
from ..errors import FilterError, NotFound, SchemaError, ValidationError
from ..schema import EntityType
from ..store import Store

MAX_QUERY_CHARS = 10_000


def check_request(store: Store, tenant: str, max_k: int, type_name: Any, text: Any, k: Any,
                  mode: Any, related_to: Any
                  ) -> tuple[EntityType, str, int, str, dict[str, str] | None]:
    """The checked arguments of a search: (type, text, k, mode, related_to or None)."""
    etype = store.type_of(type_name, tenant)
    if etype.typedef.embed is None:
        raise SchemaError(f"{etype.name} has no embed template, so it is not searchable",
                          field="type")
    if mode not in SEARCH_MODES:
        raise ValidationError(f"mode must be one of {', '.join(SEARCH_MODES)}",
                              field="mode")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max_k:
        raise ValidationError(f"k must be an integer from 1 to {max_k}",
                              field="k")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("text must be a non-empty string", field="text")
    if len(text) > MAX_QUERY_CHARS:
        raise ValidationError(f"text is longer than {MAX_QUERY_CHARS} characters",
                              field="text")
    rel = None
    if related_to is not None:
        if not isinstance(related_to, Mapping) or not {"relation", "from"} <= set(
                related_to) or set(related_to) - {"relation", "from", "direction"}:
            raise FilterError('related_to takes {"relation": name, "from": entity_id, '
                              '"direction": "out"|"in"}', field="related_to")
        direction = related_to.get("direction", "out")
        if direction not in ("out", "in"):
            raise FilterError("related_to.direction must be 'out' or 'in'",
                              field="related_to.direction")
        if not isinstance(related_to["relation"], str) or not isinstance(
                related_to["from"], str):
            raise FilterError("related_to.relation and .from must be strings",
                              field="related_to")
        rel = {"relation": related_to["relation"], "from": related_to["from"],
               "direction": direction}
    return etype, text, k, mode, rel


def related_ids(store: Store, tenant: str, etype: EntityType, rel: dict[str, str],
                seq: int | None) -> list[str]:
    """The IDs linked to ``rel["from"]`` (NotFound / FilterError when it makes no sense)."""
    try:
        source = store.get(tenant, rel["from"], as_of=seq)
    except NotFound as exc:
        raise NotFound(f"related_to.from: {exc.message}", field="related_to.from",
                       entity_id=rel["from"]) from None
    declaring = (store.type_of(source.type, tenant, define_bundled=False)
                 if rel["direction"] == "out" else etype)
    if rel["relation"] not in declaring.typedef.relations:
        known = ", ".join(sorted(declaring.typedef.relations)) or "none"
        raise FilterError(f"{declaring.name} has no relation {rel['relation']!r} "
                          f"(known: {known})", field="related_to.relation")
    return store.related_ids(tenant, rel["from"], rel["relation"], rel["direction"],
                                  seq)
