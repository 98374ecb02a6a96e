"""Hostile values over HTTP get a clean 4xx and change nothing (tables, vectors, files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmf_hybrid._internal.api.errors import has_lone_surrogate
from evaluation.reliability_hostile import run_hostile
from evaluation.reliability_service import POI_TYPE, dump_state, open_memory, quick_state


def test_hostile_requests_are_refused_and_write_nothing(tmp_path: Path) -> None:
    figures = run_hostile(tmp_path)
    assert figures.server_errors == 0
    assert figures.accepted == []
    assert figures.state_changed == []
    assert figures.refused == figures.requests >= 80


@pytest.mark.parametrize(("body", "lone"), [
    (rb'{"a": "\ud800"}', True),
    (rb'{"a": "\udc00x"}', True),
    (rb'{"a": "\ud800\\udc00"}', True),  # the low half is escaped text, not an escape
    (rb'{"a": "\\\ud800"}', True),  # an escaped backslash, then a real escape
    (rb'{"a": "\ud83d\ude00"}', False),  # a valid pair
    (rb'{"a": "\\ud800"}', False),  # the text \ud800, not an escape
    (rb'{"a": "\u00e9 plain"}', False),
])
def test_lone_surrogate_escapes_are_found(body: bytes, lone: bool) -> None:
    assert has_lone_surrogate(body) is lone


def test_the_dump_sees_every_kind_of_write(tmp_path: Path) -> None:
    """The "nothing written" check is not blind to entities, events or files."""
    mem = open_memory(None)
    try:
        mem.define_type(POI_TYPE)
        first, quick = dump_state(mem, tmp_path), quick_state(mem, tmp_path)
        assert dump_state(mem, tmp_path) == first and quick_state(mem, tmp_path) == quick
        poi = mem.create("Poi", {"name": "a", "city": "b"})
        second, quick = dump_state(mem, tmp_path), quick_state(mem, tmp_path)
        assert second != first
        mem.update(poi.id, {"cost": 1.0})
        assert dump_state(mem, tmp_path) != second
        assert quick_state(mem, tmp_path) != quick
        quick = quick_state(mem, tmp_path)
        (tmp_path / "evil").write_text("x")
        assert dump_state(mem, tmp_path) != second
        assert quick_state(mem, tmp_path) != quick
    finally:
        mem.close()
