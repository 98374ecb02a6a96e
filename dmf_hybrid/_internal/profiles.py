"""Search profiles and group context: what a type declares about how it is searched and embedded.

A type's ``search`` profile (:class:`SearchProfile`, TOML ``[types.X.search]``) holds its search
defaults: the fusion method and its constant, leg weights, query term handling and
*ordered-neighbour support* (rows of the same group, ordered by a field, lend a share of their
score to the rows right before and after them). Explicit arguments of a search override it.

A type's ``context`` (:class:`GroupContext`, TOML ``[types.X.context]``) makes the store fill a
text field of each new row, at write time, with the embedded texts of up to ``turns`` preceding
rows of its group, so that the field's place in the embed template carries them. Rows written
later never change it, and the same text embeds once (the cache is keyed by text).

A type's ``dates`` (:class:`DateGrounding`, TOML ``[types.X.dates]``) makes the store resolve
the time expressions of a text field against a time field of the same row ("yesterday" said
on 8 May 2023 is 7 May 2023; ``dmf_hybrid._internal.dates``) into a json field, at every write that
changes either: ``{"from", "to", "found": [{"phrase", "start", "end"}]}`` (ISO dates, ``from``
/ ``to`` the earliest start and latest end, so ``{"dates.from": {"$lte": ...}}`` filters), or
null when the text holds none.

All three are checked against the type's fields by :func:`check_profile`,
:func:`check_context` and :func:`check_dates` (called from ``TypeDef.check``), every fault a
:class:`~dmf_hybrid._internal.errors.SchemaError` naming its field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import SchemaError

#: Fusion methods of hybrid search (``dmf_hybrid._internal.search.fusion``).
FUSIONS = ("rrf", "minmax", "dbsf", "bm25max")
#: The legs of hybrid search a weight can name.
LEGS = ("vector", "keyword", "exact")
#: Query term handling: keep every term, or drop English stopwords (question words, pronouns,
#: auxiliaries) before both legs; other scripts' terms are kept.
QUERY_TERMS = ("all", "drop_stopwords")
MAX_CONTEXT_TURNS = 16


class Neighbours(BaseModel):
    """Ordered-neighbour support: a row gains ``weight`` times the better fused score of the
    rows at ``order`` - 1 and + 1 in its group (rows with equal ``group`` fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: tuple[str, ...] = Field(description="Fields whose equal values make a group.")
    order: str = Field(description="Integer field ordering a group's rows (neighbours: +-1).")
    weight: float = Field(0.5, description="Share of a neighbour's score a row gains.")


class Sessions(BaseModel):
    """Groups scored by their best rows, and kept from crowding the top: a row gains
    ``weight`` times the best fused score of its group, then the top is picked greedily, each
    row's score multiplied by (1 - ``diversity``) for every row of its group picked before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: tuple[str, ...] = Field(description="Fields whose equal values make a group.")
    weight: float = Field(0.0, description="Share of its group's best score a row gains.")
    diversity: float = Field(0.0, description="Share of its score a row loses for each row "
                             "of its group already picked (0: off; below 1).")


class TimeBoost(BaseModel):
    """A query's time read against the rows' time and grounded dates (the type's ``dates``):
    a row gains ``window`` times its score when its time or one of its dates falls in a time
    window the query names ("last summer", "上周"), and ``when`` times its score when it has
    grounded dates and the query asks when something happened."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: float = Field(0.0, description="Share of its score a row in a query's window gains.")
    when: float = Field(0.0, description="Share of its score a dated row gains for 'when?'.")


class Named(BaseModel):
    """A row gains ``weight`` times its score when the query names its ``field`` value (whole
    words, any case): "What did Caroline research?" prefers the rows whose speaker is
    Caroline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field(description="A text field (e.g. a message's speaker).")
    weight: float = Field(0.0, description="Share of its score a named row gains.")


class SearchProfile(BaseModel):
    """A type's search defaults; any left out keeps the memory's setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fusion: str | None = Field(None, description="Fusion method: " + ", ".join(FUSIONS))
    rrf_k: int | None = Field(None, description="Reciprocal rank fusion constant.")
    weights: dict[str, float] | None = Field(
        None, description="Weight per leg (vector, keyword, exact); a leg left out weighs 1.")
    query_terms: Literal["all", "drop_stopwords"] = "all"
    neighbours: Neighbours | None = None
    sessions: Sessions | None = None
    time: TimeBoost | None = None
    named: Named | None = None


class GroupContext(BaseModel):
    """Each new row's ``field`` holds the embedded texts of up to ``turns`` preceding rows of
    its group (equal ``group`` fields, ordered by ``order``), oldest first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field(description="Text field the store fills (placed in the embed template).")
    group: tuple[str, ...]
    order: str
    turns: int = Field(1, description=f"Preceding rows, 1 to {MAX_CONTEXT_TURNS}.")


class DateGrounding(BaseModel):
    """The store resolves the time expressions of ``text`` against ``time`` into ``field``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field(description="json field the store fills with the resolved dates.")
    text: str = Field(description="Text field whose time expressions are resolved.")
    time: str = Field(description="datetime or date field the expressions are relative to.")


def _check_group(group: tuple[str, ...], order: str, kinds: Mapping[str, str],
                 where: str) -> None:
    if not group:
        raise SchemaError("group names no field", field=f"{where}.group")
    for name in group:
        if name not in kinds:
            raise SchemaError(f"group field {name!r} is not a field of the type",
                              field=f"{where}.group")
    if order not in kinds:
        raise SchemaError(f"order field {order!r} is not a field of the type",
                          field=f"{where}.order")
    if kinds[order] != "int":
        raise SchemaError(f"order field {order!r} must be an int field, not {kinds[order]}",
                          field=f"{where}.order")


def check_profile(profile: SearchProfile, kinds: Mapping[str, str]) -> None:
    """A SchemaError if ``profile`` names an unknown fusion or leg, a bad weight or constant,
    or fields that ``kinds`` (field name -> kind) does not have."""
    if profile.fusion is not None and profile.fusion not in FUSIONS:
        raise SchemaError(f"unknown fusion {profile.fusion!r}; known: {', '.join(FUSIONS)}",
                          field="search.fusion")
    if profile.rrf_k is not None and profile.rrf_k < 1:
        raise SchemaError("rrf_k must be >= 1", field="search.rrf_k")
    for leg, weight in (profile.weights or {}).items():
        if leg not in LEGS:
            raise SchemaError(f"unknown leg {leg!r}; known: {', '.join(LEGS)}",
                              field=f"search.weights.{leg}")
        if not math.isfinite(weight) or weight < 0:
            raise SchemaError(f"weight of {leg!r} must be a finite number >= 0",
                              field=f"search.weights.{leg}")
    near = profile.neighbours
    if near is not None:
        _check_group(near.group, near.order, kinds, "search.neighbours")
        if not math.isfinite(near.weight) or near.weight < 0:
            raise SchemaError("neighbour weight must be a finite number >= 0",
                              field="search.neighbours.weight")
    sessions = profile.sessions
    if sessions is not None:
        for name in sessions.group:
            if name not in kinds:
                raise SchemaError(f"group field {name!r} is not a field of the type",
                                  field="search.sessions.group")
        if not sessions.group:
            raise SchemaError("group names no field", field="search.sessions.group")
        if not math.isfinite(sessions.weight) or sessions.weight < 0:
            raise SchemaError("session weight must be a finite number >= 0",
                              field="search.sessions.weight")
        if not 0 <= sessions.diversity < 1:
            raise SchemaError("session diversity must be from 0 to below 1",
                              field="search.sessions.diversity")
    if profile.named is not None:
        if profile.named.field not in kinds or kinds[profile.named.field] not in ("str", "enum"):
            raise SchemaError(f"named field {profile.named.field!r} must be a text field of "
                              "the type", field="search.named.field")
        if not math.isfinite(profile.named.weight) or profile.named.weight < 0:
            raise SchemaError("named weight must be a finite number >= 0",
                              field="search.named.weight")
    if profile.time is not None:
        for part in ("window", "when"):
            value = getattr(profile.time, part)
            if not math.isfinite(value) or value < 0:
                raise SchemaError(f"time {part} must be a finite number >= 0",
                                  field=f"search.time.{part}")


def check_context(context: GroupContext, kinds: Mapping[str, str],
                  embedded: set[str]) -> None:
    """A SchemaError if ``context`` names missing fields, a non-text field, a field outside
    the embed template (``embedded``) or a turn count out of range."""
    _check_group(context.group, context.order, kinds, "context")
    if context.field not in kinds:
        raise SchemaError(f"context field {context.field!r} is not a field of the type",
                          field="context.field")
    if kinds[context.field] != "str":
        raise SchemaError(f"context field {context.field!r} must be a str field",
                          field="context.field")
    if context.field not in embedded:
        raise SchemaError(f"context field {context.field!r} is not in the embed template",
                          field="context.field")
    if context.field in context.group or context.field == context.order:
        raise SchemaError("the context field cannot also group or order rows",
                          field="context.field")
    if not 1 <= context.turns <= MAX_CONTEXT_TURNS:
        raise SchemaError(f"context turns must be from 1 to {MAX_CONTEXT_TURNS}",
                          field="context.turns")



def check_dates(dates: DateGrounding, kinds: Mapping[str, str]) -> None:
    """A SchemaError if ``dates`` names missing fields or fields of the wrong kind."""
    for part, kind_ok in (("field", ("json",)), ("text", ("str",)),
                          ("time", ("datetime", "date"))):
        name = getattr(dates, part)
        if name not in kinds:
            raise SchemaError(f"dates {part} {name!r} is not a field of the type",
                              field=f"dates.{part}")
        if kinds[name] not in kind_ok:
            raise SchemaError(f"dates {part} {name!r} must be a {' or '.join(kind_ok)} field, "
                              f"not {kinds[name]}", field=f"dates.{part}")
    if len({dates.field, dates.text, dates.time}) < 3:
        raise SchemaError("dates field, text and time must be three different fields",
                          field="dates.field")
