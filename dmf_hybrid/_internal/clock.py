"""The one clock: UTC, microsecond precision, freezable by tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

_now: Callable[[], dt.datetime] | None = None


def utcnow() -> dt.datetime:
    """The current UTC time (timezone-aware, microseconds)."""
    if _now is not None:
        return _now()
    return dt.datetime.now(dt.UTC)


def set_clock(func: Callable[[], dt.datetime] | None) -> None:
    """Replace the clock (tests); None restores the system clock."""
    global _now
    _now = func


def to_naive_utc(value: dt.datetime) -> dt.datetime:
    """The same instant as a naive UTC datetime (how DuckDB stores it)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def to_aware_utc(value: dt.datetime | None) -> dt.datetime | None:
    """A stored naive UTC datetime as an aware one."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)
