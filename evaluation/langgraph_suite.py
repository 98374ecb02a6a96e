"""LangGraph's published store tests, unmodified, against ``DMFStore`` through both doors.

``python -m evaluation.langgraph_suite [--door memory|http|both] [--suite DIR] [--out PATH]``

LangGraph publishes its store tests in the source distribution of ``langgraph-checkpoint``
on PyPI (``tests/test_store.py`` and ``tests/embed_test_utils.py``). This script downloads
that distribution for the installed version (``pip download --no-binary``) into a
temporary directory outside the repository (or uses ``--suite``, an unpacked copy), runs
pytest on their ``test_store.py`` there, with their own pytest configuration, and loads
:mod:`evaluation.langgraph_plugin`, which puts ``DMFStore`` where their tests construct
their reference ``InMemoryStore``. Nothing of theirs is copied into the repository.

It reports pass / fail counts per area (vector search, filters, pagination, namespaces,
non-ASCII text, batching; the tests of LangGraph's helpers alone, which build no store,
are counted apart) and writes JSON (``--out``) and a markdown table beside it.
Needs pytest-mock and pytest-asyncio (the suite's own test dependencies; both in ``dev``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from evaluation.langgraph_plugin import DOORS
from evaluation.plotting import environment, markdown_table, write_results

log = logging.getLogger("langgraph_suite")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "langgraph_suite.json"
DISTRIBUTION = "langgraph-checkpoint"
TEST_MODULE = "tests/test_store.py"
#: Each test of the suite by the behaviour it checks (the name without its parameters).
AREAS: dict[str, tuple[str, ...]] = {
    "vector search": (
        "test_vector_store_initialization", "test_vector_insert_with_auto_embedding",
        "test_async_vector_insert_with_auto_embedding", "test_vector_update_with_embedding",
        "test_async_vector_update_with_embedding", "test_vector_search_scores_every_item",
        "test_embed_with_path"),
    "filters": (
        "test_vector_search_with_filters", "test_async_vector_search_with_filters",
        "test_async_batched_vector_search_concurrent"),
    "pagination": (
        "test_search_pages_match_full_listing", "test_vector_search_pagination",
        "test_async_vector_search_pagination", "test_list_namespaces_pagination"),
    "namespaces": (
        "test_list_namespaces_basic", "test_list_namespaces_with_wildcards",
        "test_list_namespaces_max_depth", "test_list_namespaces_no_conditions",
        "test_list_namespaces_empty_store", "test_cannot_put_empty_namespace",
        "test_rejects_invalid_namespace_labels", "test_async_rejects_invalid_namespace_labels",
        "test_search_and_listing_keep_empty_prefixes_and_wildcards",
        "test_async_search_and_listing_keep_empty_prefixes_and_wildcards"),
    "non-ASCII": ("test_non_ascii",),
    "batching": ("test_async_batch_store_resilience", "test_async_batch_store_deduplication"),
}
HELPERS = "LangGraph's helpers alone (no store)"
OTHER = "other tests of a store"


def fetch_suite(dest: Path) -> Path:
    """The unpacked source distribution of the installed langgraph-checkpoint, in ``dest``."""
    wanted = version(DISTRIBUTION)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                    ":all:", "--quiet", f"{DISTRIBUTION}=={wanted}", "-d", str(dest)],
                   check=True, timeout=600)
    archive = next(dest.glob("langgraph_checkpoint-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / archive.name.removesuffix(".tar.gz")


def run_door(suite: Path, door: str, report: Path) -> None:
    """pytest on the suite's store tests with DMFStore behind ``door`` (junit XML)."""
    env = {**os.environ,
           # their ``tests`` package first; then this repository (dmf_hybrid, the plugin)
           "PYTHONPATH": os.pathsep.join([str(suite), str(ROOT)])}
    cmd = [sys.executable, "-m", "pytest", TEST_MODULE, "-p", "evaluation.langgraph_plugin",
           "--dmf-door", door, "-p", "no:cacheprovider", "-q", f"--junitxml={report}"]
    log.info("running %s", " ".join(cmd))
    done = subprocess.run(cmd, cwd=suite, env=env, timeout=3600, capture_output=True,
                          text=True)
    if done.returncode not in (0, 1):  # 1: some test failed, which the report counts
        sys.stderr.write(done.stdout[-5000:] + done.stderr[-5000:])
        raise SystemExit(f"pytest could not run the suite (exit {done.returncode})")


def area_of(name: str, stores: int) -> str:
    """The area a test belongs to (by its name; by whether it built a store otherwise)."""
    base = name.split("[", 1)[0]
    for area, tests in AREAS.items():
        if base in tests:
            return area
    return HELPERS if stores == 0 else OTHER


def read_report(path: Path) -> list[dict[str, Any]]:
    """Each test case of a junit XML report: name, outcome, stores built, failure text."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        skipped = any(c.tag == "skipped" for c in case)
        outcome = "failed" if problem is not None else "skipped" if skipped else "passed"
        cases.append({"name": case.get("name", ""), "outcome": outcome,
                      "stores": int(props.get("dmf_stores") or 0),
                      "message": None if problem is None else problem.get("message")})
    return cases


def tally(cases: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{area: {"passed": n, "failed": n, "skipped": n}}``, areas in report order."""
    order = [*AREAS, OTHER, HELPERS]
    counts: dict[str, dict[str, int]] = {a: {"passed": 0, "failed": 0, "skipped": 0}
                                         for a in order}
    for case in cases:
        counts[area_of(case["name"], case["stores"])][case["outcome"]] += 1
    return {a: c for a, c in counts.items() if sum(c.values())}


def markdown(doc: Mapping[str, Any]) -> str:
    """The report as markdown: one table of counts per area and door."""
    doors = list(doc["doors"])
    rows = []
    for area in doc["doors"][doors[0]]["areas"]:
        row: list[Any] = [area]
        for door in doors:
            c = doc["doors"][door]["areas"].get(area, {"passed": 0, "failed": 0})
            row.append(f"{c['passed']} / {c['passed'] + c['failed']}")
        rows.append(row)
    rows.append(["all", *[f"{doc['doors'][d]['passed']} / {doc['doors'][d]['total']}"
                          for d in doors]])
    failures = [f"- {d}: `{c['name']}`: {c['message']}" for d in doors
                for c in doc["doors"][d]["cases"] if c["outcome"] == "failed"]
    return (f"## LangGraph's store tests against DMFStore\n\n"
            f"`{doc['suite']}` ({doc['source']}), run unmodified; passed / run per area "
            f"and door.\n\n"
            + markdown_table(["area", *[f"door: {d}" for d in doors]], rows)
            + ("\nFailures:\n\n" + "\n".join(failures) + "\n" if failures else ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.langgraph_suite",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--door", choices=[*DOORS, "both"], default="both")
    parser.add_argument("--suite", type=Path, default=None,
                        help="an unpacked langgraph-checkpoint source distribution "
                             "(default: download the installed version's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    doors = list(DOORS) if args.door == "both" else [args.door]
    with tempfile.TemporaryDirectory(prefix="langgraph-suite-") as tmp:
        suite = args.suite.resolve() if args.suite else fetch_suite(Path(tmp))
        name = re.sub(r"^langgraph_checkpoint-", f"{DISTRIBUTION} ", suite.name)
        doc: dict[str, Any] = {"suite": f"{name}: {TEST_MODULE}",
                               "source": "PyPI source distribution" if not args.suite
                               else str(args.suite), "environment": environment(),
                               "doors": {}}
        for door in doors:
            report = Path(tmp) / f"{door}.xml"
            run_door(suite, door, report)
            cases = read_report(report)
            passed = sum(c["outcome"] == "passed" for c in cases)
            doc["doors"][door] = {"passed": passed, "total": len(cases),
                                  "areas": tally(cases), "cases": cases}
            log.info("door %s: %d of %d passed", door, passed, len(cases))
    for path in write_results(doc, args.out, markdown):
        log.info("wrote %s", path)
    sys.stdout.write(markdown(doc))
    return 0 if all(d["passed"] == d["total"] for d in doc["doors"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
