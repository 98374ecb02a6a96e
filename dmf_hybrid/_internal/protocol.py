"""MemoryAPI: the one contract of both front doors, each method's signature and docstring once.

``Memory`` (embedded, in-process) and ``MemoryClient`` (HTTP) both implement it with the same
arguments, results and exceptions (``tests/test_protocol.py`` compares their full signatures
with these). Code that works with either takes a ``MemoryAPI``: the CLI, the MCP server, the
agent tools and the test fixtures. What only makes sense in-process (``open``, ``for_tenant``,
``transaction``, ``restore_snapshot``, ``engine``) is not part of it.

Where the doors differ by nature, the method says so: over HTTP the API key decides the
tenant; ``snapshot`` and ``archive_events`` take a directory *name* (the server writes under
its data directory); a ``summariser`` plug-in runs only in-process; ``progress`` of
``create_many`` is reported once, at the end.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

from pydantic import BaseModel

from .checks import AsOf
from .expiry import TTL, ExpiresAt
from .models import (
    ArchiveResult,
    AuditEvent,
    AuditReport,
    BundleManifest,
    Entity,
    JSONObject,
    JSONValue,
    MemoryContext,
    Page,
    PlanOutcome,
    ReconcileCounts,
    ReindexCounts,
    Related,
    RuleInfo,
    SearchResult,
    SnapshotManifest,
    SummaryResult,
)
from .profiles import GroupContext, SearchProfile
from .ruledefs import RuleDef
from .schema import EntityType, RelationSpec, TypeDef

__all__ = ["AsOf", "MemoryAPI"]


class MemoryAPI(Protocol):
    """A deterministic agent memory: typed entities, relations, audit log, search."""

    # ---------------------------------------------------------------- schema

    def define(self, model: type[BaseModel], *, identity: Sequence[str] | None = None,
               relations: Mapping[str, RelationSpec | Mapping[str, Any]] | None = None,
               embed: str | None = None, name: str | None = None,
               actor: str | None = None, reason: str | None = None,
               analyzer: str | None = None,
               search: SearchProfile | Mapping[str, Any] | None = None,
               context: GroupContext | Mapping[str, Any] | None = None,
               ttl: float | dt.timedelta | None = None) -> EntityType:
        """Register a pydantic model as an entity type (or a compatible new version).

        Its entities come back with ``data`` as instances of ``model``. ``analyzer`` names the
        keyword analyzer of its text (default ``"english"``, which also splits Chinese, Japanese and
        Korean runs into bigrams; see ``dmf_hybrid._internal.mirrors.text``); a field may name its
        own with ``Field(json_schema_extra={"analyzer": ...})``, and ask for an index on its
        column with ``Field(json_schema_extra={"indexed": True})``. ``search`` is the type's search
        profile and ``context`` the preceding rows of a group each row embeds with
        (``dmf_hybrid._internal.profiles``). ``ttl`` is the default expiry of its new entities."""
        ...

    def define_type(self, typedef: TypeDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> EntityType:
        """Register a type given as data (the TOML / JSON form)."""
        ...

    def load_definitions(self, path: str | Path, *, actor: str | None = None
                         ) -> list[EntityType]:
        """Register every type (and rule) of an ``indexes/*.toml`` file.

        Embedded: in one transaction. HTTP: one request per type or rule.
        """
        ...

    def define_rule(self, rule: RuleDef | Mapping[str, Any], *, actor: str | None = None,
                    reason: str | None = None) -> RuleInfo:
        """Register a rule (a RuleDef or its TOML / JSON form); its definition and version."""
        ...

    def rules(self) -> list[RuleInfo]:
        """Every active rule: definition, version and the relations it depends on."""
        ...

    def types(self) -> list[EntityType]:
        """Every registered entity type."""
        ...

    def get_type(self, name: str) -> EntityType:
        """One registered entity type."""
        ...

    # ---------------------------------------------------------------- entities

    def create(self, type_name: str, data: Mapping[str, Any] | BaseModel, *,
               id: str | None = None, on_conflict: str = "return", actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        """Create an entity; the same identity (ID) again meets ``on_conflict``.

        ``"return"`` (default): the stored entity unchanged, ``created=False``, ``differs``
        naming the given fields whose stored values differ. ``"raise"``: ``Conflict`` when a
        given field differs (the same values return the entity). ``"update"``: the stored
        entity changed to the given values in one audited update (``differs``: what changed).

        ``ttl`` (seconds or a timedelta from now; ``"never"``: none) or ``expires_at`` (a time
        to come) gives the entity an expiry; neither: the type's default ``ttl``, if any. From
        its expiry on the entity reads as deleted (``as_of`` reads before it still see it) and
        ``sweep_expired`` soft-deletes it with an audited event.
        """
        ...

    def create_many(self, type_name: str, rows: Sequence[Mapping[str, Any] | BaseModel], *,
                    progress: Callable[[int], None] | bool | None = None,
                    on_conflict: str = "return", actor: str | None = None,
                    reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
                    expires_at: ExpiresAt = None) -> list[Entity]:
        """Create many entities: validated first, written and embedded in batches.

        ``progress``: a callback given the number of rows done (True: a progress bar,
        embedded only). Over HTTP the rows go in one request and progress is reported once.
        ``on_conflict``, ``ttl`` and ``expires_at`` as in ``create``, for every row.
        """
        ...

    def add_messages(self, conversation: str, messages: Sequence[Mapping[str, Any]], *,
                     type_name: str = "Message", actor: str | None = None,
                     reason: str | None = None, trace_id: str | None = None) -> list[Entity]:
        """Append chat messages to a conversation's log (the bundled ``Message`` type, defined
        on first use, or a log type of one's own); one entity per message.

        A message is ``{"role", "content"}`` (OpenAI style) or ``{"speaker", "text"}``, with
        optional ``turn`` (position in the conversation), ``session`` and ``time``; without
        ``turn`` it follows the last stored turn. The same (conversation, turn) again returns
        the stored message (``created=False``). Search one conversation with
        ``search(type_name, text, conversation=id)``; ``context(conversation=id)`` shows its
        last turns.
        """
        ...

    def get(self, entity_id: str, *, as_of: AsOf = None) -> Entity:
        """The entity now or at ``as_of`` (seq or datetime); NotFound if absent or deleted."""
        ...

    def query(self, type_name: str, where: Mapping[str, Any] | None = None,
              order_by: str | Sequence[str] | None = None, limit: int = 50,
              cursor: str | None = None, as_of: AsOf = None) -> Page:
        """One page of entities matching ``where`` in a deterministic order."""
        ...

    def count(self, type_name: str, where: Mapping[str, Any] | None = None,
              as_of: AsOf = None) -> int:
        """How many entities of a type match ``where``."""
        ...

    def update(self, entity_id: str, changes: Mapping[str, Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None, ttl: TTL = None,
               expires_at: ExpiresAt = None) -> Entity:
        """Change fields; VersionConflict if ``expected_version`` is stale (HTTP: If-Match).

        Identity fields cannot change (ValidationError): the ID derives from them. To rename,
        create the new entity and delete the old one. ``ttl`` / ``expires_at`` set a new
        expiry (``ttl="never"`` clears it); neither keeps the current one.
        """
        ...

    def append(self, entity_id: str, field: str, values: list[Any], *,
               expected_version: int | None = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Append to a list field atomically."""
        ...

    def delete(self, entity_id: str, *, expected_version: int | None = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Soft-delete (restorable; still visible to ``as_of`` reads before it)."""
        ...

    def restore(self, entity_id: str, *, expected_version: int | None = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        """Undo a soft delete (also of the expiry sweep's; an expiry that has come is
        cleared)."""
        ...

    def sweep_expired(self) -> int:
        """Soft-delete this tenant's entities whose expiry has come, each with an audited
        event by ``system:expiry``; how many. Reads hide them before it runs; the server
        sweeps every tenant on its own (``expiry_sweep_seconds``)."""
        ...

    def erase(self, entity_id: str, *, actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> int:
        """Remove an entity's content everywhere, keeping the audit chain verifiable.

        Returns the seq of the erase event.
        """
        ...

    # ---------------------------------------------------------------- relations

    def link(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
             reason: str | None = None, trace_id: str | None = None) -> bool:
        """Link two entities; False when the link already existed."""
        ...

    def unlink(self, from_id: str, relation: str, to_id: str, *, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> int:
        """Remove a link (the seq of its event); NotFound if it does not exist."""
        ...

    def related(self, entity_id: str, relation: str | None = None, direction: str = "out",
                depth: int = 1, as_of: AsOf = None) -> list[Related]:
        """Entities linked to ``entity_id`` (nearest first, then relation, then ID)."""
        ...

    # ---------------------------------------------------------------- audit

    def history(self, entity_id: str) -> list[AuditEvent]:
        """Every audit event of an entity, oldest first."""
        ...

    def events(self, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """This tenant's audit events with since_seq < seq <= until_seq."""
        ...

    def verify_audit(self) -> AuditReport:
        """Verify the audit log's hash chain, and that every entity a filter finds is found
        by its ID (``unreachable_by_id``)."""
        ...

    def last_seq(self) -> int:
        """The audit seq of the newest committed event (in a write transaction: its newest).

        Another thread's open transaction does not count until it commits, so a seq read
        here is always a stable ``as_of`` for every reader.
        """
        ...

    def seen_seq(self) -> int:
        """The newest audit seq this door has seen committed, without asking anyone: in
        process, how far this process has followed the log; over HTTP, the newest seq an
        answer told the client (``X-DMF-Seq``; 0 before the first answer), which it asks
        every process to have reached. ``last_seq`` asks (on the shared engine, the log's
        head itself)."""
        ...

    # ---------------------------------------------------------------- search & index

    def search(self, type_name: str, text: str | None = None, *,
               where: Mapping[str, Any] | None = None, k: int = 10, mode: str = "hybrid",
               related_to: Mapping[str, Any] | None = None, as_of: AsOf = None,
               conversation: str | None = None,
               reference_time: dt.datetime | dt.date | str | None = None) -> SearchResult:
        """Similarity search; hits are resolved from DuckDB (see SearchResult).

        ``conversation``: only rows whose ``conversation`` field is that ID (e.g. the
        ``Message`` log), ANDed with ``where``; an unknown conversation gives no hits, a type
        without the field a SchemaError naming ``conversation``.

        ``reference_time`` (default now; a datetime, a date or an ISO-8601 string, naive =
        UTC; anything else a ValidationError naming it): the query's time phrases ("last
        summer", "in May 2023", "上周") are read against it as date windows, and a type with
        grounded dates and a time boost in its profile ranks rows whose time or dates fall
        in a window higher (a boost, never a filter: ``where`` stays the exact filter). The
        receipt's ``time_windows`` says which phrase was read as which window.
        """
        ...

    def reconcile(self) -> ReconcileCounts:
        """Compare the vector index with DuckDB and repair drift; returns counts (admin).

        It first checks that every entity a filter finds is found by its ID, and rebuilds
        the ID indexes that lost some (``unreachable_by_id``).
        """
        ...

    def reindex(self) -> ReindexCounts:
        """Rebuild the vector index from DuckDB and the embedding cache (admin)."""
        ...

    def flush(self) -> int:
        """Process pending outbox rows now; returns how many were applied (admin)."""
        ...

    def snapshot(self, dest: str | Path) -> SnapshotManifest:
        """Write the whole store into a new directory: a bundle of every tenant (as
        :meth:`export` writes), the audit archive files, and a manifest written last (a
        directory with one is a complete snapshot). One consistent state, on either engine;
        ``Memory.restore_snapshot`` makes a new store of it.

        Embedded: ``dest`` is that directory. HTTP (admin): a name; the server writes
        ``data_dir/snapshots/<dest>``.
        """
        ...

    def export(self, dest: str | Path, *, tenant: str | None = None) -> BundleManifest:
        """Write the whole store (every tenant) to a bundle: engine-neutral JSON Lines of its
        types, rules, entities, relations and every audit event with its hashes (gzip when
        the name ends in ``.gz``); ``Memory.import_bundle`` and ``dmf import`` read it back,
        checked whole first. ``tenant``: only that tenant's types, rules, entities, relations
        and chain (a new store made from it holds that tenant alone, with the same IDs, seqs
        and hashes). Embedded: ``dest`` is the new file. HTTP (admin): a name; the server
        writes ``data_dir/exports/<dest>``.
        """
        ...

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5,
                conversation: str | None = None, turns: int | None = None) -> MemoryContext:
        """A compact, deterministic prompt context (MemoryContext: text + data) within budget.

        ``conversation``: add its last ``turns`` messages (default 6, at most 50; oldest shown
        first, the oldest dropped first for the budget) and scope the ``query``'s hits of
        types with a ``conversation`` field to it. ``turns`` needs a ``conversation``.
        """
        ...

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        """A MemorySummary of a scope's audit events in a window (SummaryResult; empty ok).

        A ``summariser`` plug-in runs in the memory's process: over HTTP it is refused.
        """
        ...

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        """Move audit events with seq < before_seq to Parquet under ``dest`` (ArchiveResult).

        HTTP (admin): ``dest`` is a directory *name*; the server writes under its own
        ``data_dir/archives/<dest>`` and ``file.file`` is relative to its data directory.
        """
        ...

    def open_constraints(self, where: Mapping[str, Any] | None = None, limit: int = 50,
                         cursor: str | None = None, as_of: AsOf = None) -> Page:
        """The work queue: open Constraint entities (oldest first), optionally filtered."""
        ...

    # ---------------------------------------------------------------- agent tools & plans

    def tools(self, format: str = "openai", *, profile: str = "compact",
              internal: bool = False) -> list[JSONObject]:
        """Function-calling definitions of the memory operations ("openai" or "json_schema").

        ``profile``: ``"compact"`` (generic tools taking ``type``, the types described once)
        or ``"per_type"`` (``create_<Type>``, ``query_<Type>``, ``search_<Type>``).
        ``internal``: include the memory's own types (``MemorySummary``).
        """
        ...

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> JSONValue:
        """Validate and execute one tool call; its JSON result (PlanError if invalid)."""
        ...

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> PlanOutcome:
        """Validate a plan and run it in one transaction: {results, diff, committed, seq_range}.

        ``dry_run``: run it and roll it back, returning the diff it would make.
        """
        ...

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Release the memory (embedded: flush pending index work; HTTP: the connections)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
