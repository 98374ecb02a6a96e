"""The shared state of the store's layers: the database, the type registry and the chain head.

The store is one class built in layers, each a module a reader can take in one sitting and
each importing only the layers below it: state -> chain (audit log, outbox, hooks) -> rows
(reading entity rows) -> registry (types and migrations) -> timetravel (``as_of``) ->
queries -> writes (update, delete, erase) -> bulk (create) -> relations -> store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
from pydantic import BaseModel

from ..checks import Limits
from ..errors import (
    NotFound,
    ValidationError,
)
from ..schema import EntityType
from .db import Database
from .journal import Journal

#: Called inside the write transaction after each entity mutation, link and unlink with
#: (con, tenant, op, type name, entity id); writes a hook makes do not call hooks again.
#: (connection, tenant, op, type, entity ID, principal of the write) -> None
WriteHook = Callable[[duckdb.DuckDBPyConnection, str, str, str, str, str | None], None]
#: Called after a commit with the outbox rows it queued: (seq, tenant, id, type, op).
Listener = Callable[[list[tuple[int, str, str, str, str]]], None]


class StoreState:
    """The attributes every layer of the store shares (set by ``Store.__init__``)."""

    db: Database
    limits: Limits
    #: the store's secret that seals query cursors (``tables.cursor_secret``)
    cursor_key: bytes
    _types: dict[str, EntityType]
    _user_models: dict[str, type[BaseModel]]
    listeners: list[Listener]
    write_hooks: list[WriteHook]
    _in_hooks: bool
    #: types whose rows the open write transaction updated or deleted (see define)
    _modified: set[str]
    #: outbox rows the open write transaction queued, told to the listeners once it commits
    _queued: list[tuple[int, str, str, str, str]] | None
    _seq: int
    _last_hash: str
    #: what the events this process committed lately were about (``journal.Journal``)
    journal: Journal

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
