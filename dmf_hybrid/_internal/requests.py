"""One request model per operation: the only statement of its arguments.

``Memory`` checks an operation's arguments with its model (:meth:`Request.of`), ``MemoryClient``
builds the operation's body with it (:meth:`Request.body`), the server parses the body with it, so a
bad argument is the same error on every door. A field's checks are the functions of
:mod:`dmf_hybrid._internal.checks` (and of the modules that own a vocabulary: conversations, expiry,
filters); what needs the schema or the settings (a type's fields, ``max_k``) is the memory's to
check. :data:`dmf_hybrid._internal.operations.REQUESTS` names the model of each operation. Imports
neither FastAPI nor DuckDB."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Self

import pydantic
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    WithJsonSchema,
    model_validator,
)

from .checks import (
    ID_SCHEMA,
    LAST_TURNS,
    MAX_DEPTH,
    MAX_ORDER_FIELDS,
    MAX_SEQ,
    MAX_TURNS,
    Direction,
    SearchMode,
    check_changes,
    check_cursor,
    check_data,
    check_depth,
    check_direction,
    check_filter,
    check_id,
    check_k,
    check_limit,
    check_mode,
    check_on_conflict,
    check_order,
    check_reference_time,
    check_related_to,
    check_relation,
    check_request_as_of,
    check_rows,
    check_search_text,
    check_seq_bounds,
    check_type_name,
    check_values,
)
from .conversations import (
    MAX_MESSAGES,
    MESSAGE_SCHEMA,
    MESSAGE_TYPE,
    check_conversation,
    check_messages,
    check_turns,
)
from .encoding import jsonable, row_json
from .errors import FilterError, ValidationError, first_problem, raised_check, request_error
from .expiry import (
    EXPIRES_AT_DOC,
    MAX_TTL_SECONDS,
    NEVER,
    TTL_DOC,
    check_expires_at,
    check_expiry_args,
    check_ttl,
)
from .filters import FILTER_DOC

#: ``as_of`` of a request: validated whole by :func:`checks.check_request_as_of` (a float or
#: a negative number is not read as a Unix time).
AsOfBody = Annotated[int | dt.datetime | None, BeforeValidator(check_request_as_of), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "format": "date-time"},
               {"type": "null"}]})]
AS_OF_DOC = "Read as of an audit seq (integer) or an ISO-8601 UTC time; omitted = now."
#: ``reference_time`` in a body: an ISO-8601 date or time (:func:`checks.check_reference_time`).
ReferenceTimeBody = Annotated[dt.datetime | None, BeforeValidator(check_reference_time),
                              WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})]
REFERENCE_TIME_DOC = ("The time a query's time phrases are read against (\"last week\", "
                      "\"去年五月\"): an ISO-8601 date or time, naive = UTC; omitted = now.")
#: Limits of ``context`` arguments (checked again by the memory).
CONTEXT_MAX_FOCUS = 50
CONTEXT_MAX_QUERY_CHARS = 2000
CONTEXT_MIN_BUDGET, CONTEXT_MAX_BUDGET = 32, 100_000
CONTEXT_MAX_K = 50


class Request(BaseModel):
    """Base of the request models: one per operation, the only statement of its arguments.

    ``Memory`` checks its arguments with :meth:`of`, ``MemoryClient`` builds its body the same way
    (:meth:`body`), the route parses the body with it. A field's checks are the functions of
    :mod:`dmf_hybrid._internal.checks`, so a bad argument raises the same error on every door; what
    needs the schema or the settings (a type's fields, ``max_k``) is the memory's to check. Unknown
    fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def of(cls, **arguments: Any) -> Self:
        """The request of these arguments, or the error a bad one is (naming its field)."""
        try:
            return cls.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise request_error(exc) from None

    @classmethod
    def check_field(cls, name: str, value: Any) -> Any:
        """One argument checked alone, as :meth:`of` checks it (a plan checks a step's literal
        arguments so, before the references of the others are resolved); its checked value."""
        try:
            return _field_adapter(cls, name).validate_python(value)
        except pydantic.ValidationError as exc:
            raised = raised_check(exc.errors()[0])
            if raised is not None:
                raise raised from None
            _, message = first_problem(exc)
            raise ValidationError(f"{name}: {message}", field=name) from None

    def body(self) -> dict[str, Any]:
        """The request as a JSON body (a NaN or infinite number is refused, named)."""
        return {name: jsonable(value, name, FilterError if name == "where" else ValidationError)
                for name, value in self.model_dump().items()}


@functools.cache
def _field_adapter(model: type[Request], name: str) -> TypeAdapter[Any]:
    """A validator of one field of a request model, with the field's own checks."""
    field = model.model_fields[name]
    return TypeAdapter(Annotated[field.annotation, *field.metadata])  # type: ignore[valid-type,arg-type]


def _checked(check: Callable[[Any], Any]) -> BeforeValidator:
    """A check of :mod:`dmf_hybrid._internal.checks` as a field validator (None passes)."""
    return BeforeValidator(lambda value: None if value is None else check(value))


#: A filter (:data:`~dmf_hybrid._internal.filters.FILTER_DOC`): its shape checked here, its fields
#: by the schema.
Where = Annotated[dict[Any, Any] | None, BeforeValidator(check_filter)]
OrderBy = Annotated[list[str] | None, _checked(check_order), WithJsonSchema({"anyOf": [
    {"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1,
                         "maxItems": MAX_ORDER_FIELDS}, {"type": "null"}]})]
Limit = Annotated[int, BeforeValidator(check_limit), WithJsonSchema({"type": "integer",
                                                                     "minimum": 1})]
Cursor = Annotated[str | None, _checked(check_cursor)]
#: The JSON Schema of an entity ID argument (a conversation's too: :func:`checks.check_id`),
#: and of an optional one.
IdSchema = WithJsonSchema(ID_SCHEMA)
OptionalIdSchema = WithJsonSchema({"anyOf": [ID_SCHEMA, {"type": "null"}]})
Conversation = Annotated[str | None, _checked(check_conversation), OptionalIdSchema]

OnConflict = Literal["return", "raise", "update"]
ON_CONFLICT_DOC = ("What to do when the identity already exists: return the stored entity "
                   "unchanged (differs names the given fields whose values differ), raise 409 "
                   "conflict when a given field differs, or update it to the given values.")


def _fields(field: str) -> BeforeValidator:
    """An object of entity fields (a pydantic model instance: its fields), named ``field``."""
    return BeforeValidator(lambda value: check_data(
        value.model_dump() if isinstance(value, BaseModel) else value, field))


def _ttl_json(value: dt.timedelta | str | None) -> float | str | None:
    return value.total_seconds() if isinstance(value, dt.timedelta) else value

#: ``ttl`` of a write (:func:`~dmf_hybrid._internal.expiry.check_ttl`): a duration, "never" or None.
TTLField = Annotated[
    dt.timedelta | str | None, BeforeValidator(check_ttl), PlainSerializer(_ttl_json),
    WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0,
                               "maximum": MAX_TTL_SECONDS},
                              {"const": NEVER}, {"type": "null"}]})]
#: ``expires_at`` of a write (:func:`~dmf_hybrid._internal.expiry.check_expires_at`).
ExpiresAtField = Annotated[
    dt.datetime | None, BeforeValidator(check_expires_at),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]})]
Data = Annotated[dict[Any, Any], _fields("data")]


class _Expiring(Request):
    """A write that may set the entity's expiry: ``ttl`` or ``expires_at``, not both."""

    ttl: TTLField = Field(None, description=TTL_DOC)
    expires_at: ExpiresAtField = Field(None, description=EXPIRES_AT_DOC)

    @model_validator(mode="after")
    def _one_expiry(self) -> Self:
        check_expiry_args(self.ttl, self.expires_at)
        return self


class EntityCreate(_Expiring):
    """Create an entity of the path's type; ``id`` is optional (default: from identity)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"data": {"name": "Yu Garden", "city": "Shanghai", "rating": 4.6}},
        {"data": {"name": "Yu Garden", "city": "Shanghai", "rating": 4.8},
         "on_conflict": "update"},
    ]})

    data: Data = Field(description="The entity's fields as a JSON object.")
    id: Annotated[str | None, _checked(check_id), OptionalIdSchema] = Field(
        None, description="A caller-chosen ID instead of the derived one.")
    on_conflict: Annotated[OnConflict, BeforeValidator(check_on_conflict)] = Field(
        "return", description=ON_CONFLICT_DOC)


def _rows(value: Any) -> list[Any]:
    """``create_many``'s rows: a list (:func:`checks.check_rows`), a pydantic model instance
    taken as its fields."""
    return [r.model_dump() if isinstance(r, BaseModel) else r for r in check_rows(value)]


class EntityBatchCreate(_Expiring):
    """Create many entities of the path's type in one request."""

    rows: Annotated[list[Any], BeforeValidator(_rows)] = Field(
        description="The entities' fields, one JSON object each.")
    on_conflict: Annotated[OnConflict, BeforeValidator(check_on_conflict)] = Field(
        "return", description=ON_CONFLICT_DOC)

    def body(self) -> dict[str, Any]:
        """The JSON body, a bad row named by its index."""
        out = Request.body(self.model_copy(update={"rows": []}))
        out["rows"] = [row_json(i, r) for i, r in enumerate(self.rows)]
        return out


class EntityUpdate(_Expiring):
    """Change some fields of an entity (send ``If-Match: "<version>"`` to guard the write)."""

    data: Annotated[dict[Any, Any], _fields("changes")] = Field(
        description="Fields to change, as a JSON object (may be empty when the update only "
                    "sets a new ttl or expires_at).")

    @model_validator(mode="after")
    def _renews(self) -> Self:
        check_changes(self.data, renews=self.ttl is not None or self.expires_at is not None)
        return self


def _name(field: str) -> BeforeValidator:
    """A field holding a name (a list field's, a relation's): a string (whether the type has
    it is the schema's answer)."""
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise ValidationError(f"{field} must be a name", field=field)
        return value
    return BeforeValidator(check)


def _entity_id(field: str) -> BeforeValidator:
    return BeforeValidator(lambda value: check_id(value, field))


class EntityAppend(Request):
    """Append values to a list field atomically."""

    field: Annotated[str, _name("field")] = Field(description="A list field of the type.")
    values: Annotated[list[Any], BeforeValidator(check_values),
                      WithJsonSchema({"type": "array", "minItems": 1})] = Field(
        description="The values to append (a non-empty list).")


class EntityQuery(Request):
    """A structured query: filter, order, page size, cursor and time travel."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"where": {"city": "Shanghai", "estimated_cost": {"$lte": 50}},
         "order_by": ["-rating", "name"], "limit": 10},
        {"where": {"$or": [{"category": "museum"}, {"category": "park"}]}, "limit": 20},
    ]})

    where: Where = Field(None, description=FILTER_DOC)
    order_by: OrderBy = Field(None, description='"field" or "-field" (desc), or a list.')
    limit: Limit = Field(50, description="Page size.")
    cursor: Cursor = Field(None, description="next_cursor of the previous page.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class EntityCount(Request):
    """Count the entities of a type matching a filter."""

    where: Where = Field(None, description=FILTER_DOC)
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class LinkRequest(Request):
    """A link ``from_id --relation--> to_id``."""

    from_id: Annotated[str, _entity_id("from_id"), IdSchema] = Field(
        description="The entity the link goes from.")
    relation: Annotated[str, _name("relation")] = Field(
        description="A relation of the from entity's type.")
    to_id: Annotated[str, _entity_id("to_id"), IdSchema] = Field(
        description="The entity the link goes to.")


class SearchRequest(Request):
    """A similarity search over one type, with the options of ``Memory.search``."""

    model_config = ConfigDict(extra="forbid", validate_default=True, json_schema_extra={
        "examples": [
            {"type": "PointOfInterest", "text": "soup dumplings", "where": {"city": "Shanghai"},
             "k": 3},
            {"type": "PointOfInterest", "text": "外滩夜景", "mode": "keyword", "k": 5},
        ]})

    type: Annotated[str, BeforeValidator(check_type_name)] = Field(
        description="Entity type to search.")
    text: Annotated[str | None, BeforeValidator(check_search_text), WithJsonSchema(
        {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]})] = Field(
        None, description="Query text (required).")
    where: Where = Field(None, description=FILTER_DOC)
    k: Annotated[int, BeforeValidator(check_k), WithJsonSchema(
        {"type": "integer", "minimum": 1})] = Field(10, description="How many hits.")
    mode: Annotated[SearchMode, BeforeValidator(check_mode)] = Field(
        "hybrid", description="hybrid (vectors + BM25 keywords, fused), vector or keyword.")
    related_to: Annotated[dict[str, Any] | None, _checked(check_related_to)] = Field(
        None, description='Only entities linked: {"relation": r, "from": id, "direction": "out"}.')
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)
    conversation: Conversation = Field(
        None, description="Only rows of this conversation (the type's conversation field), "
                          "ANDed with where.")
    reference_time: ReferenceTimeBody = Field(None, description=REFERENCE_TIME_DOC)


def _focus_ids(value: Any) -> list[str]:
    """A context's focus IDs: a list of entity IDs (repeats dropped), at most
    :data:`CONTEXT_MAX_FOCUS`."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValidationError("focus_ids must be a list of entity IDs", field="focus_ids")
    focus = list(dict.fromkeys(check_id(f, "focus_ids") for f in value))
    if len(focus) > CONTEXT_MAX_FOCUS:
        raise ValidationError(f"at most {CONTEXT_MAX_FOCUS} focus_ids", field="focus_ids")
    return focus


def _context_query(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > CONTEXT_MAX_QUERY_CHARS:
        raise ValidationError(f"query must be a non-empty string of at most "
                              f"{CONTEXT_MAX_QUERY_CHARS} characters", field="query")
    return value


def _budget(value: Any) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not CONTEXT_MIN_BUDGET <= value <= CONTEXT_MAX_BUDGET):
        raise ValidationError(f"budget_tokens must be an integer from {CONTEXT_MIN_BUDGET} to "
                              f"{CONTEXT_MAX_BUDGET}", field="budget_tokens")
    return value


def _context_k(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CONTEXT_MAX_K:
        raise ValidationError(f"k must be an integer from 1 to {CONTEXT_MAX_K}", field="k")
    return value


class ContextRequest(Request):
    """What the prompt context is about and how many tokens it may take."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"focus_ids": ["Trip_553bfb0714443032ab13"], "budget_tokens": 600},
        {"query": "museums in Shanghai", "budget_tokens": 800, "k": 3},
        {"conversation": "chat-1", "turns": 6, "query": "the cat's name"},
    ]})

    focus_ids: Annotated[list[str] | None, _checked(_focus_ids)] = Field(
        None, description=f"IDs of the entities the task is about (at most "
                          f"{CONTEXT_MAX_FOCUS}).")
    query: Annotated[str | None, _checked(_context_query)] = Field(
        None, description="Adds the top search hits for this text.")
    budget_tokens: Annotated[int, BeforeValidator(_budget)] = Field(
        800, description=f"From {CONTEXT_MIN_BUDGET} to {CONTEXT_MAX_BUDGET}.")
    k: Annotated[int, BeforeValidator(_context_k)] = Field(
        5, description=f"How many search hits (at most {CONTEXT_MAX_K}).")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)
    conversation: Conversation = Field(
        None, description="Adds the conversation's last turns; scopes the query's hits of "
                          "types with a conversation field to it.")
    turns: int | None = Field(None, description=f"How many last turns (default {LAST_TURNS}, "
                                                f"at most {MAX_TURNS}; needs conversation).")

    @model_validator(mode="before")
    @classmethod
    def _turns(cls, values: Any) -> Any:
        if isinstance(values, Mapping):
            check_turns(values.get("turns"), values.get("conversation"))
        return values


def _seq_bound(field: str) -> BeforeValidator:
    """A seq bound of a window: None or a non-negative integer."""
    def check(value: Any) -> Any:
        check_seq_bounds(**{field: value})
        return value
    return BeforeValidator(check)


def _scope(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ValidationError('scope must be "*", a type name or an entity ID', field="scope")
    return value


class SummaryRequest(Request):
    """The scope and audit-seq window of a summary."""

    scope: Annotated[str | None, BeforeValidator(_scope)] = Field(
        None, description='"*" (default), a type name or an entity ID.')
    since_seq: Annotated[int | None, _seq_bound("since_seq")] = Field(
        None, description="Events after this seq (at least 0).")
    until_seq: Annotated[int | None, _seq_bound("until_seq")] = Field(
        None, description="Events up to this seq (at least 0).")


class MessagesAppend(Request):
    """Messages to append: ``{"role", "content"}`` or ``{"speaker", "text"}`` objects with
    optional ``turn``, ``session`` and ``time``."""

    messages: Annotated[list[Any], BeforeValidator(check_messages), WithJsonSchema(
        {"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": MESSAGE_SCHEMA})
    ] = Field(
        description=f"The messages, oldest first (1 to {MAX_MESSAGES}).")
    type_name: Annotated[str, BeforeValidator(check_type_name)] = Field(
        MESSAGE_TYPE, description="The conversation log's type.")


class EntityGet(Request):
    """Which state of an entity to read: now, or as of an audit seq or a time."""

    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class RelatedQuery(Request):
    """Which links of an entity to follow, how far, and as of when."""

    relation: Annotated[str | None, _checked(check_relation)] = Field(
        None, description="Only this relation (omitted: every relation).")
    direction: Annotated[Direction, BeforeValidator(check_direction)] = Field(
        "out", description='"out" (its links), "in" (links to it) or "both".')
    depth: Annotated[int, BeforeValidator(check_depth), WithJsonSchema(
        {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH})] = Field(
        1, description="How many links away.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class EventsQuery(Request):
    """A window of the audit log: after a seq, up to a seq, at most so many events."""

    since_seq: Annotated[int, _seq_bound("since_seq"), WithJsonSchema(
        {"type": "integer", "minimum": 0, "maximum": MAX_SEQ})] = Field(
        0, description="Events after this seq.")
    until_seq: Annotated[int | None, _seq_bound("until_seq"), WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
                   {"type": "null"}]})] = Field(None, description="Up to this seq.")
    limit: Limit = Field(1000, description="At most this many events.")


class ConstraintQuery(Request):
    """A filter over the open constraints, a page size, a cursor and time travel."""

    where: Where = Field(
        None, description='Filter on Constraint fields, e.g. {"kind": "budget"}; '
                          'status is always "open". ' + FILTER_DOC)
    limit: Limit = Field(50, description="Page size.")
    cursor: Cursor = Field(None, description="next_cursor of the previous page.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)
