"""Maintenance: reconcile and rebuild the vector index, drain the outbox, snapshot, export."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, status

from ...checks import SNAPSHOT_NAME_RE, full_match
from ...errors import ValidationError
from ...models import BundleManifest, ReconcileCounts, ReindexCounts, SnapshotManifest
from ...wire import CountsPublic, ExportRequest, SnapshotRequest
from ..deps import AdminMemory, State

router = APIRouter(prefix="/admin", tags=["admin"])


def named_path(base: Path, folder: str, name: str, what: str = "snapshot") -> Path:
    """``base/folder/name``; ValidationError for a name that could leave that directory."""
    if not full_match(SNAPSHOT_NAME_RE, name) or ".." in name:
        raise ValidationError(
            f"{what} name must be 1-64 letters, digits, '.', '_' or '-', start with a letter "
            "or digit and contain no '..'", field="name")
    root = (base / folder).resolve()
    dest = (root / name).resolve()
    if dest.parent != root:
        raise ValidationError(f"{what} name must stay inside the {folder} directory",
                              field="name")
    return dest


@router.post("/reconcile")
def reconcile(memory: AdminMemory) -> ReconcileCounts:
    """Compare the vector index with DuckDB and repair drift; returns counts."""
    return memory.reconcile()


@router.post("/reindex")
def reindex(memory: AdminMemory) -> ReindexCounts:
    """Rebuild the vector index from DuckDB and the embedding cache."""
    return memory.reindex()


@router.post("/sweep")
def sweep(memory: AdminMemory) -> CountsPublic:
    """Soft-delete the tenant's entities whose expiry has come (audited); how many."""
    return CountsPublic(swept=memory.sweep_expired())


@router.post("/flush")
def flush(memory: AdminMemory) -> CountsPublic:
    """Apply pending outbox rows now; returns how many were applied."""
    return CountsPublic(applied=memory.flush())


@router.post("/snapshot", status_code=status.HTTP_201_CREATED)
def snapshot(body: SnapshotRequest, memory: AdminMemory, state: State) -> SnapshotManifest:
    """Export the database to data_dir/snapshots/<name> (409 if it exists); the manifest."""
    dest = named_path(Path(state.settings.data_dir), "snapshots", body.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    manifest = memory.snapshot(dest)
    return manifest.model_copy(update={"name": body.name, "path": f"snapshots/{body.name}"})


@router.post("/export", status_code=status.HTTP_201_CREATED)
def export(body: ExportRequest, memory: AdminMemory, state: State) -> BundleManifest:
    """Write the store (or one tenant's part) to the bundle data_dir/exports/<name>."""
    dest = named_path(Path(state.settings.data_dir), "exports", body.name, "export")
    manifest = memory.export(dest, tenant=body.tenant)
    return manifest.model_copy(update={"name": body.name, "path": f"exports/{body.name}"})
