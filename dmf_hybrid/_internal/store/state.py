"""The shared state of the store's layers: the database, the audit log, the type registry
and the write hooks.

The store is one class built in layers, each a module a reader can take in one sitting and
each importing only the layers below it: state -> rows (reading entity rows) -> timetravel
(``as_of``) -> queries -> writes (update, delete, erase) -> bulk (create) -> relations ->
store. The audit log (:mod:`.chain`) and the type registry (:mod:`.registry`) are parts the
state holds, not layers: only the log numbers and chains events, only the registry defines
types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..checks import Limits
from ..schema import EntityType
from .chain import AuditLog, Listener
from .registry import TypeRegistry
from .txn import Connection, Transactions

#: Called inside the write transaction after each entity mutation, link and unlink with
#: (con, tenant, op, type name, entity id); writes a hook makes do not call hooks again.
#: (connection, tenant, op, type, entity ID, principal of the write) -> None
WriteHook = Callable[[Connection, str, str, str, str, str | None], None]


@dataclass
class Followed:
    """Commits of other processes (PostgreSQL) this process followed: the events after
    ``after`` up to ``upto``, their ops, and the entities they created, changed or removed."""

    after: int
    upto: int
    ops: set[str] = field(default_factory=set)
    #: (type, tenant) -> IDs
    entities: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def then(self, later: Followed) -> Followed:
        """These commits and the ``later`` ones, as one range."""
        entities = {part: set(ids) for part, ids in self.entities.items()}
        for part, ids in later.entities.items():
            entities.setdefault(part, set()).update(ids)
        return Followed(self.after, later.upto, self.ops | later.ops, entities)


#: Told what this process followed of other processes' commits, holding the write lock, so
#: that it brings its own state forward.
ForeignHook = Callable[[Followed], None]
__all__ = ["Followed", "ForeignHook", "Listener", "StoreState", "WriteHook"]


class StoreState:
    """The attributes every layer of the store shares (set by ``Store.__init__``)."""

    db: Transactions
    limits: Limits
    #: the store's secret that seals query cursors (``tables.cursor_secret``)
    cursor_key: bytes
    #: the audit log: the only holder of the seq, the chain's hashes and the outbox queue
    log: AuditLog
    #: the entity types (defined and migrated there)
    registry: TypeRegistry
    write_hooks: list[WriteHook]
    follow_hooks: list[ForeignHook]
    foreign_hooks: list[ForeignHook]
    _in_hooks: bool

    def types(self, tenant: str | None = None) -> list[EntityType]:
        """The types of ``tenant`` by name, or of every tenant (None)."""
        return self.registry.types(tenant)

    def type_of(self, name: Any, tenant: str, *, principal: str | None = None,
                define_bundled: bool = True) -> EntityType:
        """The tenant's type of that name, or NotFound (see :meth:`TypeRegistry.type_of`)."""
        return self.registry.type_of(name, tenant, principal=principal,
                                     define_bundled=define_bundled)

    def _after_write(self, con: Connection, tenant: str, op: str,
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
