"""What the store's parts share besides the database, the audit log and the type registry:
the write hooks, and what this process followed of other processes' commits.

The store (:mod:`.store`) is a façade over parts, each given its collaborators when it is
made: rows (reading entity rows) -> timetravel (``as_of``, ``get``) -> queries; writes (update,
delete, erase) -> bulk (create); relations. Only the audit log (:mod:`.chain`) numbers and
chains events, only the registry (:mod:`.registry`) defines types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .chain import Listener
from .txn import Connection

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
__all__ = ["Followed", "ForeignHook", "Listener", "WriteHook", "WriteHooks"]


class WriteHooks:
    """The write hooks: called inside the write transaction after each entity mutation,
    link and unlink; the writes a hook makes do not call the hooks again."""

    def __init__(self) -> None:
        self._hooks: list[WriteHook] = []
        self._running = False

    def add(self, hook: WriteHook) -> None:
        """Call ``hook`` after every write from now on."""
        self._hooks.append(hook)

    def after_write(self, con: Connection, tenant: str, op: str,
                    type_name: str, eid: str, principal: str | None) -> None:
        """Run the write hooks (not for writes the hooks themselves make); what they write
        records the ``principal`` of the write that set them off."""
        if not self._hooks or self._running:
            return
        self._running = True
        try:
            for hook in list(self._hooks):
                hook(con, tenant, op, type_name, eid, principal)
        finally:
            self._running = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Writes in this block do not run the write hooks (as writes made by a hook)."""
        previous, self._running = self._running, True
        try:
            yield
        finally:
            self._running = previous
