"""Giving each tenant its own copy of the types a format-3 store shared between tenants.

Before format 4 a type was global: its one table held the rows of every tenant. The format
migration (:func:`.tables.create_fixed`) makes every existing type the default tenant's; this
module then gives every other tenant that used a type (it holds entities of it, or defined
it) a copy: the same versions in ``schema_types``, a table of its own that its rows move to,
and one audit event per copy (``op="define"`` by :data:`SPLIT_ACTOR`, version unchanged,
``meta.rows_moved``). A copied type brings the types its relations target, so the tenant's
types stay closed under their relations; a rule on a copied type is copied too (rules, like
types, belong to a tenant from format 4 on), with the ``Constraint`` type its constraints are
rows of. Vectors are re-keyed by the reconcile the store then
asks for (``RECONCILE_PENDING``). It all happens in one write transaction when the store
opens, so a crash leaves either the old layout (and the work still pending) or the new one.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from ..ids import DEFAULT_TENANT
from ..ruledefs import CONSTRAINT_TYPE
from ..schema import EntityType, TypeDef, build_model
from .chain import AuditLog
from .sql import q
from .tables import RECONCILE_PENDING, SPLIT_PENDING, SYSTEM_COLUMNS, create_type_table, table_name
from .txn import Connection, Transactions

log = logging.getLogger(__name__)

SPLIT_ACTOR = "dmf-store"
SPLIT_REASON = ("store format 4: each tenant owns its types; this tenant's own copy of a type "
                "that tenants shared before")


class Shared(Protocol):
    """What the split reads of the registry: the (default tenant's) shared types."""

    def types(self, tenant: str | None = None) -> list[EntityType]: ...


def split_shared_types(db: Transactions, audit_log: AuditLog, registry: Shared) -> None:
    """Give every tenant that used a shared type its own copy (see the module docstring)."""
    shared = {t.name: t for t in registry.types(DEFAULT_TENANT)}
    with db.write() as con:
        used = con.execute(
            "SELECT DISTINCT tenant, type FROM entity_index WHERE tenant <> ? UNION "
            "SELECT DISTINCT tenant, type FROM events WHERE tenant <> ? AND op = 'define' "
            "AND type IS NOT NULL", [DEFAULT_TENANT, DEFAULT_TENANT]).fetchall()
        wanted: dict[str, set[str]] = {}
        for tenant, name in used:
            if name in shared:
                _with_targets(shared, name, wanted.setdefault(tenant, set()))
        rules = _latest_rules(con)
        triggers = {str(rule.get("trigger", {}).get("type")) for _n, _v, rule in rules}
        for names in wanted.values():  # a copied rule raises its constraints in the tenant
            if names & triggers:
                _with_targets(shared, CONSTRAINT_TYPE, names)
        for tenant in sorted(wanted):
            for name in sorted(wanted[tenant]):
                etype = shared[name]
                _copy_versions(con, "schema_types", name, tenant)
                copy = EntityType(etype.typedef, etype.version, build_model(etype.typedef),
                                  tenant)
                create_type_table(con, copy)
                columns = ", ".join(q(c) for c in (*SYSTEM_COLUMNS, *etype.fields))
                con.execute(f"INSERT INTO {table_name(copy.key)} ({columns}) SELECT {columns} "
                            f"FROM {table_name(etype.key)} WHERE tenant = ?", [tenant])
                con.execute(f"DELETE FROM {table_name(etype.key)} WHERE tenant = ?", [tenant])
                counted = con.execute(f"SELECT count(*) FROM {table_name(copy.key)}").fetchone()
                moved = int(counted[0]) if counted else 0  # the table is new: all moved here
                definition = etype.typedef.model_dump(mode="json")
                audit_log.append(
                    con, tenant=tenant, op="define", type_name=name, entity_id=None,
                    version_before=etype.version, version_after=etype.version,
                    before=definition, after=definition, actor=SPLIT_ACTOR,
                    reason=SPLIT_REASON, trace_id=None,
                    meta={"store_format": 4, "rows_moved": moved})
        _copy_rules(con, audit_log, wanted, rules)
        con.execute("DELETE FROM meta WHERE key = ?", [SPLIT_PENDING])
        if wanted:
            con.execute("INSERT INTO meta VALUES (?, 'types belong to tenants') "
                        "ON CONFLICT DO NOTHING", [RECONCILE_PENDING])
    for tenant in sorted(wanted):
        log.info("tenant %s now owns its copies of %s", tenant, ", ".join(sorted(wanted[tenant])))


def _latest_rules(con: Connection) -> list[tuple[str, int, dict[str, Any]]]:
    """(name, version, definition) of the latest version of each rule defined so far (every
    one the default tenant's), by name; none when the store never defined a rule."""
    if con.execute("SELECT 1 FROM information_schema.tables WHERE table_name = 'dmf_rules' "
                   "AND table_schema = current_schema()").fetchone() is None:
        return []
    return [(str(name), int(version), json.loads(definition)) for name, version, definition
            in con.execute("SELECT DISTINCT ON (name) name, version, definition FROM dmf_rules "
                           "WHERE tenant = ? ORDER BY name, version DESC",
                           [DEFAULT_TENANT]).fetchall()]


def _copy_rules(con: Connection, audit_log: AuditLog, wanted: dict[str, set[str]],
                latest: list[tuple[str, int, dict[str, Any]]]) -> None:
    """A rule defined before applied to every tenant: each tenant that now owns a copy of its
    trigger type gets a copy of it (its versions, and a ``define_rule`` event); the tenant's
    copies include the ``Constraint`` type its rules write."""
    for name, version, rule in latest:
        trigger = rule.get("trigger", {}).get("type")
        for tenant in sorted(t for t, names in wanted.items() if trigger in names):
            _copy_versions(con, "dmf_rules", name, tenant)
            audit_log.append(
                con, tenant=tenant, op="define_rule", type_name=trigger, entity_id=None,
                version_before=version, version_after=version, before=rule, after=rule,
                actor=SPLIT_ACTOR, reason=SPLIT_REASON, trace_id=None,
                meta={"rule": name, "rule_version": version, "store_format": 4})


def _copy_versions(con: Connection, table: str, name: str, tenant: str) -> None:
    """Every version of the default tenant's type or rule ``name`` (in ``table``: schema_types
    or dmf_rules, whose columns are the same), as the same versions of ``tenant``'s."""
    con.execute(f"INSERT INTO {table} (tenant, name, version, definition, seq, created_at) "
                "SELECT ?, name, version, definition, seq, created_at FROM "
                f"{table} WHERE tenant = ? AND name = ?", [tenant, DEFAULT_TENANT, name])


def _with_targets(shared: dict[str, EntityType], name: str, into: set[str]) -> None:
    """Add ``name`` and the shared types its relations reach, transitively."""
    todo = [name]
    while todo:
        current = todo.pop()
        if current in into or current not in shared:
            continue
        into.add(current)
        typedef: TypeDef = shared[current].typedef
        todo.extend(rel.target for rel in typedef.relations.values() if rel.target != "*")
