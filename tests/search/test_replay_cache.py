"""``as_of`` searches keep the states they rebuilt from the log (``search.replay``): a second
search at the same seq reads the kept state and answers exactly as the first, with or without
a filter, in every mode; an erase empties the kept states, so no erased text is ever served."""

from __future__ import annotations

import pytest

from dmf_hybrid import Memory

MODES = ("vector", "keyword", "hybrid")


@pytest.fixture
def history(mem: Memory) -> int:
    for i in range(30):
        mem.create("Poi", {"name": f"Museum {i}", "city": "Shanghai" if i % 2 else "Beijing",
                           "cost": i}, id=f"poi-{i}")
    seq = mem.last_seq()
    for i in range(0, 30, 3):
        mem.update(f"poi-{i}", {"name": f"Teahouse {i}", "cost": 100 + i})
    mem.delete("poi-1")
    return seq


def _hits(mem: Memory, seq: int, mode: str, **kw: object) -> list[tuple[str, float]]:
    result = mem.search("Poi", "museum in Shanghai", mode=mode, k=8, as_of=seq, **kw)
    return [(h.entity.id, round(h.score, 9)) for h in result.hits]


@pytest.mark.parametrize("mode", MODES)
def test_a_kept_state_answers_as_the_log_does(mem: Memory, history: int, mode: str) -> None:
    cache = mem.engine.replayed
    first = _hits(mem, history, mode)
    filtered = _hits(mem, history, mode, where={"city": "Shanghai"})
    hits_before = cache.hits
    assert _hits(mem, history, mode) == first
    assert _hits(mem, history, mode, where={"city": "Shanghai"}) == filtered
    assert cache.hits == hits_before + 2  # both answered from the kept state
    assert "poi-1" in [e for e, _ in first]  # deleted since: still there at that seq
    assert not any(e == "poi-0" for e, _ in filtered)  # a Beijing row
    cache.clear()
    assert _hits(mem, history, mode) == first  # rebuilt from the log: the same answer


def test_an_erase_empties_the_kept_states(mem: Memory, history: int) -> None:
    before = _hits(mem, history, "keyword")
    assert "poi-3" in [e for e, _ in before]
    mem.erase("poi-3", reason="asked to forget")
    assert len(mem.engine.replayed._states) == 0  # the erased text is not kept in memory
    after = _hits(mem, history, "keyword")
    assert "poi-3" not in [e for e, _ in after]
    (state,) = mem.engine.replayed._states.values()
    assert "poi-3" not in [row[0] for row in state.rows]


def test_states_are_bounded(mem: Memory, history: int) -> None:
    cache = mem.engine.replayed
    cache.clear()
    for seq in range(history - 6, history + 1):
        _hits(mem, seq, "keyword")
    assert len(cache._states) == cache.states
