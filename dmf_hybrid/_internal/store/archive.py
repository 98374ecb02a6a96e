"""Archiving the audit log: old events move to Parquet files and stay readable.

``archive_events(store, before_seq, dest, tenant=...)`` copies the tenant's hot events with
``seq < before_seq`` (seqs are the tenant's own; other tenants' events stay) to one Parquet
file (DuckDB's ``COPY ... TO ... (FORMAT parquet)``), reads the file back to check it holds
exactly those events, deletes them from the hot ``events`` table and records a
checkpoint row in ``event_archive`` (file, tenant, first and last seq, the last event's chain
hash, count, SHA-256 of the file) — all in one transaction, followed by one audit event
``op="archive"``. Every reader of the log (history, events, verify_audit, ``as_of`` reads)
reads the ``events_all`` view, hot table ``UNION ALL`` the archive files, which is recreated
whenever the archive changes and when the store opens; ``verify_audit`` therefore re-reads the
archived events and checks the whole chain. A tenant's newest event always stays hot (the
archive event itself), so the hot table holds every tenant's head.

Erasure reaches the archive: erasing an entity rewrites the archive files holding its events
with their snapshots redacted (a new file, swapped in by the same transaction; the old file is
deleted after commit). A snapshot (:mod:`.snapshot`) copies the archive files into
``<snapshot>/archived_events/`` and a restore puts them back into the new memory directory.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from ..checks import check_before_seq
from ..errors import Conflict, ValidationError
from ..models import ArchiveFile, ArchiveResult
from .audit import EVENT_COLUMNS, archived_columns
from .db import ZSTD_MIN_STRING_LENGTH
from .state import WriteHook
from .store import Store
from .tables import ENTITY_OPS
from .txn import Connection

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "archived_events"
FILE_PATTERN = "events-{tenant}-{first:012d}-{last:012d}.parquet"
_COLS = ", ".join(EVENT_COLUMNS)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sql_path(path: Path, field: str = "dest") -> str:
    text = str(path.resolve())
    if "'" in text:
        raise ValidationError("paths with quotes are not supported", field=field)
    return text


def archive_files(store: Store) -> list[ArchiveFile]:
    """Every archive file's checkpoint, oldest first."""
    rows = store.db.fetchall(
        "SELECT file, tenant, first_seq, last_seq, last_hash, events, sha256, archived_seq "
        "FROM event_archive ORDER BY tenant, first_seq, file")
    keys = ArchiveFile.model_fields
    return [ArchiveFile(**dict(zip(keys, r, strict=True))) for r in rows]


def duckdb_only(store: Store, what: str, instead: str) -> None:
    """Conflict unless the store is DuckDB's (``what`` needs DuckDB's files)."""
    if store.db.dialect.name != "duckdb":
        raise Conflict(f"{what} works on the embedded DuckDB store; this store is on "
                       f"PostgreSQL: {instead}", field="store_url")


def archive_events(store: Store, before_seq: Any, dest: str | Path, *, tenant: str,
                   actor: str | None = None, reason: str | None = None,
                   principal: str | None = None) -> ArchiveResult:
    """Move the hot events with ``seq < before_seq`` into a Parquet file under ``dest``."""
    before_seq = check_before_seq(before_seq)
    duckdb_only(store, "moving audit events into Parquet files",
                "the log stays in the database (partition or back it up there)")
    if not isinstance(dest, (str, Path)) or not str(dest):
        raise ValidationError("dest must be a directory path", field="dest")
    directory = Path(dest)
    if directory.exists() and not directory.is_dir():
        raise ValidationError(f"{directory} is not a directory", field="dest")
    with store.db.write(tenant) as con:
        before_seq = min(before_seq, store.log.head(tenant) + 1)
        mine = "tenant = ? AND seq < ?"
        first, last, count = con.execute(
            "SELECT coalesce(min(seq), 0), coalesce(max(seq), 0), count(*) FROM events "
            f"WHERE {mine}", [tenant, before_seq]).fetchone()
        if not count:
            return ArchiveResult(moved=0)
        if last - first + 1 != count:  # pragma: no cover - the hot log is gap-free
            raise Conflict("the hot events below before_seq are not contiguous",
                           field="before_seq")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE_PATTERN.format(tenant=tenant, first=first, last=last)
        target = _sql_path(path)
        entry = store.log.archive_entry(path)
        if con.execute("SELECT 1 FROM event_archive WHERE file = ?", [entry]).fetchone():
            raise Conflict(f"archive file {entry} is already in use", field="dest")
        con.execute(f"COPY (SELECT {_COLS} FROM events WHERE {mine} ORDER BY seq) "
                    f"TO '{target}' (FORMAT parquet)", [tenant, before_seq])
        store.db.on_rollback(lambda: path.unlink(missing_ok=True))
        back = con.execute(f"SELECT count(*), min(seq), max(seq) FROM read_parquet('{target}')"
                           ).fetchone()
        if back != (count, first, last):  # pragma: no cover - DuckDB wrote what it read
            raise Conflict(f"archive file {target} does not read back as written")
        hash_row = con.execute("SELECT hash FROM events WHERE tenant = ? AND seq = ?",
                               [tenant, last]).fetchone()
        last_hash = str(hash_row[0]) if hash_row else ""
        digest = file_sha256(path)
        con.execute(f"DELETE FROM events WHERE {mine}", [tenant, before_seq])
        record = ArchiveFile(file=entry, tenant=tenant, first_seq=first, last_seq=last,
                             last_hash=last_hash, events=count, sha256=digest,
                             archived_seq=store.log.head(tenant) + 1)
        con.execute("INSERT INTO event_archive (file, tenant, first_seq, last_seq, last_hash, "
                    "events, sha256, archived_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    list(record.model_dump().values()))
        store.log.refresh_events_view(con)
        seq = store.append_event(
            con, tenant=tenant, op="archive", type_name=None, entity_id=None,
            version_before=None, version_after=None, before=None,
            after=record.model_dump(exclude={"archived_seq"}), actor=actor, reason=reason,
            trace_id=None, meta={"first_seq": first, "last_seq": last, "last_hash": last_hash,
                                 "events": count}, principal=principal)
    log.info("archived events %s..%s to %s", first, last, target)
    return ArchiveResult(moved=count, file=record, seq=seq)


# ---------------------------------------------------------------- erasure


def redaction_hook(store: Store) -> WriteHook:
    """The write hook that makes an erase reach the archive files (:func:`redact_archived`)."""
    def hook(con: Connection, tenant: str, op: str, type_name: str,
             entity_id: str, _principal: str | None) -> None:
        redact_archived(con, store, tenant, op, type_name, entity_id)
    return hook


def redact_archived(con: Connection, store: Store, tenant: str, op: str,
                    _type_name: str, entity_id: str) -> None:
    """Write hook: an erase also redacts the entity's snapshots in the archive files."""
    if op != "erase":
        return
    ops = ", ".join(f"'{o}'" for o in ENTITY_OPS)
    match = f"(tenant = ? AND entity_id = ? AND op IN ({ops}) AND NOT redacted)"
    rows = con.execute("SELECT file, first_seq, last_seq FROM event_archive WHERE tenant = ? "
                       "ORDER BY first_seq, file", [tenant]).fetchall()
    erase_seq = store.log.head(tenant)
    for entry, first, last in rows:
        old = _sql_path(store.log.archive_location(entry))
        if not Path(old).is_file():
            log.error("archive file %s is missing: cannot redact %s in it", old, entity_id)
            continue
        hit = con.execute(f"SELECT count(*) FROM read_parquet('{old}') WHERE {match}",
                          [tenant, entity_id]).fetchone()
        if not hit or not hit[0]:
            continue
        new = Path(old).with_name(FILE_PATTERN.format(tenant=tenant, first=first, last=last)
                                  .replace(".parquet", f".e{erase_seq}.parquet"))
        target = _sql_path(new)
        columns = archived_columns(con, old)
        cols = ", ".join(
            f"CASE WHEN m THEN NULL ELSE {c} END AS {c}" if c in ("before", "after")
            else ("(redacted OR m) AS redacted" if c == "redacted" else columns[c])
            for c in EVENT_COLUMNS)
        con.execute(f"COPY (SELECT {cols} FROM (SELECT *, {match} AS m FROM "
                    f"read_parquet('{old}')) ORDER BY seq) TO '{target}' (FORMAT parquet)",
                    [tenant, entity_id])
        store.db.on_rollback(functools.partial(new.unlink, missing_ok=True))
        store.db.after_commit(functools.partial(Path(old).unlink, missing_ok=True))
        con.execute("UPDATE event_archive SET file = ?, sha256 = ? WHERE file = ?",
                    [store.log.archive_entry(new), file_sha256(new), entry])
        store.log.refresh_events_view(con)


# ---------------------------------------------------------------- snapshots


def copy_archives(store: Store, dest: Path) -> list[ArchiveFile]:
    """Copy every archive file into ``dest/archived_events/`` (a snapshot); their checkpoints,
    named relative to ``dest``."""
    files = archive_files(store)
    if files:
        (dest / SNAPSHOT_DIR).mkdir(exist_ok=True)
    for entry in files:
        shutil.copy2(store.log.archive_location(entry.file),
                     dest / SNAPSHOT_DIR / Path(entry.file).name)
    return [f.model_copy(update={"file": f"{SNAPSHOT_DIR}/{Path(f.file).name}"}) for f in files]


def restore_archives(con: Connection, directory: Path, src: Path,
                     files: list[ArchiveFile]) -> None:
    """Inside the import of a snapshot's bundle into the memory ``directory`` (every event
    hot): put the snapshot ``src``'s archive files back, checked against their checkpoints,
    and take the events each holds out of the hot table again."""
    for entry in files:
        target = _copy_checked(src, directory, Path(entry.file).name, entry.sha256)
        mine = [entry.tenant, entry.first_seq, entry.last_seq]
        held = con.execute(f"SELECT count(*), min(seq), max(seq) FROM read_parquet("
                           f"'{_sql_path(target, 'src')}') WHERE tenant = ? AND seq "
                           "BETWEEN ? AND ?", mine).fetchone()
        hot = con.execute("SELECT count(*) FROM events WHERE tenant = ? AND seq BETWEEN ? "
                          "AND ?", mine).fetchone()
        if held != (entry.events, entry.first_seq, entry.last_seq) or hot != (entry.events,):
            raise ValidationError(f"archive file {target.name} does not hold the events its "
                                  "checkpoint names", field="src")
        con.execute("DELETE FROM events WHERE tenant = ? AND seq BETWEEN ? AND ?", mine)
        con.execute("INSERT INTO event_archive (file, tenant, first_seq, last_seq, last_hash, "
                    "events, sha256, archived_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    list(entry.model_dump().values()))


def import_database(src: Path, db_file: Path) -> None:
    """A new database file ``db_file`` holding a snapshot of format 1 (DuckDB's ``EXPORT
    DATABASE`` files in ``src``), its archive files copied beside it (and checked against
    their checkpoints)."""
    con = duckdb.connect(str(db_file), config={"zstd_min_string_length": ZSTD_MIN_STRING_LENGTH})
    try:
        con.execute(f"IMPORT DATABASE '{_sql_path(src, 'src')}'")
        try:
            rows = con.execute("SELECT file, sha256 FROM event_archive ORDER BY file").fetchall()
        except duckdb.CatalogException:  # a snapshot from before archiving existed
            return
        for old, digest in rows:
            name = _copy_checked(src, db_file.parent, Path(old).name, digest).name
            # named relative to the new memory directory, which holds the database file
            con.execute("UPDATE event_archive SET file = ? WHERE file = ?",
                        [f"{SNAPSHOT_DIR}/{name}", old])
    finally:
        con.close()


def _copy_checked(src: Path, directory: Path, name: str, digest: str) -> Path:
    """Copy the snapshot ``src``'s archive file ``name`` into ``directory``; ValidationError
    when it is missing or its SHA-256 is not ``digest``."""
    source = src / SNAPSHOT_DIR / name
    if not source.is_file():
        raise ValidationError(f"the snapshot lacks the archive file {name}", field="src")
    (directory / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
    target = directory / SNAPSHOT_DIR / name
    shutil.copy2(source, target)
    if file_sha256(target) != digest:
        raise ValidationError(f"archive file {name} does not match its checkpoint", field="src")
    return target


@contextmanager
def new_directory(dest: Path, what: str) -> Iterator[None]:
    """A memory directory to make in the block: new, or existing and empty (Conflict if not);
    left as it was found when the block fails."""
    if dest.exists() and any(dest.iterdir()):
        raise Conflict(f"{what} target {dest} exists and is not empty", field="path")
    made = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
