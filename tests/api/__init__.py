"""Tests of the HTTP service and MemoryClient."""

from __future__ import annotations

from collections.abc import Callable


def wrong_error(case: str, call: Callable[[], object], exc_class: type[Exception],
                field: str | None) -> str | None:
    """What is wrong with how ``call`` failed (None if it raised ``exc_class`` naming ``field``)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - every case must raise, checked here
        got = getattr(exc, "details", {}).get("field")
        if type(exc) is not exc_class or (field is not None and got != field):
            return f"{case}: {type(exc).__name__}(field={got!r}): {exc}"
        return None
    return f"{case}: nothing raised"
