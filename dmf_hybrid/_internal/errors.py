"""One exception tree for dmf-hybrid; each error knows its HTTP status and stable code.

    DMFError                         (code "dmf_error", 500)
    ├── ValidationError(ValueError)  bad value for a field          422 validation_error
    │   ├── SchemaError              bad or incompatible type       422 schema_error
    │   ├── FilterError              bad `where` / order_by         422 filter_error
    │   ├── RelationError            bad link / relation            422 relation_error
    │   ├── PlanError                invalid agent plan             422 plan_error
    │   └── LimitExceeded            k, page, body, plan too large  422 limit_exceeded
    ├── NotFound(LookupError)        unknown ID / type              404 not_found
    ├── VersionConflict              stale expected_version         412 version_conflict
    ├── Conflict                     ID exists in another state     409 conflict
    ├── AuditIntegrityError          the hash chain does not verify 500 audit_integrity
    ├── StoreLocked                  data directory held elsewhere  423 store_locked
    ├── Unauthorized                 no or unknown API key          401 unauthorized
    ├── Forbidden                    role does not allow it         403 forbidden
    └── ServiceUnavailable           model or index not ready       503 unavailable

The API turns an error into ``{"error": code, "message": ..., "details": {...}}`` and
``MemoryClient`` rebuilds the same class from ``code`` (see :func:`error_from_payload`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class DMFError(Exception):
    """Root of every error dmf-hybrid raises on purpose."""

    code = "dmf_error"
    status_code = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_payload(self) -> dict[str, Any]:
        """The JSON body the HTTP API sends for this error."""
        return {"error": self.code, "message": self.message, "details": self.details}


class ValidationError(DMFError, ValueError):
    """A value does not fit the schema; ``details["field"]`` names the field."""

    code = "validation_error"
    status_code = 422

    def __init__(self, message: str, field: str | None = None, **details: Any) -> None:
        super().__init__(message, field=field, **details)
        self.field = field


class SchemaError(ValidationError):
    """An entity type definition is invalid, unknown or an incompatible change."""

    code = "schema_error"


class FilterError(ValidationError):
    """A filter, order or search option is malformed or names an unknown field."""

    code = "filter_error"


class RelationError(ValidationError):
    """A link is not allowed: unknown relation, wrong target type, missing end, cardinality."""

    code = "relation_error"


class PlanError(ValidationError):
    """An agent plan does not validate; ``details["problems"]`` lists every problem."""

    code = "plan_error"


class LimitExceeded(ValidationError):
    """A request asks for more than a configured limit allows."""

    code = "limit_exceeded"


class NotFound(DMFError, LookupError):
    """No such entity, type or relation (or it is deleted, or in another tenant)."""

    code = "not_found"
    status_code = 404


class VersionConflict(DMFError):
    """``expected_version`` is stale; ``details["current_version"]`` says what it is now."""

    code = "version_conflict"
    status_code = 412


class Conflict(DMFError):
    """The request clashes with the current state (e.g. an ID that exists but is deleted)."""

    code = "conflict"
    status_code = 409


class AuditIntegrityError(DMFError):
    """The audit log's hash chain does not verify."""

    code = "audit_integrity"
    status_code = 500


class StoreLocked(DMFError):
    """Another process holds the data directory (DuckDB allows one writer per file)."""

    code = "store_locked"
    status_code = 423


class Unauthorized(DMFError):
    """No API key, or an unknown one."""

    code = "unauthorized"
    status_code = 401


class Forbidden(DMFError):
    """The API key's role does not allow this operation."""

    code = "forbidden"
    status_code = 403


class ServiceUnavailable(DMFError):
    """A dependency (model, vector index) is not ready or not installed."""

    code = "unavailable"
    status_code = 503


def first_problem(exc: Any) -> tuple[str, str]:
    """``(dotted location, message)`` of the first error of a pydantic ValidationError."""
    first = exc.errors()[0]
    return ".".join(str(part) for part in first["loc"]), str(first["msg"])


def request_error(exc: Any) -> DMFError:
    """The error of a request model's first problem (``exc``: pydantic's ValidationError):
    the error one of our checks raised, as it was (pydantic reports it as a value error),
    else a ValidationError naming the field."""
    raised = raised_check(exc.errors()[0])
    if raised is not None:
        return raised
    field, message = first_problem(exc)
    return ValidationError(f"{field}: {message}", field=field)


def raised_check(error: Mapping[str, Any]) -> DMFError | None:
    """The error one of our checks raised inside a field validator, which pydantic reports
    as a value error of its own, or None."""
    raised = (error.get("ctx") or {}).get("error")
    return raised if isinstance(raised, DMFError) else None


def field_of(loc: Sequence[Any], prefixes: tuple[str, ...] = ()) -> str:
    """A pydantic error location as a dotted field name (``body`` for the whole body)."""
    parts = list(loc)
    if parts and parts[0] in prefixes:
        where = parts.pop(0)
        if not parts:
            return str(where)
    return ".".join(str(p) for p in parts) or "body"


def _all_error_classes() -> list[type[DMFError]]:
    seen: list[type[DMFError]] = []
    stack: list[type[DMFError]] = [DMFError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen


ERRORS_BY_CODE: dict[str, type[DMFError]] = {cls.code: cls for cls in _all_error_classes()}


def error_from_payload(payload: dict[str, Any], status_code: int = 500) -> DMFError:
    """Rebuild the exception an HTTP error body describes (unknown codes become DMFError)."""
    cls = ERRORS_BY_CODE.get(str(payload.get("error")), DMFError)
    details = dict(payload.get("details") or {})
    message = str(payload.get("message") or f"HTTP {status_code}")
    err = cls.__new__(cls)
    DMFError.__init__(err, message, **details)
    if isinstance(err, ValidationError):
        err.field = details.get("field")
    return err
