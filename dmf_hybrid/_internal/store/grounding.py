"""Grounded dates at write time: a type's ``dates`` field follows its text and time.

A type with ``dates`` (``dmf_hybrid._internal.profiles.DateGrounding``) has the store resolve, at
every create and update, the time expressions of the row's text against the row's time
(``dmf_hybrid._internal.dates.ground``; the time's UTC date is the reference day) and keep them in
the json field it names. The field is derived: a value a write gives for it is replaced, so the
stored value is always a function of the row's text and time, audited with the row."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..clock import to_naive_utc
from ..dates import ground
from ..schema import EntityType


def grounded_dates(text: Any, time: Any) -> dict[str, Any] | None:
    """``{"from", "to", "found"}`` for a text said at ``time`` (None: nothing to resolve)."""
    if not isinstance(text, str) or not text or time is None:
        return None
    if isinstance(time, dt.datetime):
        time = to_naive_utc(time)
    found = ground(text, time)
    if not found:
        return None
    return {"from": min(g.start for g in found).isoformat(),
            "to": max(g.end for g in found).isoformat(),
            "found": [g.as_json() for g in found]}


def with_grounded_dates(etype: EntityType, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the type's dates field recomputed from its text and time fields."""
    spec = etype.typedef.dates
    if spec is None:
        return dict(values)
    return {**values, spec.field: grounded_dates(values.get(spec.text), values.get(spec.time))}
