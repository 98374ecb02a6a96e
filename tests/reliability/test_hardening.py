"""The hardening probes of the reliability suite hold (and each one can fail: see its module)."""

from __future__ import annotations

from pathlib import Path

from evaluation.reliability_hardening import HardeningFigures, run_hardening


def test_every_hardening_probe_holds(tmp_path: Path) -> None:
    """All but the timing probe (tests/store/test_limits.py has that scenario)."""
    figures = run_hardening(tmp_path, slowdown=False)
    assert figures.failed == []
    assert figures.probes >= 14


def test_a_failed_probe_is_counted_and_named() -> None:
    figures = HardeningFigures()
    figures.check("holds", True)
    figures.check("breaks", False)
    assert figures.probes == 2 and figures.failed == ["breaks"]
