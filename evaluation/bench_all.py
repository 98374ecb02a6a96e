"""Every performance benchmark, one after another, at sizes that fit in ~20 minutes on 2 cores.

``python -m evaluation.bench_all`` (what ``make bench`` runs) runs, each as a child process so
that none inherits another's warm caches or loaded model:

=========  ===============================  =================================================
name       module                           what it measures
=========  ===============================  =================================================
store      ``evaluation.bench_store``       create / update / get / query / as_of, 10k rows
engines    ``evaluation.bench_engines``     the same on DuckDB and PostgreSQL side by side
search     ``evaluation.bench_search``      filtered vector search vs Chroma ``where``, ingest
keyword    ``evaluation.bench_keyword``     the BM25 leg vs bm25s on SciFact and synthetic
http       ``evaluation.bench_http``        POST /search at 1, 4, 16 clients, real server
workers    ``evaluation.bench_workers``     1 and 2 workers on PostgreSQL + a Chroma server
relay      ``evaluation.bench_relay``       commit to vector in the shared Chroma server
coldstart  ``evaluation.bench_coldstart``   import, open, first search, server readiness
embed      ``evaluation.bench_embed``       every embedder's passages/s, query latency, agreement
loadwrites ``evaluation.bench_load_writes`` write latency while a type's mirrors load
=========  ===============================  =================================================

Each writes its JSON / markdown / PNG under ``evaluation/results/``. Before a run, the flags
passed are checked against the module's ``--help``; a missing module or dataset is skipped
and a flag the module does not know is dropped, each with a clear message, so that one
missing benchmark never stops the others. Every child has a time bound. ``--quick`` runs the
same steps at tiny sizes (a minute or two, for checking the wiring); ``--only`` / ``--skip``
choose steps. A summary table (status and seconds per step) is printed at the end; the exit
code is 1 when a step that ran failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.plotting import markdown_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "evaluation" / "results"
DEFAULT_SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
BUDGET_MINUTES = 20.0

Flag = tuple[str, ...]  # ("--n", "2000") or ("--skip-model",)


@dataclass
class Step:
    """One benchmark run: its module, its flags and its time bound."""

    name: str
    module: str
    flags: list[Flag]
    timeout_s: float
    needs: list[Path] = field(default_factory=list)  # inputs that must exist


@dataclass
class Outcome:
    """What happened to a step."""

    name: str
    status: str  # "ok", "failed (code N)", "timed out", "skipped: ..."
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def plan(results: Path, scifact: Path, quick: bool) -> list[Step]:
    """The steps of a full run (or of a ``quick`` one) writing under ``results``."""

    def out(name: str) -> Flag:
        return ("--out", str(results / f"bench_{name}.json"))

    if quick:
        return [
            Step("store", "evaluation.bench_store",
                 [("--sizes", "1000"), ("--samples", "20"), ("--queries", "10"),
                  ("--asof-queries", "3"), out("store")], 300),
            Step("engines", "evaluation.bench_engines",
                 [("--sizes", "1000"), ("--samples", "20"), ("--queries", "10"),
                  ("--asof-queries", "3"), out("engines")], 300),
            Step("search", "evaluation.bench_search",
                 [("--n", "2000"), ("--queries", "5"), ("--skip-model",), out("search")], 300),
            Step("keyword", "evaluation.bench_keyword",
                 [("--data", str(scifact)), ("--synthetic", "0"), ("--systems", "ours"),
                  out("keyword")], 300, [scifact]),
            Step("http", "evaluation.bench_http",
                 [("--n", "100"), ("--embedder", "hash"), ("--requests", "32"),
                  ("--rounds", "2"), ("--concurrency", "1", "4"), out("http")], 300),
            Step("workers", "evaluation.bench_workers",
                 [("--workers", "1", "2"), ("--clients", "1", "4"), ("--n", "200"),
                  ("--embedder", "hash"), ("--seconds", "2"), ("--lag-samples", "5"),
                  out("workers")], 400),
            Step("relay", "evaluation.bench_relay",
                 [("--samples", "5"), ("--gap", "0.1"), out("relay")], 300),
            Step("coldstart", "evaluation.bench_coldstart",
                 [("--n", "100"), ("--embedder", "hash"), ("--runs", "1"), out("coldstart")],
                 300),
            Step("embed", "evaluation.bench_embed",
                 [("--scifact", str(scifact)), ("--variants", "hash"), ("--rounds", "1"),
                  ("--passages", "8"), ("--sentences", "8"), ("--queries", "5"), out("embed")],
                 300, [scifact]),
            Step("loadwrites", "evaluation.bench_load_writes",
                 [("--n", "300"), ("--embedder", "hash"), ("--rounds", "1"),
                  out("load_writes")], 300),
        ]
    # Sizes measured to fit ~20 minutes on the shared 2-core machine (load average ~10);
    # MiniLM embeds only ~10 texts/s there, so the model-backed steps stay at 1000 entities.
    return [
        Step("store", "evaluation.bench_store", [("--sizes", "10000"), out("store")], 240),
        Step("engines", "evaluation.bench_engines",
             [("--sizes", "10000"), ("--processes", "1", "2", "4"), out("engines")], 600),
        Step("search", "evaluation.bench_search",
             [("--n", "10000"), ("--queries", "30"), ("--sample", "300"), out("search")], 480),
        Step("keyword", "evaluation.bench_keyword",
             [("--data", str(scifact)), ("--synthetic", "10000"), ("--systems", "ours,bm25s"),
              out("keyword")], 300, [scifact]),
        Step("http", "evaluation.bench_http",
             [("--n", "1000"), ("--embedder", DEFAULT_EMBEDDER), ("--requests", "144"),
              ("--rounds", "3"), ("--max-seconds", "240"), out("http")], 480),
        Step("workers", "evaluation.bench_workers",
             [("--workers", "1", "2"), ("--clients", "1", "16", "64"), ("--n", "2000"),
              ("--embedder", DEFAULT_EMBEDDER), out("workers")], 900),
        Step("relay", "evaluation.bench_relay", [("--samples", "40"), out("relay")], 300),
        Step("coldstart", "evaluation.bench_coldstart",
             [("--n", "1000"), ("--embedder", DEFAULT_EMBEDDER), ("--runs", "3"), out("coldstart")],
             540),
        Step("embed", "evaluation.bench_embed",
             [("--scifact", str(scifact)), ("--rounds", "3"), out("embed")], 900, [scifact]),
        Step("loadwrites", "evaluation.bench_load_writes",
             [("--n", "20000"), ("--embedder", DEFAULT_EMBEDDER), ("--rounds", "2"),
              out("load_writes")], 900),
    ]


def accepted_flags(step: Step) -> tuple[list[Flag], list[str]]:
    """The step's flags its module's ``--help`` lists, and notes on those it does not."""
    try:
        helped = subprocess.run([sys.executable, "-m", step.module, "--help"], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return step.flags, ["--help timed out: passing every flag unchecked"]
    if helped.returncode != 0:
        return step.flags, [f"--help failed (code {helped.returncode}): passing every flag "
                            "unchecked"]
    known = {token.rstrip(",=[]") for token in helped.stdout.split() if token.startswith("--")}
    kept = [flag for flag in step.flags if flag[0] in known]
    notes = [f"{step.module} has no {flag[0]} option: running without "
             f"{' '.join(flag)}" for flag in step.flags if flag[0] not in known]
    return kept, notes


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """Stop a child started in its own session and all it spawned: TERM, a grace, then KILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this child leads, by its id
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    while time.monotonic() < deadline:  # a server it spawned may still be shutting down
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_step(step: Step) -> Outcome:
    """Run one step as a child process (output streamed through) and say how it went."""
    if importlib.util.find_spec(step.module) is None:
        return Outcome(step.name, f"skipped: module {step.module} not found")
    missing = [str(p) for p in step.needs if not p.exists()]
    if missing:
        return Outcome(step.name, f"skipped: {', '.join(missing)} does not exist")
    flags, notes = accepted_flags(step)
    for note in notes:
        print(f"[bench_all] {step.name}: {note}", flush=True)
    command = [sys.executable, "-m", step.module, *(part for flag in flags for part in flag)]
    print(f"[bench_all] {step.name}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    # Its own process group, so that a time-out also stops what it spawned (a server).
    proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    try:
        code = proc.wait(step.timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return Outcome(step.name, f"timed out after {step.timeout_s:.0f} s",
                       time.perf_counter() - start, notes)
    except KeyboardInterrupt:  # Ctrl-C does not reach a child in another session
        stop_group(proc)
        raise
    status = "ok" if code == 0 else f"failed (code {code})"
    return Outcome(step.name, status, time.perf_counter() - start, notes)


def summary(outcomes: Sequence[Outcome], total_s: float, budget_minutes: float) -> str:
    """A markdown table of the steps and the total against the budget."""
    rows = [[o.name, o.status, f"{o.seconds:.0f}", "; ".join(o.notes) or "–"]
            for o in outcomes]
    over = " — over budget" if total_s > budget_minutes * 60 else ""
    return (markdown_table(["benchmark", "status", "seconds", "notes"], rows)
            + f"\ntotal {total_s / 60:.1f} min (budget {budget_minutes:.0f} min){over}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); 1 when a step failed or timed out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="directory of the result files (default evaluation/results)")
    parser.add_argument("--scifact", type=Path, default=DEFAULT_SCIFACT,
                        help="BEIR SciFact directory for the keyword benchmark")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the wiring)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME")
    parser.add_argument("--skip", nargs="+", default=[], metavar="NAME")
    parser.add_argument("--budget-minutes", type=float, default=BUDGET_MINUTES)
    args = parser.parse_args(argv)
    steps = plan(args.results, args.scifact, args.quick)
    names = [s.name for s in steps]
    unknown = [u for u in [*(args.only or []), *args.skip] if u not in names]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {names}")
    chosen = [s for s in steps if (args.only is None or s.name in args.only)
              and s.name not in args.skip]
    args.results.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    outcomes = []
    for step in chosen:
        outcome = run_step(step)
        print(f"[bench_all] {step.name}: {outcome.status} ({outcome.seconds:.0f} s)", flush=True)
        outcomes.append(outcome)
    print("\n" + summary(outcomes, time.perf_counter() - began, args.budget_minutes))
    failed = [o for o in outcomes if not (o.status == "ok" or o.status.startswith("skipped"))]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
