"""The type registry: the store's entity types, loaded at open, defined and migrated online
(each version an audited event).

:class:`TypeRegistry` is a part the store composes (``store.registry``); it gets its
collaborators explicitly: the database, the audit log, the size limits, and what to do when a
type's embedded text changes (the store re-queues its entities).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..analyzers import check_runnable
from ..bundled import BUNDLED_ACTOR, BUNDLED_REASON, bundled_type
from ..checks import Limits, check_type_size
from ..errors import NotFound, SchemaError, ValidationError
from ..schema import EntityType, TypeDef, build_model
from .chain import AuditLog
from .tables import (
    SPLIT_PENDING,
    add_columns,
    create_type_table,
    indexed_fields,
    insert_definition,
    sync_field_indexes,
)
from .txn import Connection, Transactions
from .type_split import split_shared_types

#: Re-queues a type's entities after its embedded text changed (inside the defining write).
EmbedChange = Callable[[Connection, EntityType], None]


class TypeRegistry:
    """The entity types of one database, by tenant and name: each tenant has types of its own
    (two tenants may define ``Order`` with different fields), and sees no other's."""

    def __init__(self, db: Transactions, log: AuditLog, limits: Limits,
                 on_embed_change: EmbedChange) -> None:
        self._db, self._log, self._limits = db, log, limits
        self._on_embed_change = on_embed_change
        self._types: dict[tuple[str, str], EntityType] = {}
        #: types whose rows the open write transaction updated or deleted (see define)
        self._modified: set[str] = set()
        self.reload()
        if db.fetchone("SELECT 1 FROM meta WHERE key = ?", [SPLIT_PENDING]) is not None:
            split_shared_types(db, log, self)
            self.reload()

    def reload(self) -> None:
        """Read the types from the database (at open; again when another process defined
        some). A type whose version did not change keeps its object (and its model)."""
        types: dict[tuple[str, str], EntityType] = {}
        rows = self._db.fetchall(
            "SELECT DISTINCT ON (tenant, name) tenant, name, version, definition "
            "FROM schema_types ORDER BY tenant, name, version DESC"
        )
        for tenant, name, version, definition in rows:
            typedef = TypeDef.model_validate_json(definition)
            known = self._types.get((tenant, name))
            types[(tenant, name)] = known if known is not None and known.version == version \
                else EntityType(typedef, version, build_model(typedef), tenant)
        self._types = types

    def types(self, tenant: str | None = None) -> list[EntityType]:
        """The types of ``tenant`` by name, or of every tenant (None; by tenant, then name)."""
        return [self._types[k] for k in sorted(self._types)
                if tenant is None or k[0] == tenant]

    def get(self, name: str, tenant: str) -> EntityType | None:
        """The tenant's registered type of that name, if any (no bundled type is defined
        here)."""
        return self._types.get((tenant, name))

    def type_of(self, name: Any, tenant: str, *, principal: str | None = None,
                define_bundled: bool = True) -> EntityType:
        """The tenant's registered type of that name, or NotFound listing the tenant's types and
        saying how to define one. A bundled type (:mod:`dmf_hybrid._internal.bundled`) the tenant
        has not used yet is defined for it first (``principal``: of the write that needs it; a read
        records none), unless ``define_bundled`` is False."""
        if not isinstance(name, str):
            raise ValidationError("type must be a type name string", field="type")
        self._db.sync()  # a shared engine: another process may have defined or migrated it
        if define_bundled and (tenant, name) not in self._types:
            typedef = bundled_type(name)
            if typedef is not None:
                return self.define(typedef, tenant=tenant, actor=BUNDLED_ACTOR,
                                   reason=BUNDLED_REASON, principal=principal)
        etype = self._types.get((tenant, name))
        if etype is None:
            known = ", ".join(t.name for t in self.types(tenant)) or "none defined"
            raise NotFound(f"unknown entity type {name!r} (known: {known}); define it first: "
                           "define(model) or define_type(definition) in Python, POST /types "
                           "over HTTP, `dmf define FILE.toml` on the command line",
                           field="type")
        return etype

    def mark_modified(self, etype: EntityType) -> None:
        """Remember that the open write transaction updated or deleted rows of a type."""
        if not self._modified:
            self._db.after_commit(self._modified.clear)
            self._db.on_rollback(self._modified.clear)
        self._modified.add(etype.key)

    def define(self, typedef: TypeDef, model: type[BaseModel] | None = None, *,
               tenant: str, actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None) -> EntityType:
        """Register a type or a compatible new version of it (an online migration).

        A relation's target must be a defined type, the type itself or ``"*"`` when the
        transaction commits: types that target each other are defined in one transaction
        (a file's types are).
        """
        typedef = typedef.check()
        check_type_size(typedef.model_dump(mode="json"), self._limits)
        for where, name in [("analyzer", typedef.analyzer)] + [
                (f"fields.{f}.analyzer", s.analyzer) for f, s in typedef.fields.items()
                if s.analyzer is not None]:
            check_runnable(name, where)
        with self._db.write(tenant) as con:
            key = (tenant, typedef.name)
            current = self._types.get(key)
            clash = [t.name for t in self.types(tenant) if t.name.lower() == typedef.name.lower()
                     and t.name != typedef.name]
            if clash:
                raise SchemaError(f"type {typedef.name!r} clashes with {clash[0]!r} (names are "
                                  "case-insensitive)", field="name")
            if current is not None and current.typedef == typedef:
                if model is not None:
                    current.model = model
                return current
            added: list[str] = []
            if current is not None:
                added = check_compatible(current.typedef, typedef)
            reindexed = current is not None and (
                indexed_fields(current.typedef) != indexed_fields(typedef))
            if (added or reindexed) and current is not None and current.key in self._modified:
                # DuckDB 1.4 cannot commit ALTER TABLE after UPDATE/DELETE of the same table
                # in one transaction (and its state is unreliable after that failed commit);
                # a change of indexes is refused there too, on both engines, so that a
                # definition behaves the same on either
                what = "adding fields to" if added else "indexing fields of"
                raise SchemaError(
                    f"{what} {typedef.name} cannot share a transaction with earlier "
                    f"changes to {typedef.name} entities; migrate in a transaction of its own "
                    "(or first)", field="fields")
            version = 1 if current is None else current.version + 1
            seq = self._log.append(
                con, tenant=tenant, op="define", type_name=typedef.name, entity_id=None,
                version_before=None if current is None else current.version,
                version_after=version,
                before=None if current is None else current.typedef.model_dump(mode="json"),
                after=typedef.model_dump(mode="json"), actor=actor, reason=reason,
                trace_id=trace_id, meta={"added_fields": added} if added else None,
                principal=principal,
            )
            insert_definition(con, tenant, typedef, version, seq)
            new = EntityType(typedef, version, model or build_model(typedef), tenant)
            if current is None:
                create_type_table(con, new)
            else:
                add_columns(con, new, added)
                sync_field_indexes(con, new, current)
                self.mark_modified(new)
            previous = current

            def undo() -> None:
                if previous is None:
                    self._types.pop(key, None)
                else:
                    self._types[key] = previous

            self._db.on_rollback(undo)  # before the change, so nothing can come between
            self._types[key] = new
            if any(rel.target not in ("*", typedef.name) and (tenant, rel.target)
                   not in self._types for rel in typedef.relations.values()):
                self._db.before_commit(lambda: self._check_targets(typedef, tenant))
            if current is not None and current.typedef.embed != typedef.embed:
                self._on_embed_change(con, new)
        return new

    def _check_targets(self, typedef: TypeDef, tenant: str) -> None:
        """SchemaError unless every relation of ``typedef`` targets a type of ``tenant``."""
        for name, rel in typedef.relations.items():
            if rel.target not in ("*", typedef.name) and (tenant, rel.target) not in self._types:
                raise SchemaError(f"relation {name!r} of {typedef.name} targets "
                                  f"{rel.target!r}, which is not a defined type; define "
                                  f"{rel.target} first or in the same transaction (a file's "
                                  "types are), or target \"*\" for any type",
                                  field=f"relations.{name}.target")


def check_compatible(old: TypeDef, new: TypeDef) -> list[str]:
    """Fields that ``new`` adds to ``old``; SchemaError if the change is incompatible."""
    reasons = []
    for name, spec in old.fields.items():
        if name not in new.fields:
            reasons.append(f"field {name!r} was removed")
            continue
        nspec = new.fields[name]
        if (nspec.type, nspec.item) != (spec.type, spec.item):
            reasons.append(f"field {name!r} changed type {spec.type} -> {nspec.type}")
        if spec.values and nspec.values and not set(spec.values) <= set(nspec.values):
            reasons.append(f"enum {name!r} dropped values")
        if nspec.required and not spec.required:
            reasons.append(f"field {name!r} became required")
        if spec.nullable and not nspec.nullable:
            reasons.append(f"field {name!r} became non-nullable")
    added = [n for n in new.fields if n not in old.fields]
    for name in added:
        if new.fields[name].required:
            reasons.append(f"new field {name!r} is required and has no default")
    if old.identity != new.identity:
        reasons.append("identity fields changed (IDs would change)")
    for name, rel in old.relations.items():
        if name in new.relations and new.relations[name] != rel:
            if (new.relations[name].target, new.relations[name].cardinality) != (
                    rel.target, rel.cardinality):
                reasons.append(f"relation {name!r} changed target or cardinality")
        elif name not in new.relations:
            reasons.append(f"relation {name!r} was removed")
    if reasons:
        raise SchemaError(
            f"incompatible change to {old.name}: " + "; ".join(reasons), field="fields",
            reasons=reasons,
        )
    return added
