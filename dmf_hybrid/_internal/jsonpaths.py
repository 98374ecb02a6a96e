"""Paths inside ``json`` fields: ``metadata.user``, ``value.tags`` (a field name, then keys).

A path is data, never SQL text: every key must match :data:`PATH_KEY_RE` (word characters of
any script and ``-``), so a quote, a backslash, an empty key (``a..b``) or SQL cannot be part
of one. ``store.sql`` binds the JSONPath made of the keys as a parameter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .errors import FilterError

#: One key of a path: letters and digits of any script, ``_`` and ``-``.
PATH_KEY_RE = re.compile(r"[\w-]{1,128}")
#: Most keys a path may name below its field.
MAX_PATH_KEYS = 16
#: What a path of no keys stands for: the field's whole value.
MISSING = object()


def split_path(key: str, where: str = "where") -> tuple[str, tuple[str, ...]]:
    """``(field, keys)`` of ``"field.key.key"``; FilterError for a malformed path."""
    root, _, rest = key.partition(".")
    if not rest:
        if key.endswith("."):
            raise FilterError(f"path {key!r} has an empty key", field=where)
        return root, ()
    keys = tuple(rest.split("."))
    if len(keys) > MAX_PATH_KEYS:
        raise FilterError(f"path {key!r} names more than {MAX_PATH_KEYS} keys", field=where)
    for part in keys:
        if not part:
            raise FilterError(f"path {key!r} has an empty key", field=where)
        if not PATH_KEY_RE.fullmatch(part):
            raise FilterError(f"path key {part!r} may hold only letters, digits, '_' and '-'",
                              field=where)
    return root, keys


def jsonpath(keys: tuple[str, ...]) -> str:
    """The JSONPath (``$."a"."b"``) of validated keys, bound as a parameter by the caller."""
    return "$" + "".join(f'."{k}"' for k in keys)


def value_at(value: Any, keys: tuple[str, ...]) -> Any:
    """The value ``keys`` lead to inside ``value`` (objects only), or :data:`MISSING`."""
    for k in keys:
        if not isinstance(value, Mapping) or k not in value:
            return MISSING
        value = value[k]
    return value


def render(value: Any) -> str:
    """A JSON value as embed-template text: strings as they are, lists item by item."""
    if value is None or value is MISSING:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(render(v) for v in value)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
