"""Schemathesis against the service's own OpenAPI document: no 5xx, no schema violation."""

from __future__ import annotations

from pathlib import Path

from evaluation import reliability
from evaluation.reliability_fuzz import run_fuzz


def test_fuzzing_every_route_with_and_without_a_key(tmp_path: Path) -> None:
    figures = run_fuzz(tmp_path, examples=reliability.SMALL.fuzz_examples, seed=0)
    assert figures.operations >= 30  # every route of the document was fuzzed
    assert figures.cases >= 200
    assert figures.server_errors == 0
    assert figures.failures == {}
    assert figures.violations == 0
