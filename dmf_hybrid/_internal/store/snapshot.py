"""Snapshots: a directory holding a bundle of the whole store, its archive files and a manifest.

A snapshot (format 2) is the engine-neutral bundle of :mod:`.bundle` (``store.jsonl.gz``: the
types, rules, entities, relations and every audit event with its hashes, archived ones
included), a copy of each audit archive file (``archived_events/``), the embedding cache (one
``embeddings-<n>.npz`` per model: text hashes, hex in ASCII, and float32 vectors, so a restore
embeds nothing again) and the manifest ``dmf-snapshot.json``, written last and atomically: a
directory with a manifest is a complete snapshot. It is written from one consistent state
(writes wait while it is read) on either engine, and restores into a new memory directory or
an empty PostgreSQL database. A restore checks the manifest against the bundle's header and
the files' SHA-256, imports the bundle (which checks the whole chain before anything is
written) and, into a directory, puts the archive files back: the events they hold leave the
hot table again, so the restored log has the snapshotted one's layout. PostgreSQL keeps no
archive files; restored there, archived events are hot.

Snapshots of format 1 (DuckDB's own ``EXPORT DATABASE`` files) still restore, into a
directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from pydantic import ValidationError as PydanticError

from ..errors import Conflict, ValidationError
from ..models import SnapshotManifest
from . import archive, bundle
from .dialect import dialect_of
from .store import Store
from .txn import Connection

SNAPSHOT_FORMAT = 2
MANIFEST = "dmf-snapshot.json"
BUNDLE = "store.jsonl.gz"


def write_snapshot(store: Store, directory: Path) -> SnapshotManifest:
    """Snapshot the whole store into ``directory`` (new, or existing and empty)."""
    if directory.exists() and any(directory.iterdir()):
        raise Conflict(f"snapshot directory {directory} exists and is not empty", field="dest")
    directory.mkdir(parents=True, exist_ok=True)
    with store.db.no_writes():  # the bundle, archive files and cache of one state
        header = bundle.export_bundle(store, directory / BUNDLE)
        archives = archive.copy_archives(store, directory)
        embeddings = _write_embeddings(store, directory)
    manifest = SnapshotManifest(format=SNAPSHOT_FORMAT, last_seq=header.last_seq,
                                last_hash=header.last_hash, bundle=BUNDLE,
                                counts=header.counts, archives=archives, embeddings=embeddings)
    partial = directory / f"{MANIFEST}.partial"
    partial.write_text(json.dumps(manifest.model_dump(exclude_none=True), indent=2))
    os.replace(partial, directory / MANIFEST)
    return manifest


def _write_embeddings(store: Store, directory: Path) -> dict[str, str]:
    cache = store.embedding_cache
    files: dict[str, str] = {}
    for number, model in enumerate(cache.models()):
        hashes, vectors = cache.every(model)
        name = f"embeddings-{number}.npz"
        with (directory / name).open("wb") as out:
            np.savez(out, model=np.array(model), hashes=np.array(hashes, dtype="S"),
                     vectors=np.ascontiguousarray(vectors, dtype=np.float32))
        files[name] = archive.file_sha256(directory / name)
    return files


def read_manifest(src: Path) -> SnapshotManifest:
    """The manifest of the snapshot directory ``src``; ValidationError naming what is wrong."""
    path = src / MANIFEST
    if not path.is_file():
        raise ValidationError(f"{src} is not a dmf-hybrid snapshot (no {MANIFEST})", field="src")
    try:
        manifest = SnapshotManifest.model_validate_json(path.read_text())
    except (PydanticError, UnicodeDecodeError, OSError):
        raise ValidationError(f"{src}: the snapshot manifest is unreadable", field="src") from None
    if manifest.format not in (1, SNAPSHOT_FORMAT):
        raise ValidationError(f"{src}: snapshot format {manifest.format} is not one this "
                              f"version reads (1 or {SNAPSHOT_FORMAT})", field="src")
    names = [manifest.bundle or ""] if manifest.format > 1 else []
    names += [Path(a.file).name for a in manifest.archives] + list(manifest.embeddings)
    if any(not n or Path(n).name != n or n.startswith(".") for n in names):
        raise ValidationError(f"{src}: the snapshot manifest names a file outside the snapshot",
                              field="src")
    return manifest


def restore(src: Path, target: Path | str) -> int:
    """Write the snapshot ``src`` into the new database file ``target`` (or the empty
    PostgreSQL database at that URL) in one transaction; the log's last position. Nothing is
    written when a check fails."""
    manifest = read_manifest(src)
    if manifest.format == 1:
        if isinstance(target, str):
            raise ValidationError(f"{src} is a snapshot of DuckDB's own files (format 1): "
                                  "restore it into a directory, then `dmf migrate` it",
                                  field="path")
        archive.import_database(src, target)
        return manifest.last_seq
    assert manifest.bundle is not None  # read_manifest checked it
    header = bundle.read_manifest(src / manifest.bundle)
    if (header.last_seq, header.last_hash) != (manifest.last_seq, manifest.last_hash):
        raise ValidationError(f"{src}: the bundle does not match the snapshot manifest (its "
                              f"log ends at {header.last_seq}, the manifest says "
                              f"{manifest.last_seq})", field="src")
    for name, digest in manifest.embeddings.items():
        if not (src / name).is_file() or archive.file_sha256(src / name) != digest:
            raise ValidationError(f"{src}: the embedding cache file {name} is missing or does "
                                  "not match the manifest", field="src")

    def extras(con: Connection) -> None:
        _load_embeddings(con, src, manifest)
        if isinstance(target, Path):
            archive.restore_archives(con, target.parent, src, manifest.archives)

    bundle.import_bundle(src / manifest.bundle, target, also=extras)
    return manifest.last_seq


def _load_embeddings(con: Connection, src: Path, manifest: SnapshotManifest) -> None:
    """Into the importing transaction: the embedding cache the snapshot carries (its files
    were checked against the manifest)."""
    for name in manifest.embeddings:
        with np.load(src / name, allow_pickle=False) as data:
            model, hashes, vectors = str(data["model"]), data["hashes"], data["vectors"]
        if (vectors.ndim != 2 or hashes.dtype.kind != "S" or len(hashes) != len(vectors)
                or not len(hashes)):
            raise ValidationError(f"{src}: the embedding cache file {name} is malformed",
                                  field="src")
        dialect_of(con).insert_vectors(con, model, [h.decode("ascii") for h in hashes],
                                       np.ascontiguousarray(vectors, dtype=np.float32),
                                       skip_existing=False)
