"""Reliability and security figures: crashes, concurrency, fuzzing, hostile input, tenants.

    python -m evaluation.reliability [--quick] --out evaluation/results/reliability.json

Runs every suite (see the ``reliability_*`` modules and :mod:`evaluation.crash_worker`),
prints a summary table and writes exactly these figures as JSON::

    {"kills", "acknowledged_writes", "lost_writes", "concurrent_updates", "lost_updates",
     "fuzz_cases", "fuzz_5xx", "isolation_probes", "leaks", "hostile_requests",
     "hostile_accepted", "hardening_probes", "hardening_failed", "slowdown_ratio"}

The exit status is 1 when anything that must be zero is not (lost writes or updates, 5xx,
schema violations, hostile input accepted or changing state, a crash or concurrency problem,
any leak, a failed probe of :mod:`evaluation.reliability_hardening`). ``--quick`` takes under
three minutes here;
the default (``make reliability``) injects 50 kills into the embedded workload plus 5 into
the HTTP server, and 10 more once 50 MB of acknowledged writes are in DuckDB's WAL
(:mod:`evaluation.crash_wal`; its kills and writes count in the crash figures).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.crash_wal import run_large_wal_crashes
from evaluation.reliability_crash import CrashFigures, run_embedded_crashes, run_http_crashes
from evaluation.reliability_fuzz import FuzzFigures, run_fuzz
from evaluation.reliability_hardening import HardeningFigures, run_hardening
from evaluation.reliability_hostile import HostileFigures, run_hostile
from evaluation.reliability_isolation import IsolationFigures, run_isolation
from evaluation.reliability_service import ConcurrencyFigures, run_concurrency

log = logging.getLogger(__name__)

FIGURE_KEYS = ("kills", "acknowledged_writes", "lost_writes", "concurrent_updates",
               "lost_updates", "fuzz_cases", "fuzz_5xx", "isolation_probes", "leaks",
               "hostile_requests", "hostile_accepted", "hardening_probes", "hardening_failed",
               "slowdown_ratio")


@dataclass(frozen=True)
class Sizes:
    """How much of each suite to run."""

    kills: int
    http_kills: int
    writers: int
    updates: int
    fuzz_examples: int
    vectors: str = "exact"
    wal_kills: int = 2  # kills once the WAL holds wal_mb of acknowledged writes
    wal_mb: float = 16.0


FULL = Sizes(kills=50, http_kills=5, writers=16, updates=8, fuzz_examples=12, vectors="chroma",
             wal_kills=10, wal_mb=50.0)
QUICK = Sizes(kills=8, http_kills=1, writers=12, updates=4, fuzz_examples=3)
#: What the normal test suite runs (tests/reliability).
SMALL = Sizes(kills=5, http_kills=1, writers=8, updates=3, fuzz_examples=2)


@dataclass
class Results:
    """Every suite's figures."""

    crash: CrashFigures = field(default_factory=CrashFigures)
    crash_wal: CrashFigures = field(default_factory=CrashFigures)
    concurrency: ConcurrencyFigures = field(default_factory=ConcurrencyFigures)
    fuzz: FuzzFigures = field(default_factory=FuzzFigures)
    hostile: HostileFigures = field(default_factory=HostileFigures)
    isolation: IsolationFigures = field(default_factory=IsolationFigures)
    hardening: HardeningFigures = field(default_factory=HardeningFigures)
    wal_fsync: bool | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def figures(self) -> dict[str, int | float | None]:
        """The JSON figures (exactly :data:`FIGURE_KEYS`)."""
        return {
            "kills": self.crash.kills,
            "acknowledged_writes": self.crash.acknowledged_writes,
            "lost_writes": self.crash.lost_writes,
            "concurrent_updates": self.concurrency.concurrent_updates,
            "lost_updates": self.concurrency.lost_updates,
            "fuzz_cases": self.fuzz.cases,
            "fuzz_5xx": self.fuzz.server_errors,
            "isolation_probes": self.isolation.probes,
            "leaks": self.isolation.leaks,
            "hostile_requests": self.hostile.requests,
            "hostile_accepted": len(self.hostile.accepted),
            "hardening_probes": self.hardening.probes,
            "hardening_failed": len(self.hardening.failed),
            "slowdown_ratio": self.hardening.slowdown_ratio,
        }

    def failures(self) -> list[str]:
        """Everything that must be zero but is not (empty: all good)."""
        out = [f"crash: {p}" for p in self.crash.problems]
        out += [f"concurrency: {p}" for p in self.concurrency.problems]
        if self.crash.lost_writes:
            out.append(f"{self.crash.lost_writes} acknowledged writes lost")
        if self.concurrency.lost_updates:
            out.append(f"{self.concurrency.lost_updates} concurrent updates lost")
        if self.concurrency.reader_violations:
            out.append(f"{self.concurrency.reader_violations} reads saw half a transaction")
        if self.fuzz.server_errors or self.fuzz.violations:
            out.append(f"fuzz: {self.fuzz.server_errors} 5xx, {self.fuzz.violations} schema "
                       "violations")
            out += [f"fuzz {k}: {v[:300]}" for k, v in sorted(self.fuzz.failures.items())]
        out += [f"hostile input accepted: {p}" for p in self.hostile.accepted]
        out += [f"hostile input changed state: {p}" for p in self.hostile.state_changed]
        if self.isolation.leaks or self.isolation.problems:
            out.append(f"isolation: {self.isolation.leaks} leaks")
            out += [f"isolation: {p}" for p in self.isolation.problems]
        out += [f"hardening probe failed: {p}" for p in self.hardening.failed]
        return out


def duckdb_fsyncs_wal() -> bool | None:
    """True if a DuckDB COMMIT fsyncs the WAL before returning (seen with strace; None: no strace).

    DuckDB 1.4 writes the transaction's WAL entries and then calls ``fsync`` on the ``.wal``
    file inside COMMIT, so an acknowledged commit survives a power loss, not only a SIGKILL.
    """
    strace = shutil.which("strace")
    if strace is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        script = (
            "import duckdb, os\n"
            f"c = duckdb.connect({str(Path(tmp) / 'w.duckdb')!r})\n"
            "c.execute('CREATE TABLE t (a INT)'); c.execute('CHECKPOINT')\n"
            "os.write(2, b'BEGIN-COMMIT\\n')\n"
            "c.execute('BEGIN'); c.execute('INSERT INTO t VALUES (1)'); c.execute('COMMIT')\n"
            "os.write(2, b'END-COMMIT\\n')\n"
            "os._exit(0)\n")
        trace = Path(tmp) / "trace"
        result = subprocess.run(
            [strace, "-f", "-e", "trace=openat,write,fsync,fdatasync", "-o", str(trace),
             sys.executable, "-c", script], capture_output=True, timeout=120)
        if result.returncode != 0 or not trace.exists():
            return None
        text = trace.read_text(errors="replace")
        if "BEGIN-COMMIT" not in text or "END-COMMIT" not in text:
            return None
        window = text.split("BEGIN-COMMIT", 1)[1].split("END-COMMIT", 1)[0]
        wal_fds = {line.rsplit("=", 1)[-1].strip() for line in window.splitlines()
                   if ".wal" in line and "openat" in line}
        return any(f"fsync({fd})" in window or f"fdatasync({fd})" in window for fd in wal_fds)


def run_all(workdir: Path, sizes: Sizes, seed: int = 0) -> Results:
    """Run every suite at ``sizes`` under ``workdir``."""
    results = Results()

    @contextmanager
    def timed(name: str) -> Iterator[None]:
        (workdir / name).mkdir(parents=True, exist_ok=True)
        log.info("running %s", name)
        start = time.monotonic()
        try:
            yield
        finally:
            results.seconds[name] = round(time.monotonic() - start, 1)

    with timed("crash"):
        results.crash = run_embedded_crashes(workdir / "crash", sizes.kills, seed=seed)
    with timed("http_crash"):
        results.crash.merge(run_http_crashes(workdir / "http_crash", sizes.http_kills,
                                             seed=seed))
    with timed("crash_wal"):
        results.crash_wal = run_large_wal_crashes(workdir / "crash_wal", sizes.wal_kills,
                                                  sizes.wal_mb, seed=seed)
        results.crash.merge(results.crash_wal)
    with timed("concurrency"):
        results.concurrency = run_concurrency(workdir / "concurrency", writers=sizes.writers,
                                              updates=sizes.updates, vectors=sizes.vectors,
                                              seed=seed)
    with timed("fuzz"):
        results.fuzz = run_fuzz(workdir / "fuzz", examples=sizes.fuzz_examples, seed=seed)
    with timed("hostile"):
        results.hostile = run_hostile(workdir / "hostile")
    with timed("isolation"):
        results.isolation = run_isolation(workdir / "isolation")
    with timed("hardening"):
        results.hardening = run_hardening(workdir / "hardening")
    results.wal_fsync = duckdb_fsyncs_wal()
    return results


def summary(results: Results) -> str:
    """The summary table (and the details worth reading next to it)."""
    r = results
    rows = [
        ("kills injected", r.crash.kills, ""),
        ("writes acknowledged", r.crash.acknowledged_writes, ""),
        ("writes lost", r.crash.lost_writes, "must be 0"),
        ("concurrent updates attempted", r.concurrency.concurrent_updates, ""),
        ("concurrent updates lost", r.concurrency.lost_updates, "must be 0"),
        ("fuzz cases", r.fuzz.cases, ""),
        ("fuzz 5xx", r.fuzz.server_errors, "must be 0"),
        ("fuzz schema violations", r.fuzz.violations, "must be 0"),
        ("hostile requests refused", f"{r.hostile.refused}/{r.hostile.requests}", "all"),
        ("hostile requests changing state", len(r.hostile.state_changed), "must be 0"),
        ("isolation probes", r.isolation.probes, ""),
        ("isolation leaks", r.isolation.leaks, "must be 0"),
        ("hardening probes", r.hardening.probes, ""),
        ("hardening probes failed", len(r.hardening.failed), "must be 0"),
        ("update slowdown behind the largest value", r.hardening.slowdown_ratio, "<= 2x"),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'figure':<{width}}  {'value':>9}  note", "-" * (width + 30)]
    lines += [f"{name:<{width}}  {value!s:>9}  {note}" for name, value, note in rows]
    kill_points = ", ".join(f"{k} {v}" for k, v in sorted(r.crash.kill_points.items()))
    lines += [
        "",
        f"kill points: {kill_points}",
        f"in-flight calls found committed after a kill: {r.crash.in_flight_applied}",
        f"large WAL: {r.crash_wal.kills} kills at "
        + ", ".join(f"{b / 2**20:.0f}" for b in r.crash_wal.wal_bytes_at_kill)
        + " MB of WAL; after each, every acknowledged entity found by ID, filter and search "
        f"({sum(c.get('checked_by_search', 0) for c in r.crash_wal.reports)} checks)",
        f"concurrency: {r.concurrency.successful_updates} updates won, {r.concurrency.conflicts}"
        f" answered 412, {r.concurrency.transfers} transfer plans, {r.concurrency.doomed_plans}"
        f" doomed plans, {r.concurrency.reader_checks} reader checks, "
        f"{r.concurrency.reader_violations} saw half a transaction",
        f"fuzz: {r.fuzz.operations} operations, positive and negative, each with and without "
        "a key",
        "DuckDB fsyncs the WAL inside COMMIT: "
        + {True: "yes (strace)", False: "NO", None: "unknown (no strace)"}[r.wal_fsync],
    ]
    lines.append("seconds: " + ", ".join(f"{k} {v}" for k, v in r.seconds.items()))
    failures = r.failures()
    if failures:
        lines += ["", f"FAILURES ({len(failures)}):"] + [f"  - {f}" for f in failures[:40]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suites, print the summary, write the figures; 1 if anything must-be-zero is not."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (< 3 minutes)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="keep the work files here (default: temp)")
    parser.add_argument("--kills", type=int, help="override the embedded kill count")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("httpx", "chromadb", "dmf_hybrid", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sizes = QUICK if args.quick else FULL
    if args.kills is not None:
        sizes = Sizes(**{**sizes.__dict__, "kills": args.kills})
    with tempfile.TemporaryDirectory(prefix="dmf-reliability-") as tmp:
        workdir = args.workdir or Path(tmp)
        results = run_all(workdir, sizes, seed=args.seed)
    print(summary(results))
    figures = results.figures()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 1 if results.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
