"""Expiry in the store: the one condition of a live row.

A row is live when it is not soft-deleted and its expiry (the ``_expires_at`` column; a field
name cannot begin with "_", so no type's field can take it) has not come. Every read of the
current state says so with :func:`live_sql` (or :func:`expired` for a row already read), so an
expired entity is invisible at once, before the sweep soft-deletes it. ``as_of`` reads judge
expiry at the time of their audit seq. Search judges it when it resolves its hits
(:mod:`dmf_hybrid._internal.search.resolution`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..clock import to_naive_utc
from .tables import EXPIRES_COLUMN


def live_sql(params: list[Any], at: dt.datetime | tuple[str, int], alias: str = "") -> str:
    """SQL: the row (of a type's table, or of ``as_of_table_sql``) is live at ``at`` — a time,
    or the time of a tenant's audit seq (tenant, seq) — appending its bound values to
    ``params``."""
    if isinstance(at, dt.datetime):
        params.append(to_naive_utc(at))
        when = "?"
    else:
        params.extend(at)
        when = "(SELECT ts FROM events_all WHERE tenant = ? AND seq = ?)"
    return (f"({alias}deleted_at IS NULL AND ({alias}{EXPIRES_COLUMN} IS NULL "
            f"OR {alias}{EXPIRES_COLUMN} > {when}))")


def expired(expires_at: dt.datetime | None, at: dt.datetime) -> bool:
    """Whether an expiry (naive or aware UTC) has come at ``at``."""
    return expires_at is not None and to_naive_utc(expires_at) <= to_naive_utc(at)
