"""Entity types, their fields, identity, relations and embed template.

The filter language over these types is in :mod:`dmf_hybrid._internal.filters`.

A type is declared either as a pydantic v2 model (``Memory.define``) or as data
(``indexes/*.toml``, ``TypeDef``); both become the same :class:`EntityType`.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import string
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .analyzers import DEFAULT_ANALYZER, check_analyzer
from .checks import (
    FIELD_NAME_RE,
    RELATION_NAME_RE,
    TYPE_NAME_RE,
    check_data,
    check_enum_values,
    control_at,
    first_non_finite,
    fits_int64,
    full_match,
    identity_text,
    reserved_reason,
)
from .errors import FilterError, SchemaError, ValidationError, first_problem
from .expiry import check_ttl
from .ids import DEFAULT_TENANT, type_key
from .jsonpaths import render, split_path, value_at
from .profiles import (
    DateGrounding,
    GroupContext,
    SearchProfile,
    check_context,
    check_dates,
    check_profile,
)

_M = TypeVar("_M", bound=BaseModel)

SCALAR_KINDS = ("str", "int", "float", "bool", "date", "datetime", "enum")
FieldKind = Literal["str", "int", "float", "bool", "date", "datetime", "enum", "list", "json"]
ItemKind = Literal["str", "int", "float", "bool", "date", "datetime"]
Cardinality = Literal["one", "many"]

PY_TYPES: dict[str, Any] = {
    "str": str, "int": int, "float": float, "bool": bool, "date": dt.date, "datetime": dt.datetime,
}


class FieldSpec(BaseModel):
    """One field of an entity type, as data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: FieldKind = "str"
    item: ItemKind | None = Field(None, description="Element type of a list field.")
    values: tuple[str, ...] | None = Field(None, description="Allowed values of an enum field.")
    required: bool = False
    default: Any = None
    nullable: bool = True
    description: str | None = None
    analyzer: str | None = Field(
        None, description="Keyword analyzer of this field's text; None = the type's.")
    indexed: bool = Field(False, strict=True, description="Index the field's column, for "
                          "filters on it (docs/concepts.md; PostgreSQL).")

    def python_type(self) -> Any:
        """The Python annotation a value of this field has (without None)."""
        if self.type == "enum":
            assert self.values
            return Literal[self.values]  # type: ignore[valid-type]
        if self.type == "list":
            return list[PY_TYPES[self.item or "str"]]  # type: ignore[misc]
        if self.type == "json":
            return pydantic.JsonValue
        return PY_TYPES[self.type]


class RelationSpec(BaseModel):
    """A relation a type may have: its target type and cardinality."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    cardinality: Cardinality = "many"
    description: str | None = None


class TypeDef(BaseModel):
    """An entity type as data: what ``indexes/*.toml`` and the schema registry hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    fields: dict[str, FieldSpec]
    identity: tuple[str, ...] | None = Field(
        None, description="Fields the ID is derived from; None = all fields given at creation."
    )
    relations: dict[str, RelationSpec] = Field(default_factory=dict)
    embed: str | None = Field(None, description="Text template of the embedded text.")
    description: str | None = None
    analyzer: str = Field(DEFAULT_ANALYZER, description="Keyword analyzer of the type's text "
                          "(dmf_hybrid._internal.analyzers); changing it re-analyses the type.")
    search: SearchProfile | None = Field(
        None, description="Search defaults of the type (docs/conversations.md).")
    context: GroupContext | None = Field(
        None, description="Preceding rows of a group embedded with each row "
                          "(docs/conversations.md).")
    dates: DateGrounding | None = Field(
        None, description="Time expressions of a text resolved into a field (docs/time.md).")
    ttl: float | None = Field(
        None, description="Default expiry of a new entity, in seconds from its creation; None: "
                          "entities do not expire unless a write says so.")

    def check(self) -> TypeDef:
        """This definition, or a SchemaError naming what is wrong with it."""
        if not full_match(TYPE_NAME_RE, self.name):
            raise SchemaError(
                f"type name {self.name!r} must match {TYPE_NAME_RE.pattern}", field="name"
            )
        if not self.fields:
            raise SchemaError(f"type {self.name} declares no fields", field="fields")
        if self.ttl is not None:
            try:
                check_ttl(self.ttl)
            except ValidationError as exc:
                raise SchemaError(f"type {self.name}: {exc.message}", field="ttl") from None
        for name, spec in self.fields.items():
            where = f"fields.{name}"
            if not full_match(FIELD_NAME_RE, name):
                raise SchemaError(f"field name {name!r} must match {FIELD_NAME_RE.pattern}",
                                  field=where)
            reason = reserved_reason(name)
            if reason is not None:
                raise SchemaError(f"field name {name!r} is reserved: {reason}", field=where,
                                  reason=reason)
            if spec.type == "enum" and not spec.values:
                raise SchemaError(f"enum field {name!r} needs values", field=where)
            check_enum_values(name, spec.values, where)
            if spec.type != "enum" and spec.values:
                raise SchemaError(f"only enum fields take values ({name!r})", field=where)
            if spec.type == "list" and spec.item is None:
                raise SchemaError(f"list field {name!r} needs an item type", field=where)
            if spec.type != "list" and spec.item is not None:
                raise SchemaError(f"only list fields take an item type ({name!r})", field=where)
            if spec.required and spec.default is not None:
                raise SchemaError(f"field {name!r} is required and has a default", field=where)
            if spec.default is not None:
                try:
                    TypeAdapter(spec.python_type()).validate_python(spec.default)
                except pydantic.ValidationError as exc:
                    raise SchemaError(f"default of {name!r} does not fit its type: "
                                      f"{first_problem(exc)[1]}", field=where) from None
        for name in self.identity or ():
            if name not in self.fields:
                raise SchemaError(f"identity field {name!r} is not a field of {self.name}",
                                  field="identity")
        for name, rel in self.relations.items():
            if not full_match(RELATION_NAME_RE, name):
                raise SchemaError(f"relation name {name!r} must match {RELATION_NAME_RE.pattern}",
                                  field=f"relations.{name}")
            if rel.target != "*" and not full_match(TYPE_NAME_RE, rel.target):
                raise SchemaError(f"relation {name!r} targets invalid type {rel.target!r}",
                                  field=f"relations.{name}")
        if self.embed is not None:
            for placeholder in template_fields(self.embed):
                root, keys = _template_path(placeholder)
                if root not in self.fields:
                    raise SchemaError(
                        f"embed template names unknown field {placeholder!r}", field="embed"
                    )
                if keys and self.fields[root].type != "json":
                    raise SchemaError(f"embed template path {placeholder!r}: only json fields "
                                      "have paths", field="embed")
        self._check_field_options()
        kinds = {name: spec.type for name, spec in self.fields.items()}
        if self.search is not None:
            check_profile(self.search, kinds)
        if self.context is not None:
            check_context(self.context, kinds, set(template_fields(self.embed or "")))
        if self.dates is not None:
            check_dates(self.dates, kinds)
        if self.search is not None and self.search.time is not None and self.dates is None:
            raise SchemaError("a time boost reads the type's grounded dates: declare dates "
                              "(field, text, time)", field="search.time")
        return self

    def _check_field_options(self) -> None:
        check_analyzer(self.analyzer)
        embedded = set(template_fields(self.embed)) if self.embed is not None else set()
        for name, spec in self.fields.items():
            if spec.indexed and spec.type not in SCALAR_KINDS:
                raise SchemaError(f"only single-valued fields can be indexed ({name!r} is "
                                  f"{spec.type})", field=f"fields.{name}.indexed")
            if spec.analyzer is None:
                continue
            where = f"fields.{name}.analyzer"
            check_analyzer(spec.analyzer, where)
            if spec.type not in ("str", "enum") and spec.item != "str":
                raise SchemaError(f"only text fields take an analyzer ({name!r} is "
                                  f"{spec.type})", field=where)
            if name not in embedded:
                raise SchemaError(f"field {name!r} has an analyzer but is not in the embed "
                                  "template, so it is not searched", field=where)


def _template_path(placeholder: str) -> tuple[str, tuple[str, ...]]:
    try:
        return split_path(placeholder, "embed")
    except FilterError as exc:
        raise SchemaError(exc.message, field="embed") from None


def template_fields(template: str) -> list[str]:
    """The field names a ``{field}`` text template refers to, in order."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise SchemaError(f"embed template is malformed: {exc}", field="embed") from None
    names = []
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if not name or spec or conv:
            raise SchemaError("embed template placeholders must be plain {field}", field="embed")
        names.append(name)
    return names


def build_model(typedef: TypeDef) -> type[BaseModel]:
    """A pydantic model class that validates the data of a TypeDef."""
    definitions: dict[str, Any] = {}
    for name, spec in typedef.fields.items():
        annotation = spec.python_type()
        if spec.nullable or not spec.required:
            annotation = annotation | None
        if spec.required:
            default: Any = ...
        elif spec.type == "list" and spec.default is None and not spec.nullable:
            default = Field(default_factory=list)
        else:
            default = spec.default
        definitions[name] = (annotation, Field(default, description=spec.description))
    config = ConfigDict(extra="forbid", allow_inf_nan=False)
    return pydantic.create_model(  # type: ignore[call-overload,no-any-return]
        typedef.name, __config__=config, __doc__=typedef.description, **definitions
    )


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        raise SchemaError(f"union types are not supported: {annotation}")
    return annotation, False


def _is_json(annotation: Any) -> bool:
    """A free-form JSON annotation: ``JsonValue``, ``dict`` or ``dict[str, Any]`` (a dict of
    typed values, ``dict[str, int]``, would lose its value type in a json field: refused)."""
    return annotation is pydantic.JsonValue or annotation is dict or (
        typing.get_origin(annotation) is dict and typing.get_args(annotation) == (str, Any))


def _scalar_kind(annotation: Any, where: str) -> tuple[str, tuple[str, ...] | None]:
    if annotation in (str, int, float, bool):
        return annotation.__name__, None
    if annotation is dt.datetime:
        return "datetime", None
    if annotation is dt.date:
        return "date", None
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        if all(isinstance(v, str) for v in values):
            return "enum", tuple(values)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "enum", tuple(str(m.value) for m in annotation)
    raise SchemaError(f"field {where} has an unsupported type {annotation!r}", field=where)


def typedef_from_model(
    model: type[BaseModel],
    *,
    name: str | None = None,
    identity: Sequence[str] | None = None,
    relations: Mapping[str, Any] | None = None,
    embed: str | None = None,
    analyzer: str | None = None,
    search: SearchProfile | Mapping[str, Any] | None = None,
    context: GroupContext | Mapping[str, Any] | None = None,
    ttl: float | dt.timedelta | None = None,
) -> TypeDef:
    """The TypeDef of a pydantic model class (fields from its annotations); ``ttl``: the
    type's default expiry (seconds or a timedelta).

    A field names its own keyword analyzer with ``Field(json_schema_extra={"analyzer": ...})``
    and asks for an index with ``Field(json_schema_extra={"indexed": True})``.
    """
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SchemaError(f"define() takes a pydantic model class, not {model!r}")
    fields: dict[str, FieldSpec] = {}
    for fname, info in model.model_fields.items():
        annotation, nullable = _unwrap_optional(info.annotation)
        item = values = None
        if _is_json(annotation):
            kind = "json"
        elif typing.get_origin(annotation) is list:
            (item_type,) = typing.get_args(annotation) or (str,)
            item, _ = _scalar_kind(item_type, fname)
            kind = "list"
        else:
            kind, values = _scalar_kind(annotation, fname)
        default = None
        if not info.is_required():
            raw = info.get_default(call_default_factory=True)
            default = raw.value if isinstance(raw, enum.Enum) else raw
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        fields[fname] = typing.cast(FieldSpec, _section(FieldSpec, {
            "type": kind, "item": item, "values": values, "required": info.is_required(),
            "default": default, "nullable": nullable, "description": info.description,
            "analyzer": extra.get("analyzer"), "indexed": extra.get("indexed", False),
        }, f"fields.{fname}"))
    rels = {k: v if isinstance(v, RelationSpec) else RelationSpec.model_validate(v)
            for k, v in (relations or {}).items()}
    profile = _section(SearchProfile, search, "search")
    group_context = _section(GroupContext, context, "context")
    return TypeDef(
        name=name or model.__name__, fields=fields,
        identity=tuple(identity) if identity is not None else None,
        relations=rels, embed=embed, description=(model.__doc__ or "").strip() or None,
        search=profile, context=group_context, ttl=_type_ttl(ttl),
        **({} if analyzer is None else {"analyzer": analyzer}),
    ).check()


def _type_ttl(value: Any) -> float | None:
    """A type's default ``ttl`` as seconds (a SchemaError naming ``ttl`` if it is bad)."""
    if value is None:
        return None
    try:
        span = check_ttl(value)
    except ValidationError as exc:
        raise SchemaError(exc.message, field="ttl") from None
    if not isinstance(span, dt.timedelta):
        raise SchemaError("a type's ttl is a duration (seconds or a timedelta)", field="ttl")
    return span.total_seconds()


def _section(model: type[_M], value: Any, section: str) -> _M | None:
    """``value`` as a ``model`` (None stays None), or a SchemaError naming the faulty field."""
    if value is None or isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        where, msg = first_problem(exc)
        raise SchemaError(f"{section}: {where}: {msg}",
                          field=f"{section}.{where}" if where else section) from None


@dataclass
class EntityType:
    """A registered entity type: its definition, version and the model that validates data."""

    typedef: TypeDef
    version: int
    model: type[BaseModel]
    #: the tenant that owns the type (each tenant has types of its own)
    tenant: str = DEFAULT_TENANT

    @property
    def name(self) -> str:
        return self.typedef.name

    @property
    def key(self) -> str:
        """Where the type's rows, vectors and mirrors live: see :func:`type_key`."""
        return type_key(self.tenant, self.typedef.name)

    @property
    def fields(self) -> dict[str, FieldSpec]:
        return self.typedef.fields

    @functools.cached_property
    def json_fields(self) -> tuple[str, ...]:
        """The fields of type json (DuckDB returns their columns as JSON text)."""
        return tuple(n for n, spec in self.typedef.fields.items() if spec.type == "json")

    @functools.cached_property
    def datetime_fields(self) -> tuple[tuple[str, bool], ...]:
        """``(name, is a list)`` of the datetime and list-of-datetime fields."""
        return tuple((n, spec.type == "list") for n, spec in self.typedef.fields.items()
                     if spec.type == "datetime"
                     or (spec.type == "list" and spec.item == "datetime"))

    def field(self, name: str, where: str = "where") -> FieldSpec:
        """The spec of a field, or a FilterError naming the known fields."""
        spec = self.typedef.fields.get(name)
        if spec is None:
            known = ", ".join(sorted(self.typedef.fields))
            raise FilterError(f"{self.name} has no field {name!r} (fields: {known})", field=where)
        return spec

    def validate_data(self, data: Mapping[str, Any], where: str = "data") -> BaseModel:
        """The validated model instance for ``data``, or a ValidationError naming the field."""
        check_data(data, where)
        unknown = sorted(set(data) - set(self.typedef.fields))
        if unknown:
            raise ValidationError(
                f"{self.name} has no field {unknown[0]!r}", field=f"{where}.{unknown[0]}"
            )
        try:
            instance = self.model.model_validate(dict(data))
        except pydantic.ValidationError as exc:
            loc, msg = first_problem(exc)
            raise ValidationError(
                f"{self.name}.{loc}: {msg}", field=f"{where}.{loc}" if loc else where,
                errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()],
            ) from None
        identity = set(self.typedef.identity or ())
        for name, spec in self.typedef.fields.items():
            value = getattr(instance, name)
            if spec.type in ("str", "list", "json"):
                bad_path = control_at(value)
                if bad_path is not None:
                    raise ValidationError(
                        f"{self.name}.{name}{bad_path} holds a control character (only tab, "
                        "line feed and carriage return are allowed in text)",
                        field=f"{where}.{name}")
            if name in identity and isinstance(value, str):
                normal = identity_text(value)
                if normal != value:
                    setattr(instance, name, normal)
            if value is None and not spec.nullable:
                raise ValidationError(f"{self.name}.{name} may not be null",
                                      field=f"{where}.{name}")
            if isinstance(value, float) and value != value or value in (float("inf"),
                                                                          float("-inf")):
                raise ValidationError(f"{self.name}.{name} must be a finite number",
                                      field=f"{where}.{name}")
            if spec.type == "json":
                bad = first_non_finite(value)
                if bad is not None:
                    where_bad = f"{where}.{name}" + (f".{bad}" if bad and bad[0] != "[" else bad)
                    raise ValidationError(f"{self.name}.{name}: NaN and Infinity are not JSON",
                                          field=where_bad)
            if not fits_int64(value):
                raise ValidationError(f"{self.name}.{name} is out of the 64-bit integer range",
                                      field=f"{where}.{name}")
        return instance

    def embed_text(self, data: Mapping[str, Any]) -> str | None:
        """The text the embed template makes of an entity's data (None: not embedded)."""
        return text_of_parts(self.embed_parts(data))

    def embed_roots(self) -> list[str]:
        """The fields the embed template reads, in the order it first names them."""
        parsed = _parsed_template(self.typedef.embed) if self.typedef.embed else ()
        return list(dict.fromkeys(root for _, name, root, _ in parsed if name is not None))

    def embed_parts(self, data: Mapping[str, Any]) -> list[tuple[str | None, str]] | None:
        """The rendered template as ``(field, text)`` pieces (``None`` for its own words)."""
        template = self.typedef.embed
        if template is None:
            return None
        parts: list[tuple[str | None, str]] = []
        for literal, name, root, keys in _parsed_template(template):
            if literal:
                parts.append((None, literal))
            if name is None:
                continue
            value = data.get(root)
            if self.typedef.fields[root].type == "json":
                text = render(value_at(value, keys))
            elif value is None:
                text = ""
            elif isinstance(value, list):
                text = ", ".join(str(v) for v in value)
            elif isinstance(value, enum.Enum):
                text = str(value.value)
            else:
                text = str(value)
            parts.append((name, text))
        return parts


def text_of_parts(parts: Sequence[tuple[str | None, str]] | None) -> str | None:
    """The embed text of rendered template pieces (:meth:`EntityType.embed_parts`)."""
    return None if parts is None else " ".join("".join(t for _, t in parts).split())


@functools.lru_cache(maxsize=512)
def _parsed_template(template: str) -> tuple[tuple[str, str | None, str, tuple[str, ...]], ...]:
    """(literal, field path, its root, its keys) of each piece of an embed template, parsed
    once (rendering 100,000 entities parsed it 100,000 times)."""
    out: list[tuple[str, str | None, str, tuple[str, ...]]] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        root, keys = ("", ()) if name is None else split_path(name, "embed")
        out.append((literal, name, root, keys))
    return tuple(out)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A definition file's TOML; SchemaError if it is missing or not valid TOML."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchemaError(f"definition file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"{path}: invalid TOML: {exc}") from None


def load_toml(path: str | Path) -> list[TypeDef]:
    """The entity types declared in a TOML file (``[types.Name]`` tables)."""
    return typedefs_from_data(read_toml(path).get("types", {}), source=str(path))


def typedefs_from_data(types_data: Mapping[str, Any], source: str = "data") -> list[TypeDef]:
    """TypeDefs from a mapping of type name to definition (the TOML/JSON form)."""
    result = []
    for tname, body in types_data.items():
        try:
            result.append(TypeDef.model_validate({"name": tname, **body}).check())
        except pydantic.ValidationError as exc:
            loc, msg = first_problem(exc)
            raise SchemaError(f"{source}: type {tname}: {loc}: {msg}",
                              field=loc) from None
    return result
