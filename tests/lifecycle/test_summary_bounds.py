"""A summary covers at most 500 events: a larger window is refused before any work, through
both doors, naming until_seq and the until_seq that fits; that window then summarises."""

from __future__ import annotations

from functools import partial

from dmf_hybrid import LimitExceeded, MemoryAPI
from dmf_hybrid._internal.lifecycle.summaries import MAX_SUMMARY_EVENTS
from tests.store import assert_unchanged, both_doors

mem = both_doors()


def test_a_window_too_large_is_refused_before_any_work(mem: MemoryAPI) -> None:
    mem.create_many("Poi", [{"name": f"Stall {i}", "city": "Shanghai"}
                            for i in range(MAX_SUMMARY_EVENTS + 20)])
    info = assert_unchanged(mem, partial(mem.summarize, "*"), LimitExceeded)
    err = info.value
    assert err.field == "until_seq"  # type: ignore[attr-defined]
    fits = err.details["until_seq"]  # type: ignore[attr-defined]
    assert f"until_seq={fits}" in err.message  # type: ignore[attr-defined]
    result = mem.summarize("*", until_seq=fits)
    assert result.event_count == MAX_SUMMARY_EVENTS and result.summary is not None
    assert mem.summarize("Poi", since_seq=fits).event_count == 20
