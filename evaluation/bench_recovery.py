"""What an unclean shutdown costs at the next start, and what the reachable-by-ID check costs.

    python -m evaluation.bench_recovery --n 100000 --out evaluation/results/bench_recovery.json

A subprocess bulk-loads N entities of an embedded type (test embedder, 384 dimensions, so
the embedding cache holds N vectors too), writes one more and is killed with SIGKILL: the
directory has a WAL. Then, on copies of it, this process times:

* ``open_after_kill``: ``Memory.open(..., replay=False)`` — DuckDB's WAL replay plus the
  index repair of ``dmf_hybrid._internal.store.integrity`` (the figures of the repair itself: its
  key probes and its index rebuilds, from the ``IndexRepair`` it returns);
* ``open_clean``: the same open of a directory that was closed cleanly;
* ``reachable_check``: ``unreachable_by_id`` over every entity (what ``verify`` and
  ``reconcile`` add), ``verify``: all of ``verify_audit``, and ``verify_chain``: its
  hash-chain part, for comparison;
* ``rebuild_check_ratio``: how many times the repair's index rebuilds the row-by-row check
  costs (why the start rebuilds ID indexes instead of checking them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DIM = 384
BATCH = 5000
ITEM = {"name": "Item", "identity": ["key"], "embed": "{key}: {body}",
        "fields": {"key": {"type": "str", "required": True, "nullable": False},
                   "body": {"type": "str"}, "n": {"type": "int"}}}


def build(directory: Path, n: int) -> None:
    """Load ``n`` entities, write one more, then SIGKILL this process (leaves a WAL)."""
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.vector.exact import ExactIndex

    mem = Memory.open(directory, embedder=HashEmbedder(DIM), vector_index=ExactIndex())
    mem.define_type(ITEM)
    for start in range(0, n, BATCH):
        mem.create_many("Item", [{"key": f"item-{i}", "body": f"body of item {i} " * 8,
                                  "n": i} for i in range(start, min(n, start + BATCH))])
    mem._store.db.checkpoint()  # noqa: SLF001 - the load is not what the WAL should hold
    mem.create("Item", {"key": "the last write", "body": "killed after this", "n": -1})
    os.kill(os.getpid(), signal.SIGKILL)


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, round(time.perf_counter() - start, 3)


def measure(workdir: Path, n: int) -> dict[str, Any]:
    """Build a killed store of ``n`` entities under ``workdir`` and time the start after it."""
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.store.db import Database
    from dmf_hybrid._internal.store.integrity import repair_indexes, unreachable_by_id
    from dmf_hybrid._internal.vector.exact import ExactIndex

    killed = workdir / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "evaluation.bench_recovery", "--build",
                           str(killed), "--n", str(n)], cwd=ROOT, env=env, check=False)
    if done.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the build exited with {done.returncode}")
    wal = killed / "memory.duckdb.wal"
    out: dict[str, Any] = {"entities": n, "wal_bytes": wal.stat().st_size}

    def opened(path: Path) -> Any:
        return Memory.open(path, embedder=HashEmbedder(DIM), vector_index=ExactIndex(),
                           replay=False)

    copy = shutil.copytree(killed, workdir / "open-after-kill")
    mem, out["open_after_kill_s"] = timed(lambda: opened(copy))
    mem.close()  # a clean close: no WAL
    mem, out["open_clean_s"] = timed(lambda: opened(copy))
    report, out["verify_s"] = timed(mem.verify_audit)
    assert report.ok, report
    _, out["verify_chain_s"] = timed(mem._store.verify_audit)  # noqa: SLF001 - the chain alone
    mem.close()

    copy = shutil.copytree(killed, workdir / "repair")
    db = Database(copy / "memory.duckdb")  # replays the WAL; nothing repaired yet
    try:
        repair = repair_indexes(db)
        lost, out["reachable_check_s"] = timed(lambda: unreachable_by_id(db))
        assert lost == {}, lost
    finally:
        db.close()
    out.update({"repair_s": repair.seconds, "repair_key_probes_s": repair.probe_seconds,
                "repair_index_rebuilds_s": round(repair.seconds - repair.probe_seconds, 3),
                "keys_probed": len(repair.keys_checked),
                "indexes_rebuilt": repair.rebuilt_indexes})
    out["rebuild_check_ratio"] = round(out["reachable_check_s"]
                                       / max(out["repair_index_rebuilds_s"], 1e-3), 1)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = [("entities", "entities"), ("open_after_kill_s", "open after kill (s)"),
            ("open_clean_s", "clean open (s)"), ("repair_key_probes_s", "key probes (s)"),
            ("repair_index_rebuilds_s", "index rebuilds (s)"),
            ("reachable_check_s", "reachable-by-ID check (s)"),
            ("verify_chain_s", "verify: chain (s)"), ("verify_s", "verify: all (s)")]
    lines = ["| " + " | ".join(h for _, h in cols) + " |",
             "|" + "---:|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(f"{row[k]:,}" if isinstance(row[k], int)
                                       else str(row[k]) for k, _ in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000])
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build is not None:
        build(args.build, args.n[0])
        return 1  # not reached: build kills itself
    rows = []
    with tempfile.TemporaryDirectory(prefix="dmf-recovery-") as tmp:
        for n in args.n:
            rows.append(measure(Path(tmp) / str(n), n))
            print(f"done {n}", file=sys.stderr)
    print(markdown(rows))
    if args.out is not None:
        args.out.write_text(json.dumps({"runs": rows}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
