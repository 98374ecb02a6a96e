"""The shared state of the store's layers: the database, the audit log, the type registry
and the write hooks.

The store is one class built in layers, each a module a reader can take in one sitting and
each importing only the layers below it: state -> rows (reading entity rows) -> registry
(types and migrations) -> timetravel (``as_of``) -> queries -> writes (update, delete,
erase) -> bulk (create) -> relations -> store. The audit log (:mod:`.chain`) is a part the
state holds, not a layer: only it numbers and chains events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
from pydantic import BaseModel

from ..checks import Limits
from ..errors import (
    NotFound,
    ValidationError,
)
from ..schema import EntityType
from .chain import AuditLog, Listener
from .db import Database

#: Called inside the write transaction after each entity mutation, link and unlink with
#: (con, tenant, op, type name, entity id); writes a hook makes do not call hooks again.
#: (connection, tenant, op, type, entity ID, principal of the write) -> None
WriteHook = Callable[[duckdb.DuckDBPyConnection, str, str, str, str, str | None], None]
__all__ = ["Listener", "StoreState", "WriteHook"]


class StoreState:
    """The attributes every layer of the store shares (set by ``Store.__init__``)."""

    db: Database
    limits: Limits
    #: the store's secret that seals query cursors (``tables.cursor_secret``)
    cursor_key: bytes
    _types: dict[str, EntityType]
    _user_models: dict[str, type[BaseModel]]
    #: the audit log: the only holder of the seq, the chain's hashes and the outbox queue
    log: AuditLog
    write_hooks: list[WriteHook]
    _in_hooks: bool
    #: types whose rows the open write transaction updated or deleted (see define)
    _modified: set[str]

    def types(self) -> list[EntityType]:
        """Every registered type, by name."""
        return [self._types[n] for n in sorted(self._types)]

    def type_of(self, name: Any, tenant: str | None = None, *,
                principal: str | None = None) -> EntityType:
        """The registered type of that name, or NotFound listing the known types and saying
        how to define one (the registry also defines a bundled type for ``tenant``)."""
        if not isinstance(name, str):
            raise ValidationError("type must be a type name string", field="type")
        etype = self._types.get(name)
        if etype is None:
            known = ", ".join(sorted(self._types)) or "none defined"
            raise NotFound(f"unknown entity type {name!r} (known: {known}); define it first: "
                           "define(model) or define_type(definition) in Python, POST /types "
                           "over HTTP, `dmf define FILE.toml` on the command line",
                           field="type")
        return etype

    def _after_write(self, con: duckdb.DuckDBPyConnection, tenant: str, op: str,
                     type_name: str, eid: str, principal: str | None) -> None:
        """Run the write hooks (not for writes the hooks themselves make); what they write
        records the ``principal`` of the write that set them off."""
        if not self.write_hooks or self._in_hooks:
            return
        self._in_hooks = True
        try:
            for hook in list(self.write_hooks):
                hook(con, tenant, op, type_name, eid, principal)
        finally:
            self._in_hooks = False

    @contextmanager
    def hooks_paused(self) -> Iterator[None]:
        """Writes in this block do not run the write hooks (as writes made by a hook)."""
        previous, self._in_hooks = self._in_hooks, True
        try:
            yield
        finally:
            self._in_hooks = previous

    def _mark_modified(self, type_name: str) -> None:
        """Remember that this transaction updated or deleted rows of a type's table."""
        if not self._modified:
            self.db.after_commit(self._modified.clear)
            self.db.on_rollback(self._modified.clear)
        self._modified.add(type_name)
