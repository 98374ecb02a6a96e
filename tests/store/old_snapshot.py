"""A snapshot of format 1, as stores wrote them before snapshots held a bundle: DuckDB's own
``EXPORT DATABASE`` of the store (the events view over the hot table only), the audit archive
files in ``archived_events/`` and a manifest of format 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dmf_hybrid import Memory
from dmf_hybrid._internal.store import audit
from dmf_hybrid._internal.store.archive import SNAPSHOT_DIR, archive_files
from dmf_hybrid._internal.store.snapshot import MANIFEST
from dmf_hybrid._internal.store.tables import EVENTS_ALL


def write_format_1(mem: Memory, dest: Path) -> None:
    """Snapshot ``mem`` (a DuckDB store) into ``dest`` as format 1 did."""
    store = mem._store
    report = mem.verify_audit()
    dest.mkdir(parents=True)
    with store.db.write() as con:
        con.execute(f"CREATE OR REPLACE VIEW {EVENTS_ALL} AS SELECT "
                    f"{', '.join(audit.EVENT_COLUMNS)} FROM events")
        con.execute(f"EXPORT DATABASE '{dest.resolve()}' (FORMAT parquet)")
        store.log.refresh_events_view(con)
    files = archive_files(store)
    if files:
        (dest / SNAPSHOT_DIR).mkdir()
    for entry in files:
        shutil.copy2(store.log.archive_location(entry.file),
                     dest / SNAPSHOT_DIR / Path(entry.file).name)
    (dest / MANIFEST).write_text(json.dumps(
        {"format": 1, "last_seq": report.last_seq, "last_hash": report.last_hash}))
