"""Expiry (TTL) of entities: what a write's ``ttl`` / ``expires_at`` mean, checked the same way
by both front doors.

An entity may carry an expiry, ``expires_at`` (UTC). A write sets it with ``ttl`` (seconds as
an int or float, or a ``datetime.timedelta``, counted from the write) or ``expires_at`` (a
time still to come); ``ttl=NEVER`` (the string ``"never"``) clears it. Leaving both out keeps
the entity's expiry on an update, and gives a new entity its type's default ``ttl`` (none if
the type declares none). Once its time has come an entity is read as if deleted; the sweep
(``sweep_expired``) then soft-deletes it with an audited event by :data:`EXPIRY_ACTOR`.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Final

from .checks import check_time
from .errors import ValidationError

#: ``ttl=NEVER``: no expiry (clears one on update; overrides the type's default on create).
NEVER: Final = "never"
#: The longest ``ttl`` (and the farthest ``expires_at``): about 100 years.
MAX_TTL = dt.timedelta(days=36_525)
MAX_TTL_SECONDS = MAX_TTL.total_seconds()
#: What ``ttl`` takes: seconds, a timedelta, :data:`NEVER`, or None (keep / the type's default).
TTL = float | dt.timedelta | str | None
#: What ``expires_at`` takes: a datetime or an ISO-8601 time (naive = UTC), or None.
ExpiresAt = dt.datetime | str | None
#: The actor of the sweep's soft deletes.
EXPIRY_ACTOR = "system:expiry"
TTL_DOC = ('Expiry of the entity: seconds from now (a number > 0, at most about 100 years), or '
           '"never" for no expiry. Omitted: the type\'s default ttl on create, the current '
           "expiry kept on update.")
EXPIRES_AT_DOC = ("Expiry of the entity as an ISO-8601 time still to come (naive = UTC); "
                  "instead of ttl.")


@dataclass(frozen=True)
class Expiry:
    """What a write does to an entity's expiry: keep it (``keep``), or set it to ``at``
    (None: no expiry)."""

    keep: bool
    at: dt.datetime | None = None


KEEP = Expiry(keep=True)


def check_ttl(value: Any, field: str = "ttl") -> dt.timedelta | str | None:
    """``ttl``: None, :data:`NEVER`, or a duration (seconds or a timedelta) more than 0 and at
    most :data:`MAX_TTL`; anything else is a ValidationError naming ``field``."""
    if value is None or value == NEVER:
        return value  # type: ignore[no-any-return]
    if isinstance(value, dt.timedelta):
        span = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValidationError(f"{field} must be a finite number of seconds", field=field)
        if value <= 0 or value > MAX_TTL_SECONDS:
            span = dt.timedelta(seconds=-1 if value <= 0 else MAX_TTL_SECONDS + 1)
        else:
            span = dt.timedelta(seconds=value)
    else:
        raise ValidationError(f'{field} must be a number of seconds, a timedelta or "never", '
                              f"not {type(value).__name__}", field=field)
    if span <= dt.timedelta(0):
        raise ValidationError(f"{field} must be more than 0 seconds (to clear an expiry, "
                              f'pass "{NEVER}")', field=field)
    if span > MAX_TTL:
        raise ValidationError(f"{field} must be at most {int(MAX_TTL_SECONDS)} seconds "
                              "(about 100 years)", field=field)
    return span


def check_expires_at(value: Any) -> dt.datetime | None:
    """``expires_at``: None, or a datetime / ISO-8601 string (:func:`~.checks.check_time`)."""
    return check_time(value, "expires_at")


def check_expiry_args(ttl: Any, expires_at: Any) -> tuple[dt.timedelta | str | None,
                                                          dt.datetime | None]:
    """``ttl`` and ``expires_at`` each checked, and not both given."""
    span, at = check_ttl(ttl), check_expires_at(expires_at)
    if span is not None and at is not None:
        raise ValidationError("give ttl or expires_at, not both", field="ttl")
    return span, at


def expiry_of(ttl: Any, expires_at: Any, now: dt.datetime,
              default_ttl: float | None = None) -> Expiry:
    """What a write at ``now`` does to the expiry; ``default_ttl``: the type's default (a
    create's). ValidationError naming the argument for a bad one, or a time already past."""
    span, at = check_expiry_args(ttl, expires_at)
    if at is not None:
        if at <= now:
            raise ValidationError(f"expires_at {at.isoformat()} has passed; give a time still "
                                  "to come", field="expires_at")
        if at - now > MAX_TTL:
            raise ValidationError("expires_at must be at most about 100 years from now",
                                  field="expires_at")
        return Expiry(keep=False, at=at)
    if span == NEVER:
        return Expiry(keep=False)
    if span is None:
        if default_ttl is None:
            return KEEP
        span = dt.timedelta(seconds=default_ttl)
    assert isinstance(span, dt.timedelta)
    return Expiry(keep=False, at=now + span)


def ttl_option(text: str | None) -> float | str | None:
    """A ``--ttl`` option's text as ``ttl``: seconds, or :data:`NEVER`."""
    if text is None or text.strip() == NEVER:
        return None if text is None else NEVER
    try:
        return float(text)
    except ValueError:
        raise ValidationError(f'ttl must be a number of seconds or "{NEVER}", not {text!r}',
                              field="ttl") from None
