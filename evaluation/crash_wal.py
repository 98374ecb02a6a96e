"""Crashes with a large WAL: kill -9 once tens of megabytes of acknowledged writes exist only
in DuckDB's write-ahead log, restart, commit, and find every acknowledged write again.

    python -m evaluation.crash_wal --kills 10 --wal-mb 50 --out evaluation/results/crash_wal.json

Each life of :mod:`evaluation.crash_worker` (``--large-wal``) opens the memory (DuckDB
replays the WAL the last kill left), commits one write of its own (the first commit after
the replay, the one after which DuckDB 1.4.4 lost index entries), then checks every
acknowledged entity by ID, by filter and by search (:func:`check_reachable`), besides the
usual checks (audit chain and reachability, outbox, reconcile, phantoms, in-flight calls).
It then holds a read transaction open, as a busy server's readers do, so DuckDB skips its
automatic checkpoints, and writes mostly batches of 40-60 KB values (through
``create_many``) until the parent sees the WAL at the wanted size and kills it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from evaluation.crash_worker import NOTE_TYPEDEF as SMALL_NOTE
from evaluation.crash_worker import TYPE_NAME, WORDS, State
from evaluation.reliability_crash import CrashFigures, Ledger, Zygote, _run_worker, _worker_env

log = logging.getLogger(__name__)

#: The large-WAL workload: mostly batches of large values, with the usual small operations
#: (no reindex or snapshot: they rewrite everything and would dominate the run).
OP_WEIGHTS = {"bulk": 30, "create": 10, "create_id": 4, "update": 20, "append": 4,
              "delete": 6, "restore": 3, "link": 6, "unlink": 2, "plan": 3, "batch": 2}
#: Rows per ``bulk`` call and bytes per value.
BULK_ROWS = (20, 60)
VALUE_BYTES = (40_000, 60_000)
#: Entities per filter / search in the exhaustive check.
CHECK_CHUNK = 100
#: The workload's note with a ``blob`` for the tens of kilobytes (not embedded: the test
#: embedder's cost grows with the text, and it is not what this workload measures).
NOTE_TYPEDEF: dict[str, Any] = {**SMALL_NOTE,
                                "fields": {**SMALL_NOTE["fields"], "blob": {"type": "str"}}}
RESTART_TYPEDEF: dict[str, Any] = {
    "name": "Restart", "description": "One per start of the large-WAL workload.",
    "fields": {"n": {"type": "int", "required": True, "nullable": False}},
    "identity": ["n"],
}


def large_rows(rng: random.Random, tag: str) -> list[dict[str, Any]]:
    """A batch of notes, each with a value (``blob``) of tens of kilobytes of words."""
    rows = []
    for i in range(rng.randint(*BULK_ROWS)):
        size = rng.randint(*VALUE_BYTES)
        words = rng.choices(WORDS, k=size // 6)
        rows.append({"title": f"{tag}-{i}", "body": " ".join(rng.sample(WORDS, 3)),
                     "n": rng.randrange(1000), "tags": rng.sample(WORDS, 2),
                     "blob": " ".join(words)[:size]})
    return rows


def commit_after_replay(mem: Any) -> dict[str, Any]:
    """Commit one write right after the open (DuckDB has replayed the WAL by then)."""
    mem.define_type(RESTART_TYPEDEF)
    n = mem.count("Restart")
    mem.create("Restart", {"n": n})
    return {"ev": "restart", "n": n, "seq": mem.last_seq()}


def hold_checkpoints(mem: Any) -> None:
    """Checkpoint (the WAL then holds only what this life writes), then keep a read
    transaction open for the rest of the process: DuckDB does not checkpoint automatically
    while one is open, so the WAL keeps every later commit."""
    mem._store.db.checkpoint()  # noqa: SLF001
    started = threading.Event()

    def reader() -> None:
        cur = mem._store.db.reader()  # noqa: SLF001 - the harness holds DuckDB's snapshot
        cur.execute("BEGIN TRANSACTION")
        cur.execute("SELECT count(*) FROM meta").fetchall()
        started.set()
        threading.Event().wait()

    threading.Thread(target=reader, name="hold-checkpoints", daemon=True).start()
    started.wait()


def check_reachable(mem: Any, actual: dict[str, State | None], problems: list[str]
                    ) -> dict[str, int]:
    """Find every live acknowledged entity by filter (``title $in``) and by search (the same
    filter, vector mode, k = the chunk), in chunks; by ID it was found by ``entity_state``."""
    live = sorted((s["data"]["title"], eid) for eid, s in actual.items()
                  if s is not None and not s["deleted"])
    for start in range(0, len(live), CHECK_CHUNK):
        chunk = live[start:start + CHECK_CHUNK]
        titles, want = [t for t, _ in chunk], {e for _, e in chunk}
        where = {"title": {"$in": titles}}
        page = mem.query(TYPE_NAME, where, limit=len(chunk))
        for eid in sorted(want - {e.id for e in page.items}):
            problems.append(f"{eid}: acknowledged, found by ID, not by filter")
        hits = mem.search(TYPE_NAME, titles[0], where=where, k=len(chunk), mode="vector")
        for eid in sorted(want - {h.entity.id for h in hits.hits}):
            problems.append(f"{eid}: acknowledged, found by ID, not by search")
    return {"checked_by_id": len(live), "checked_by_filter": len(live),
            "checked_by_search": len(live)}


def run_large_wal_crashes(workdir: Path, kills: int, wal_mb: float, seed: int = 0
                          ) -> CrashFigures:
    """Kill the large-WAL workload ``kills`` times, each once its WAL holds ``wal_mb`` MB;
    the next life checks everything (a last life only checks)."""
    rng = random.Random(seed)
    figures = CrashFigures()
    ledger = Ledger()
    workdir.mkdir(parents=True, exist_ok=True)
    directory, expect_file = workdir / "mem", workdir / "expect.json"
    target = int(wal_mb * 2**20)
    zygote = Zygote(_worker_env(None, rng))
    try:
        for i in range(kills + 1):
            kill = ("wal", target) if i < kills else None
            expect = None
            if i > 0:
                expect_file.write_text(json.dumps(ledger.expect()))
                expect = expect_file
            start = time.monotonic()
            if not _run_worker(directory, seed * 1000 + i, ledger, expect, kill, rng, figures,
                               (0.0, 0.0), zygote, large_wal=True):
                break
            log.info("large-WAL life %d/%d: %.0f s, %d calls acknowledged so far", i + 1,
                     kills + 1, time.monotonic() - start, ledger.acked_calls)
    finally:
        zygote.close()
    figures.acknowledged_writes = ledger.acked_calls
    return figures


def summary(figures: CrashFigures, wal_mb: float, seconds: float) -> dict[str, Any]:
    """The JSON figures of a run."""
    checks = [r for r in figures.reports if "checked_by_id" in r]
    wal = figures.wal_bytes_at_kill
    return {
        "kills": figures.kills, "wal_mb_target": wal_mb,
        "wal_mb_at_kill_min": round(min(wal) / 2**20, 1) if wal else 0,
        "wal_mb_at_kill_median": round(statistics.median(wal) / 2**20, 1) if wal else 0,
        "acknowledged_calls": figures.acknowledged_writes,
        "lost_writes": figures.lost_writes,
        "entities_checked_last": checks[-1]["checked_by_id"] if checks else 0,
        "entity_checks_by_id": sum(r["checked_by_id"] for r in checks),
        "entity_checks_by_filter": sum(r["checked_by_filter"] for r in checks),
        "entity_checks_by_search": sum(r["checked_by_search"] for r in checks),
        "unreachable_by_id": sum(r.get("unreachable_by_id", 0) for r in checks),
        "problems": len(figures.problems), "seconds": round(seconds),
    }


def markdown(figures: dict[str, Any]) -> str:
    """The figures as a two-column table."""
    rows = [(k.replace("_", " "), v) for k, v in figures.items()]
    return "\n".join(["| figure | value |", "|---|---:|"]
                     + [f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |"
                        for k, v in rows])


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write the JSON; 1 if anything was lost or any check failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--wal-mb", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the work files here (default: a temporary directory)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dmf-crash-wal-") as tmp:
        figures = run_large_wal_crashes(args.workdir or Path(tmp), args.kills, args.wal_mb,
                                        args.seed)
    result = summary(figures, args.wal_mb, time.monotonic() - start)
    print(markdown(result))
    for problem in figures.problems[:40]:
        print(f"  - {problem}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 1 if figures.problems or figures.lost_writes else 0


if __name__ == "__main__":
    raise SystemExit(main())
