"""Memory: the in-process memory, where the stages meet.

:class:`~dmf_hybrid._internal.core.MemoryCore` (entities, relations, audit, search over the store
and the search engine) plus the operations made of stages above it: ``context`` and ``summarize``
(:mod:`dmf_hybrid._internal.lifecycle`), ``execute_plan`` (:mod:`dmf_hybrid._internal.plans`),
``tools`` and ``call_tool`` (:mod:`dmf_hybrid._internal.tools`), and snapshots, bundles and
archives. Every public method is a :class:`~dmf_hybrid._internal.protocol.MemoryAPI` method (its
docstring lives there); the embedded-only extras are ``open``, ``for_tenant``, ``transaction``,
``restore_snapshot``, ``engine`` and ``reads``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import plans, requests, tools
from .checks import AsOf, check_id
from .config import is_postgres_url
from .core import DB_FILE, MemoryCore
from .errors import ValidationError
from .lifecycle import context, summaries
from .models import (
    ArchiveResult,
    BundleManifest,
    JSONObject,
    JSONValue,
    MemoryContext,
    PlanOutcome,
    SnapshotManifest,
    SummaryResult,
)
from .operations import ArchiveRequest, PlanRequest, ToolCall, ToolsQuery
from .protocol import MemoryAPI
from .store import archive, bundle
from .store import snapshot as snapshots


class Memory(MemoryCore, MemoryAPI):
    """A deterministic agent memory: typed entities, relations, audit log, search.

    Open one per data directory and process (DuckDB allows one process per file); share it
    between threads. ``for_tenant`` gives a view confined to another tenant.
    """

    # ---------------------------------------------------------------- snapshots

    def snapshot(self, dest: str | Path) -> SnapshotManifest:
        return snapshots.write_snapshot(self._store, Path(dest))

    def export(self, dest: str | Path, *, tenant: str | None = None) -> BundleManifest:
        return bundle.export_bundle(self._store, Path(dest),
                                    None if tenant is None else check_id(tenant, "tenant"))

    @classmethod
    def import_bundle(cls, src: str | Path, path: str | Path, **open_kwargs: Any) -> Memory:
        """A new memory directory (or a store in the empty PostgreSQL database ``path`` names)
        made from a bundle (:meth:`export`): the bundle is checked whole first (its hash
        chain, counts and every entity against its last event; a bad one is refused naming
        the first bad event or line, and nothing is written), then written in one
        transaction; the vector index is rebuilt."""
        return cls._made_from(lambda target: bundle.import_bundle(Path(src), target).last_seq,
                              path, "import", "the imported audit log does not verify",
                              open_kwargs)

    @classmethod
    def restore_snapshot(cls, src_dir: str | Path, path: str | Path, **open_kwargs: Any
                         ) -> Memory:
        """A new memory directory (or a store in the empty PostgreSQL database ``path``
        names) made from a snapshot (:meth:`snapshot`), checked as an import is; the vector
        index is rebuilt from the embedding cache the snapshot carries."""
        return cls._made_from(lambda target: snapshots.restore(Path(src_dir), target), path,
                              "restore", "the restored audit log does not match the snapshot "
                              "manifest", open_kwargs)

    @classmethod
    def _made_from(cls, fill: Callable[[Path | str], int], path: str | Path, what: str,
                   mismatch: str, open_kwargs: dict[str, Any]) -> Memory:
        """A new store at ``path`` written by ``fill`` (given the database file or URL; it
        returns the log's last position it wrote), opened, verified and reindexed; a new
        directory is removed again when any step fails. The log may end
        past that position: a store of an older format is migrated when it opens, which
        appends audited events."""
        with contextlib.ExitStack() as made:
            if is_postgres_url(path):  # into an empty PostgreSQL database
                target: Path | str = str(path)
            else:
                made.enter_context(archive.new_directory(Path(path), what))
                target = Path(path) / DB_FILE
            last_seq = fill(target)
            memory = cls.open(path, **open_kwargs)
            try:
                report = memory.verify_audit()
                if not report.ok or report.last_seq < last_seq:
                    raise ValidationError(mismatch, field="src")
                memory.reindex()
            except BaseException:
                memory.close()
                raise
        return memory

    # ---------------------------------------------------------------- lifecycle

    def context(self, focus_ids: Sequence[str] | None = None, query: str | None = None,
                budget_tokens: int = 800, as_of: AsOf = None, *, k: int = 5,
                conversation: str | None = None, turns: int | None = None) -> MemoryContext:
        return context.build_context(self, requests.ContextRequest.of(
            focus_ids=focus_ids, query=query, budget_tokens=budget_tokens, as_of=as_of, k=k,
            conversation=conversation, turns=turns))

    def summarize(self, scope: str | None = None, since_seq: int | None = None,
                  until_seq: int | None = None, *,
                  summariser: Callable[[str, Mapping[str, Any]], str] | None = None,
                  actor: str | None = None, reason: str | None = None) -> SummaryResult:
        req = requests.SummaryRequest.of(scope=scope, since_seq=since_seq, until_seq=until_seq)
        return summaries.summarize(self, req.scope, req.since_seq, req.until_seq,
                                   summariser=summariser, actor=actor, reason=reason)

    def archive_events(self, before_seq: int, dest: str | Path, *, actor: str | None = None,
                       reason: str | None = None) -> ArchiveResult:
        req = ArchiveRequest.of(before_seq=before_seq, dest=dest)
        return archive.archive_events(self._store, req.before_seq, req.dest, tenant=self.tenant,
                                      actor=actor, reason=reason, principal=self.principal)

    # ---------------------------------------------------------------- agent tools & plans

    def tools(self, format: str = "openai", *, profile: str = "compact",
              internal: bool = False) -> list[JSONObject]:
        req = ToolsQuery.of(format=format, profile=profile, internal=internal)
        return tools.tool_definitions(self, req.format, req.profile, req.internal)

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  actor: str | None = None, reason: str | None = None,
                  trace_id: str | None = None) -> JSONValue:
        call = ToolCall.of(name=name, arguments=arguments)
        return tools.call_tool(self, call.name, call.arguments, actor=actor, reason=reason,
                               trace_id=trace_id)

    def execute_plan(self, ops: Sequence[Mapping[str, Any]], dry_run: bool = False, *,
                     actor: str | None = None, reason: str | None = None,
                     trace_id: str | None = None) -> PlanOutcome:
        plan = PlanRequest.of(ops=ops, dry_run=dry_run)
        return plans.execute_plan(self, plan.ops, dry_run=plan.dry_run, actor=actor,
                                  reason=reason, trace_id=trace_id)


#: mypy checks that Memory is a complete MemoryAPI (no member missing or mistyped).
_CONTRACT: type[MemoryAPI] = Memory
