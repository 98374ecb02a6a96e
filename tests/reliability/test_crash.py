"""Crash consistency: SIGKILL the workload and the HTTP server; nothing acknowledged is lost.

A small version of ``make reliability`` (which injects 50 kills): 5 kills into the embedded
workload (random times, around DuckDB's COMMIT, around the Chroma upsert) and one into the
server; after each kill the next process checks every acknowledged write, the audit chain,
the outbox replay, reconcile and search (see ``evaluation.crash_worker.check_state``). And a
small version of ``evaluation.crash_wal`` (10 kills at 50 MB of WAL): 2 kills at 12 MB, each
restart committing first and then finding every acknowledged entity by ID, filter and search.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation import reliability
from evaluation.crash_check import check_state
from evaluation.crash_wal import check_reachable, run_large_wal_crashes
from evaluation.crash_worker import NOTE_TYPEDEF, TYPE_NAME
from evaluation.reliability_crash import kill_schedule, run_embedded_crashes, run_http_crashes


def test_embedded_workload_loses_nothing_across_kills(tmp_path: Path) -> None:
    kills = reliability.SMALL.kills
    figures = run_embedded_crashes(tmp_path, kills, seed=7, window=(0.2, 1.0),
                                   fresh_check=False)
    assert figures.problems == []
    assert figures.kills == kills
    assert figures.lost_writes == 0
    assert figures.acknowledged_writes > 0
    assert len(figures.reports) == kills  # one full check after every kill
    assert {"random", "before_commit", "after_commit"} <= set(figures.kill_points)
    for report in figures.reports:
        assert report["audit_ok"] and report["outbox_pending"] == 0
        assert not any(report["reconcile_second"][k] for k in ("missing", "stale", "orphan"))


def test_kills_with_a_large_wal_lose_nothing(tmp_path: Path) -> None:
    wal_mb = 12
    figures = run_large_wal_crashes(tmp_path, kills=2, wal_mb=wal_mb, seed=5)
    assert figures.problems == []
    assert (figures.kills, figures.lost_writes) == (2, 0)
    assert min(figures.wal_bytes_at_kill) >= wal_mb * 2**20
    checks = [r for r in figures.reports if "checked_by_id" in r]
    assert len(checks) == 2  # after each kill
    # how many live entities the WAL holds at the kill depends on the workload's pace (its
    # mix of creates, updates and deletes before the WAL reaches its size): about 100 to 150
    assert checks[-1]["checked_by_search"] > checks[0]["checked_by_search"] > 50
    assert all(r["unreachable_by_id"] == 0 and r["audit_ok"] for r in checks)


def test_http_server_loses_no_acknowledged_write(tmp_path: Path) -> None:
    figures = run_http_crashes(tmp_path, kills=reliability.SMALL.http_kills, seed=3)
    assert figures.problems == []
    assert figures.kills == reliability.SMALL.http_kills
    assert figures.acknowledged_writes > 0
    assert figures.lost_writes == 0


def test_kill_schedule_covers_every_point() -> None:
    import random

    points = {p for p, _ in kill_schedule(50, random.Random(0))}
    assert points == {"random", "before_commit", "after_commit", "before_vector_upsert",
                      "after_vector_upsert", "reindex", "snapshot"}


@pytest.fixture
def note_mem() -> Memory:
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    mem.define_type(NOTE_TYPEDEF)
    return mem


def _state(entity: object) -> dict[str, object]:
    return {"version": entity.version, "deleted": False,  # type: ignore[attr-defined]
            "data": entity.data.model_dump(mode="json")}  # type: ignore[attr-defined]


def test_the_check_finds_lost_phantom_and_half_applied_writes(note_mem: Memory,
                                                              tmp_path: Path) -> None:
    """The checker is not blind: each kind of damage it must see, it reports."""
    a = note_mem.create(TYPE_NAME, {"title": "a", "body": "x"})
    b = note_mem.create(TYPE_NAME, {"title": "b", "body": "y"})
    expect = {"entities": {a.id: _state(a), b.id: _state(b)}, "links": [],
              "acked": [[a.id, 1], [b.id, 1]], "in_flight": None, "snapshots": []}
    clean = check_state(note_mem, expect, tmp_path / "snaps")
    assert clean["problems"] == [] and clean["lost"] == []

    lost = json.loads(json.dumps(expect))
    lost["acked"].append([a.id, 2])
    lost["entities"][a.id]["version"] = 2
    report = check_state(note_mem, lost, tmp_path / "snaps")
    assert report["lost"] == [[a.id, 2]]

    phantom = json.loads(json.dumps(expect))
    del phantom["entities"][b.id]
    phantom["acked"] = [[a.id, 1]]
    assert any("phantom" in p for p in check_state(note_mem, phantom, tmp_path / "s")["problems"])

    # an in-flight call that created a and b together cannot have created only one of them
    half: dict[str, Any] = {"entities": {}, "links": [], "acked": [], "snapshots": [],
            "in_flight": {"op": "plan", "post": [
                {"id": a.id, "state": _state(a)},
                {"id": "Note_00000000000000000000", "state": _state(b)}], "links": []}}
    half["entities"][b.id] = _state(b)
    problems = check_state(note_mem, half, tmp_path / "s")["problems"]
    assert any("half-applied" in p for p in problems)


def test_the_exhaustive_check_finds_what_a_filter_or_search_misses(note_mem: Memory) -> None:
    a = note_mem.create(TYPE_NAME, {"title": "a", "body": "x"})
    actual: dict[str, Any] = {a.id: _state(a),
                              "Note_never_written000": {"version": 1, "deleted": False,
                                                        "data": {"title": "ghost"}}}
    problems: list[str] = []
    counts = check_reachable(note_mem, actual, problems)
    assert counts["checked_by_filter"] == counts["checked_by_search"] == 2
    assert problems == ["Note_never_written000: acknowledged, found by ID, not by filter",
                        "Note_never_written000: acknowledged, found by ID, not by search"]


def test_figures_json_has_exactly_the_issue_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    results = reliability.Results()
    results.crash.kills, results.crash.acknowledged_writes = 55, 1200
    results.isolation.probes = 500
    monkeypatch.setattr(reliability, "run_all", lambda *_a, **_k: results)
    out = tmp_path / "r.json"
    assert reliability.main(["--quick", "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert tuple(figures) == reliability.FIGURE_KEYS
    assert figures["kills"] == 55 and figures["lost_writes"] == 0
    printed = capsys.readouterr().out
    assert "writes lost" in printed and "isolation leaks" in printed


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_duckdb_fsyncs_the_wal_inside_commit() -> None:
    assert reliability.duckdb_fsyncs_wal() is True
