"""The type registry: loading, defining and migrating entity types (each version audited).
"""

from __future__ import annotations

from typing import Any

import duckdb
from pydantic import BaseModel

from ..analyzers import check_runnable
from ..bundled import BUNDLED_ACTOR, BUNDLED_REASON, bundled_type
from ..checks import check_type_size
from ..clock import to_naive_utc, utcnow
from ..errors import (
    SchemaError,
)
from ..ids import sha256_hex
from ..schema import EntityType, TypeDef, build_model
from .rows import RowReader
from .tables import (
    add_columns,
    create_type_table,
    table_name,
)


class TypeRegistry(RowReader):
    """The type registry."""

    def _load_registry(self) -> None:
        rows = self.db.fetchall(
            "SELECT name, version, definition FROM schema_types "
            "QUALIFY row_number() OVER (PARTITION BY name ORDER BY version DESC) = 1 "
            "ORDER BY name"
        )
        for name, version, definition in rows:
            typedef = TypeDef.model_validate_json(definition)
            self._types[name] = EntityType(typedef, version, build_model(typedef))

    def type_of(self, name: Any, tenant: str | None = None, *,
                principal: str | None = None) -> EntityType:
        """The registered type of that name; a bundled type (:mod:`dmf_hybrid.bundled`) not
        registered yet is defined for ``tenant`` first, when a tenant is given (``principal``:
        of the write that needs it; a read records none)."""
        if tenant is not None and isinstance(name, str) and name not in self._types:
            typedef = bundled_type(name)
            if typedef is not None:
                return self.define(typedef, tenant=tenant, actor=BUNDLED_ACTOR,
                                   reason=BUNDLED_REASON, principal=principal)
        return super().type_of(name)

    def define(self, typedef: TypeDef, model: type[BaseModel] | None = None, *,
               tenant: str, actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None) -> EntityType:
        """Register a type or a compatible new version of it (an online migration).

        A relation's target must be a defined type, the type itself or ``"*"`` when the
        transaction commits: types that target each other are defined in one transaction
        (a file's types are).
        """
        typedef = typedef.check()
        check_type_size(typedef.model_dump(mode="json"), self.limits)
        for where, name in [("analyzer", typedef.analyzer)] + [
                (f"fields.{f}.analyzer", s.analyzer) for f, s in typedef.fields.items()
                if s.analyzer is not None]:
            check_runnable(name, where)
        with self.db.write() as con:
            current = self._types.get(typedef.name)
            clash = [n for n in self._types if n.lower() == typedef.name.lower()
                     and n != typedef.name]
            if clash:
                raise SchemaError(f"type {typedef.name!r} clashes with {clash[0]!r} (names are "
                                  "case-insensitive)", field="name")
            if current is not None and current.typedef == typedef:
                if model is not None:
                    current.model = model
                    self._user_models[typedef.name] = model
                return current
            added: list[str] = []
            if current is not None:
                added = check_compatible(current.typedef, typedef)
            if added and typedef.name in self._modified:
                # DuckDB 1.4 cannot commit ALTER TABLE after UPDATE/DELETE of the same table
                # in one transaction (and its state is unreliable after that failed commit)
                raise SchemaError(
                    f"adding fields to {typedef.name} cannot share a transaction with earlier "
                    f"changes to {typedef.name} entities; migrate in a transaction of its own "
                    "(or first)", field="fields")
            version = 1 if current is None else current.version + 1
            seq = self.log.append(
                con, tenant=tenant, op="define", type_name=typedef.name, entity_id=None,
                version_before=None if current is None else current.version,
                version_after=version,
                before=None if current is None else current.typedef.model_dump(mode="json"),
                after=typedef.model_dump(mode="json"), actor=actor, reason=reason,
                trace_id=trace_id, meta={"added_fields": added} if added else None,
                principal=principal,
            )
            con.execute(
                "INSERT INTO schema_types VALUES (?, ?, ?, ?, ?)",
                [typedef.name, version, typedef.model_dump_json(), seq,
                 to_naive_utc(utcnow())],
            )
            new = EntityType(typedef, version, model or build_model(typedef))
            if current is None:
                create_type_table(con, new)
            else:
                add_columns(con, typedef, added)
                self._mark_modified(typedef.name)
            previous = current
            self._types[typedef.name] = new

            def undo() -> None:
                if previous is None:
                    self._types.pop(typedef.name, None)
                else:
                    self._types[typedef.name] = previous

            self.db.on_rollback(undo)
            if any(rel.target not in ("*", typedef.name) and rel.target not in self._types
                   for rel in typedef.relations.values()):
                self.db.before_commit(lambda: self._check_targets(typedef))
            if current is not None and current.typedef.embed != typedef.embed:
                self._requeue_type(con, new, tenant=None)
        return new

    def _check_targets(self, typedef: TypeDef) -> None:
        """SchemaError unless every relation of ``typedef`` targets a defined type."""
        for name, rel in typedef.relations.items():
            if rel.target not in ("*", typedef.name) and rel.target not in self._types:
                raise SchemaError(f"relation {name!r} of {typedef.name} targets "
                                  f"{rel.target!r}, which is not a defined type; define "
                                  f"{rel.target} first or in the same transaction (a file's "
                                  "types are), or target \"*\" for any type",
                                  field=f"relations.{name}.target")

    def _requeue_type(self, con: duckdb.DuckDBPyConnection, etype: EntityType,
                      tenant: str | None) -> None:
        """Recompute text hashes and queue every live entity of a type for reindexing."""
        self._mark_modified(etype.name)
        rows = con.execute(
            f"SELECT id, tenant FROM {table_name(etype.name)} WHERE deleted_at IS NULL "
            + ("AND tenant = ? " if tenant else "") + "ORDER BY id",
            [tenant] if tenant else [],
        ).fetchall()
        for eid, etenant in rows:
            entity = self._read_live(con, etype, eid, etenant)
            text = etype.embed_text(entity.fields()) if entity else None
            match, params = self._row_match(con, table_name(etype.name), eid, etenant)
            con.execute(
                f"UPDATE {table_name(etype.name)} SET text_hash = ? WHERE {match}",
                [None if text is None else sha256_hex(text), *params],
            )
            self.log.enqueue(con, self.log.seq, etenant, eid, etype.name,
                         "upsert" if text is not None else "delete", unique=False)


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
