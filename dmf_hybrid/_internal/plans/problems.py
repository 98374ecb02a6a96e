"""The problems of an invalid plan, and the hints that say what exists instead."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from ..core import MemoryCore
from ..schema import EntityType


def close_matches(word: Any, options: Sequence[str], what: str) -> str:
    options = sorted(options)
    if not options:
        return f"no {what} are defined"
    near = difflib.get_close_matches(str(word), options, n=3, cutoff=0.5) if isinstance(
        word, str) else []
    text = f"known {what}: {', '.join(options)}"
    return f"did you mean {', '.join(near)}? {text}" if near else text


def similar_ids(mem: MemoryCore, eid: Any, extra: Sequence[str] = ()) -> str:
    """A hint naming IDs of this tenant (and of the plan) that look like ``eid``."""
    candidates: list[str] = []
    if isinstance(eid, str):
        candidates = [f"{i} ({t})" for i, t in mem.reads.similar_ids(eid[:200])]
        near = difflib.get_close_matches(eid, list(extra), n=2, cutoff=0.6)
        candidates = [f"{i} (created in this plan)" for i in near] + candidates
    text = ("IDs come from earlier results: use a reference like '$0.id' or "
            "'$1.hits[0].entity.id', or find the ID with query/search first")
    return (f"similar IDs: {', '.join(candidates)}; " + text) if candidates else text


def field_hint(etype: EntityType, name: str) -> str | None:
    spec = etype.fields.get(name)
    if spec is None:
        return None
    if spec.type == "enum":
        return f"{etype.name}.{name} takes one of: {', '.join(spec.values or ())}"
    if spec.type == "list":
        return f"{etype.name}.{name} takes a list of {spec.item}"
    fmt = {"date": " (YYYY-MM-DD)", "datetime": " (ISO 8601)"}.get(spec.type, "")
    return f"{etype.name}.{name} takes a {spec.type}{fmt}"


def shape_hint(step: int, op: Any) -> str:
    examples = {
        "create": f"${step}.id, ${step}.version, ${step}.data.<field>",
        "query": f"${step}.items[0].id, ${step}.items[0].data.<field>",
        "search": f"${step}.hits[0].entity.id, ${step}.hits[0].entity.data.<field>",
        "related": f"${step}[0].entity.id",
        "link": f"${step}.from_id, ${step}.to_id",
    }
    return "e.g. " + examples.get(op, f"${step}.id, ${step}.data.<field>")
