"""Memory: the in-process memory, where the stages meet.

:class:`~dmf_hybrid._internal.core.MemoryCore` (entities, relations, audit, search over the store
and the search engine) plus the operations made of stages above it: ``context`` and ``summarize``
(:mod:`dmf_hybrid._internal.lifecycle`), ``execute_plan`` (:mod:`dmf_hybrid._internal.plans`),
``tools`` and ``call_tool`` (:mod:`dmf_hybrid._internal.tools`), and snapshots, bundles and
archives. Every public method is a :class:`~dmf_hybrid._internal.protocol.MemoryAPI` method (its
docstring lives there); the embedded-only extras are ``open``, ``for_tenant``, ``transaction``,
``restore_snapshot``, ``engine`` and ``reads``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import plans, requests, tools
from .checks import AsOf, check_id
from .config import is_postgres_url
from .core import DB_FILE, MemoryCore
from .errors import Conflict, ValidationError
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

SNAPSHOT_MANIFEST = "dmf-snapshot.json"


class Memory(MemoryCore, MemoryAPI):
    """A deterministic agent memory: typed entities, relations, audit log, search.

    Open one per data directory and process (DuckDB allows one process per file); share it
    between threads. ``for_tenant`` gives a view confined to another tenant.
    """

    # ---------------------------------------------------------------- snapshots

    def snapshot(self, dest: str | Path) -> SnapshotManifest:
        archive.duckdb_only(self._store, "a snapshot",
                            "export a bundle instead (export), or back the database up")
        directory = Path(dest)
        if directory.exists() and any(directory.iterdir()):
            raise Conflict(f"snapshot directory {directory} exists and is not empty",
                           field="dest")
        directory.mkdir(parents=True, exist_ok=True)
        last_seq, last_hash = archive.export_database(self._store, directory)
        manifest = SnapshotManifest(format=1, last_seq=last_seq, last_hash=last_hash)
        # written last and atomically: a snapshot with a manifest is a complete snapshot
        partial = directory / f"{SNAPSHOT_MANIFEST}.partial"
        partial.write_text(json.dumps(manifest.model_dump(exclude_none=True), indent=2))
        os.replace(partial, directory / SNAPSHOT_MANIFEST)
        return manifest

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
        if is_postgres_url(path):  # into an empty PostgreSQL database
            manifest = bundle.import_bundle(Path(src), str(path))
            memory = cls.open(path, **open_kwargs)
        else:
            with archive.new_directory(Path(path), "import"):
                manifest = bundle.import_bundle(Path(src), Path(path) / DB_FILE)
                memory = cls.open(path, **open_kwargs)
        report = memory.verify_audit()
        if not report.ok or report.last_seq < manifest.last_seq:
            memory.close()
            raise ValidationError("the imported audit log does not verify", field="src")
        memory.reindex()
        return memory

    @classmethod
    def restore_snapshot(cls, src_dir: str | Path, path: str | Path, **open_kwargs: Any
                         ) -> Memory:
        """A new memory directory made from a snapshot; the vector index is rebuilt."""
        src, dest = Path(src_dir), Path(path)
        manifest_path = src / SNAPSHOT_MANIFEST
        if not manifest_path.is_file():
            raise ValidationError(f"{src} is not a dmf-hybrid snapshot (no {SNAPSHOT_MANIFEST})",
                                  field="src")
        try:
            manifest = json.loads(manifest_path.read_text())
            int(manifest["last_seq"])
        except (ValueError, KeyError, TypeError):
            raise ValidationError(f"{src}: the snapshot manifest is unreadable",
                                  field="src") from None
        with archive.new_directory(dest, "restore"):
            archive.import_database(src, dest / DB_FILE)
            memory = cls.open(dest, **open_kwargs)
        report = memory.verify_audit()
        if not report.ok or report.last_seq != manifest["last_seq"]:
            memory.close()
            raise ValidationError("restored audit log does not match the snapshot manifest",
                                  field="src")
        memory.reindex()
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
