"""The store: entity types, entities, relations and the audit log in one DuckDB database.

Every mutation runs inside one write transaction that also appends its audit event and,
for embedded types, an outbox row; nothing is written before the input has been validated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..checks import Limits
from ..clock import to_naive_utc, utcnow
from ..errors import NotFound
from ..models import AuditEvent, AuditReport
from ..schema import EntityType, TypeDef
from .bulk import BulkLoad
from .chain import AuditLog
from .db import Database
from .embedding_cache import EmbeddingCache
from .integrity import unreachable_by_id, unreachable_count, unreachable_problem
from .journal import Journal
from .outbox import Outbox
from .queries import Queries
from .registry import TypeRegistry
from .relations import Relations
from .rows import RowReader
from .state import Followed, ForeignHook, Listener, WriteHook, WriteHooks
from .tables import (
    ENTITY_OPS,
    EXPIRES_COLUMN,
    RECONCILE_PENDING,
    create_fixed,
    cursor_secret,
    table_name,
)
from .timetravel import TimeTravel
from .txn import Connection, Transactions
from .writes import Writes

__all__ = ["Listener", "Store", "WriteHook"]


class Store:
    """Entities, relations and the audit log in DuckDB (this process the one writer) or in
    PostgreSQL (processes taking turns, each following the others' commits: ``_follow_foreign``).

    A façade over parts, each made here with its collaborators: the database (``db``), the
    audit log (``log``, :mod:`.chain`), the type registry (``registry``), the write hooks
    (``hooks``), entity rows (``rows``), reads now and as of a seq (``timetravel``),
    ``queries``, ``writes`` (update, append, delete, restore, erase), ``bulk`` (create),
    ``relations``, the outbox reader and the embedding cache. Callers name the part they use;
    the store itself does what spans them (types, the audit log's face, the expiry sweep,
    following other processes' commits).
    """

    def __init__(self, path: Path | None, limits: Limits | None = None,
                 memory_limit: str | None = None, url: str | None = None) -> None:
        """The store in the DuckDB file ``path`` (None: in memory), or, given ``url``, in that
        PostgreSQL database."""
        self.db: Transactions
        follows: Any = None  # the PostgreSQL database, which follows other processes' commits
        if url is not None:
            from .postgres import PgDatabase  # psycopg is only needed for PostgreSQL

            self.db = follows = PgDatabase(url)
        else:
            self.db = Database(path, memory_limit)
        self.limits = limits or Limits()
        self.hooks = WriteHooks()
        #: told about other processes' commits at once (they only read: a write transaction
        #: may be beginning), and, outside one, later (they may write)
        self.follow_hooks: list[ForeignHook] = []
        self.foreign_hooks: list[ForeignHook] = []
        self._untold: Followed | None = None
        self.journal = Journal()
        #: the parts the derived indexes read and write (composed, not inherited)
        self.outbox = Outbox(self.db)
        self.embedding_cache = EmbeddingCache(self.db)
        with self.db.write() as con:
            create_fixed(con, None if path is None else path.parent)
            self.cursor_key = cursor_secret(con)
        self.log = AuditLog(self.db, self.journal)
        self.registry = TypeRegistry(
            self.db, self.log, self.limits,
            on_embed_change=lambda con, etype: self.writes.requeue_type(con, etype))
        self.rows = RowReader(self.db, self.registry)
        self.timetravel = TimeTravel(self.db, self.log, self.registry, self.rows)
        self.queries = Queries(self.db, self.registry, self.rows, self.timetravel,
                               self.cursor_key)
        self.writes = Writes(self.db, self.log, self.registry, self.rows, self.hooks,
                             self.limits)
        self.bulk = BulkLoad(self.db, self.log, self.registry, self.rows, self.writes,
                             self.hooks)
        self.relations = Relations(self.db, self.log, self.rows, self.timetravel, self.hooks)
        if follows is not None:
            follows.on_foreign = self._follow_foreign

    def _follow_foreign(self, after: int, upto: int, writing: bool) -> None:
        """Other processes committed the events after position ``after`` up to ``upto`` (the
        write lock held): take the log's heads and the types and rules they defined; then, unless
        ``writing`` (a write transaction begins: its hooks could not write), tell the foreign
        hooks about every commit not told yet."""
        if upto != after:
            self.log.follow()
            rows = self.db.fetchall("SELECT pos, op, type, tenant, entity_id FROM events "
                                    "WHERE pos > ? AND pos <= ? ORDER BY pos", [after, upto])
            self.journal.committed([tuple(r) for r in rows])  # type: ignore[misc]
            followed = Followed(after, upto, {str(r[1]) for r in rows})
            for _seq, op, type_name, tenant, eid in rows:
                if op in ENTITY_OPS and eid is not None:
                    followed.entities.setdefault((type_name, tenant), set()).add(eid)
            if "define" in followed.ops:
                self.registry.reload()
            for hook in list(self.follow_hooks):
                hook(followed)
            self._untold = followed if self._untold is None else self._untold.then(followed)
        if not writing and self._untold is not None:
            told, self._untold = self._untold, None
            for hook in list(self.foreign_hooks):
                hook(told)

    def types(self, tenant: str | None = None) -> list[EntityType]:
        """The types of ``tenant`` by name, or of every tenant (None)."""
        return self.registry.types(tenant)

    def type_of(self, name: Any, tenant: str, *, principal: str | None = None,
                define_bundled: bool = True) -> EntityType:
        """The tenant's type of that name, or NotFound (see :meth:`TypeRegistry.type_of`)."""
        return self.registry.type_of(name, tenant, principal=principal,
                                     define_bundled=define_bundled)

    def define(self, typedef: TypeDef, model: type[BaseModel] | None = None, *,
               tenant: str, actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None) -> EntityType:
        """Register a type or a compatible new version of it (see :meth:`TypeRegistry.define`)."""
        return self.registry.define(typedef, model, tenant=tenant, actor=actor, reason=reason,
                                    trace_id=trace_id, principal=principal)

    # ---------------------------------------------------------------- the audit log's face

    @property
    def listeners(self) -> list[Listener]:
        """Told about the outbox rows of each transaction once it commits."""
        return self.log.listeners

    def append_event(self, con: Connection, **fields: Any) -> int:
        """Append one audit event (make_event's fields) inside the open transaction; its seq."""
        return self.log.append(con, **fields)

    def history(self, tenant: str, eid: Any) -> list[AuditEvent]:
        """Every event of an entity (including links), oldest first."""
        return self.log.history(tenant, eid)

    def events(self, tenant: str, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """The tenant's events with since_seq < seq <= until_seq, oldest first."""
        return self.log.events(tenant, since_seq, until_seq, limit)

    def verify_audit(self, tenant: str | None = None) -> AuditReport:
        """Check the tenant's hash chain, or every tenant's (None), and that its (their)
        entities are reachable by ID; names the first bad seq."""
        report = self.log.verify(tenant)
        lost = unreachable_count(unreachable_by_id(self.db, tenant))
        if not lost:
            return report
        return report.model_copy(update={"ok": False, "unreachable_by_id": lost,
                                         "problem": report.problem or unreachable_problem(lost)})

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def sweep_expired(self, tenant: str | None = None, *, principal: str | None = None) -> int:
        """Soft-delete the entities (of ``tenant``, or of all) whose expiry has come, each in
        its own audited write by the expiry actor (``principal``: who asked for the sweep, if
        anyone did); how many. Running it again finds none."""
        now = to_naive_utc(utcnow())
        swept = 0
        for etype in self.types(tenant):
            params: list[Any] = [now]
            mine = ""
            if tenant is not None:
                mine, params = " AND tenant = ?", [now, tenant]
            due = self.db.fetchall(
                f"SELECT tenant, id, {EXPIRES_COLUMN} FROM {table_name(etype.key)} "
                f"WHERE deleted_at IS NULL AND {EXPIRES_COLUMN} <= ?{mine} "
                f"ORDER BY {EXPIRES_COLUMN}, tenant, id", params)
            for owner, eid, at in due:
                try:
                    entity = self.writes.sweep_one(owner, eid, f"expired at {at.isoformat()}Z",
                                            principal)
                except NotFound:
                    continue  # deleted or erased since it was listed
                swept += entity.deleted_at is not None
        return swept

    @property
    def reconcile_pending(self) -> bool:
        """Whether a store migration changed how vectors are keyed, so that the vector index
        must be reconciled with DuckDB (see :meth:`reconciled`)."""
        return self.db.fetchone("SELECT 1 FROM meta WHERE key = ?",
                                [RECONCILE_PENDING]) is not None

    def reconciled(self) -> None:
        """Record that the vector index was reconciled with DuckDB after a migration."""
        if self.reconcile_pending:
            with self.db.write() as con:
                con.execute("DELETE FROM meta WHERE key = ?", [RECONCILE_PENDING])

    def record_embedding_model(self, model_id: str, dim: int, *, tenant: str,
                               actor: str | None = None) -> str | None:
        """Remember the embedding model in use; the previous model's ID if it changed.

        A change appends one audit event with op "reindex" (before / after name the models),
        so the re-embedding that follows is audited; the first model is recorded silently.
        """
        row = self.db.fetchone("SELECT value FROM meta WHERE key = 'embedding_model'")
        if row is not None and row[0] == model_id:
            return None
        with self.db.write() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
            previous = None if row is None else str(row[0])
            if previous == model_id:
                return None
            con.execute("INSERT INTO meta VALUES ('embedding_model', ?) ON CONFLICT (key) "
                        "DO UPDATE SET value = excluded.value", [model_id])
            if previous is None:
                return None
            self.log.append(
                con, tenant=tenant, op="reindex", type_name=None, entity_id=None,
                version_before=None, version_after=None, before={"model_id": previous},
                after={"model_id": model_id, "dim": dim}, actor=actor,
                reason="embedding model changed", trace_id=None,
                meta={"from": previous, "to": model_id, "dim": dim},
            )
            return previous
