"""References between plan steps (``"$0.id"``, ``"$2.hits[0].entity.id"``) and result shapes.

A reference is a whole string: ``$<step>`` followed by ``.key`` / ``[index]`` parts. Before
anything runs, :func:`walk_shape` checks a reference's path against the shape of the result
the referenced step returns; while running, :func:`resolve` replaces it by the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import PLAN_REF_RE, full_match
from ..conversations import MESSAGE_TYPE
from ..core import MemoryCore
from ..errors import DMFError
from ..schema import EntityType
from .ops import ENTITY_OPS

REF_RE = PLAN_REF_RE
TOKEN_RE = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


@dataclass(frozen=True)
class Ref:
    """A reference to (part of) an earlier step's result."""

    step: int
    path: tuple[str | int, ...]
    text: str


#: How deep a step's arguments may nest (objects in lists in objects ...); far beyond any
#: real entity data, and well inside Python's recursion limit.
MAX_NESTING = 32


def nesting(value: Any) -> int:
    """How deeply ``value`` nests (a scalar is 0, ``[1]`` is 1); counted without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:  # deep enough to refuse: stop counting
            break
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def parse_ref(value: Any) -> Ref | None:
    """The reference a string stands for, or None when it is a plain value."""
    if not isinstance(value, str) or not value.startswith("$") or value.startswith("$$"):
        return None
    match = full_match(REF_RE, value)
    if match is None:
        return None
    path: list[str | int] = []
    for name, index in TOKEN_RE.findall(match.group(2)):
        path.append(name if name else int(index))
    return Ref(int(match.group(1)), tuple(path), value)


def find_refs(value: Any, where: str) -> list[tuple[str, Ref]]:
    """Every reference inside a value, with the argument path it sits at."""
    ref = parse_ref(value)
    if ref is not None:
        return [(where, ref)]
    found: list[tuple[str, Ref]] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            found.extend(find_refs(item, f"{where}.{key}"))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(find_refs(item, f"{where}[{i}]"))
    return found


class RefError(Exception):
    """A reference that does not resolve against the results so far."""


def resolve(value: Any, results: Sequence[Any]) -> Any:
    """``value`` with every reference replaced by the value it points at."""
    ref = parse_ref(value)
    if ref is not None:
        return lookup(ref, results)
    if isinstance(value, str) and value.startswith("$$"):
        return value[1:]
    if isinstance(value, Mapping):
        return {k: resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    return value


def lookup(ref: Ref, results: Sequence[Any]) -> Any:
    """The value a reference points at, or RefError saying where it stops."""
    if ref.step >= len(results):
        raise RefError(f"{ref.text} refers to step {ref.step}, which has not run yet")
    current = results[ref.step]
    walked = f"${ref.step}"
    for token in ref.path:
        if isinstance(token, int):
            if not isinstance(current, list):
                raise RefError(f"{walked} is not a list, so {ref.text} cannot index it")
            if token >= len(current):
                raise RefError(f"{walked} has {len(current)} element(s), so {ref.text} "
                               f"has no element {token}")
            current = current[token]
            walked += f"[{token}]"
        else:
            if not isinstance(current, Mapping) or token not in current:
                keys = ", ".join(sorted(current)) if isinstance(current, Mapping) else "none"
                raise RefError(f"{walked} has no key {token!r} (keys: {keys})")
            current = current[token]
            walked += f".{token}"
    return current


# Result shapes, for checking reference paths before anything runs:
# ("entity", T) | ("data", T) | ("obj", {key: shape}) | ("list", shape) | ("id", T) | ("any",)
Shape = tuple[Any, ...]
ANY: Shape = ("any",)


def result_shape(op: str, type_name: str | None) -> Shape:
    """The shape of the result an operation returns (type-aware where it is known)."""
    entity: Shape = ("entity", type_name)
    if op in ENTITY_OPS:
        return entity
    if op == "query":
        return ("obj", {"items": ("list", entity), "next_cursor": ANY})
    if op == "search":
        hit = ("obj", {"entity": entity, "score": ANY, "legs": ANY})
        return ("obj", {"hits": ("list", hit), "receipt": ANY})
    if op == "link":
        return ("obj", {"linked": ANY, "from_id": ("id", None), "relation": ANY,
                        "to_id": ("id", None)})
    if op == "unlink":
        return ("obj", {"unlinked": ANY, "seq": ANY})
    if op == "add_messages":
        return ("list", ("entity", MESSAGE_TYPE))
    if op == "related":
        return ("list", ("obj", {"relation": ANY, "direction": ANY, "depth": ANY,
                                 "from_id": ("id", None), "entity": ("entity", None)}))
    return ANY


def walk_shape(mem: MemoryCore, shape: Shape, path: Sequence[str | int]
               ) -> tuple[Shape, str | None]:
    """The shape at the end of a path, or (ANY, why the path does not fit)."""
    for token in path:
        kind = shape[0]
        if kind == "any":
            return ANY, None
        if kind == "list":
            if not isinstance(token, int):
                return ANY, f"is a list: index it like [0], not .{token}"
            shape = shape[1]
            continue
        if isinstance(token, int):
            return ANY, f"is not a list, so [{token}] does not apply"
        keys: dict[str, Shape]
        if kind == "entity":
            keys = {"id": ("id", shape[1]), "type": ANY, "version": ANY,
                    "data": ("data", shape[1]), "created": ANY, "deleted": ANY}
        elif kind == "data":
            etype = known_type(mem, shape[1])
            if etype is None:
                return ANY, None
            keys = {name: ANY for name in etype.fields}
        elif kind == "obj":
            keys = shape[1]
        else:
            return ANY, "is a plain value and has no keys"
        if token not in keys:
            return ANY, f"has no key {token!r} (keys: {', '.join(sorted(keys))})"
        shape = keys[token]
    return shape, None


def known_type(mem: MemoryCore, name: str | None) -> EntityType | None:
    if name is None:
        return None
    try:
        return mem.get_type(name)
    except DMFError:
        return None
