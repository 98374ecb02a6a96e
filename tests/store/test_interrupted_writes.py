"""A write interrupted anywhere (Ctrl-C: a signal whose handler raises while the write runs)
leaves the store as if it had committed or had never begun: the audit chains verify, the next
write takes the next seq, and every acknowledged write is found by ID, by filter and by search.

DuckDB stops a statement running when the handler raises ("Query interrupted"); a handler can
also raise between statements, or after a COMMIT went through and before Python heard of it.
What this process holds (each tenant's head, the mirrors) must then be what the database
holds: a head left on a seq no committed event has made every later event chain after it,
and ``verify`` failed for good."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dmf_hybrid import Memory
from dmf_hybrid._internal.store import audit
from tests.store import audit_seqs

#: What Ctrl-C raises, and the test's signal handler too.
Interrupt = KeyboardInterrupt


def _rows(start: int, count: int) -> list[dict[str, Any]]:
    return [{"name": f"poi{i} 外滩{i} stop{i}", "city": "上海" if i % 2 else "Paris"}
            for i in range(start, start + count)]


def _text(poi: Any) -> str:
    """What the travel Poi embeds (a search for it finds that very vector)."""
    return f"{poi.name} in {poi.city}"


def _assert_whole(mem: Memory, acknowledged: dict[str, str]) -> None:
    """The chains verify, the next write takes the next seq, and each acknowledged write
    (ID: its embedded text) is found by ID, by filter and by search."""
    report = mem.verify_audit()
    assert report.ok, report
    seq = mem.last_seq()
    extra = mem.create("Poi", {"name": "after the interruptions", "city": "Lyon"})
    assert mem.last_seq() == seq + 1
    assert audit_seqs(mem) == list(range(1, seq + 2))
    assert mem.verify_audit().ok
    acknowledged = {**acknowledged, extra.id: _text(extra.data)}
    for eid, text in acknowledged.items():
        assert _text(mem.get(eid).data) == text
    listed: set[str] = set()
    cursor = None
    while True:
        page = mem.query("Poi", {"city": {"$in": ["上海", "Paris", "Lyon"]}}, limit=500,
                         cursor=cursor)
        listed.update(e.id for e in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert set(acknowledged) <= listed
    for eid, text in acknowledged.items():
        # its own text's vector scores highest (the test embedder's 64 hashed dimensions
        # give a few texts the same vector: those tie with it)
        hits = mem.search("Poi", text, k=10, mode="vector").hits
        assert eid in [h.entity.id for h in hits if h.score >= hits[0].score - 1e-6], text


@pytest.fixture
def alarm() -> Iterator[None]:
    """SIGALRM raises :class:`Interrupt` in the main thread while the test runs."""
    def interrupt(_signum: int, _frame: object) -> None:
        raise Interrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_writes_interrupted_at_every_moment_lose_nothing_acknowledged(
        memory: Memory, alarm: None) -> None:
    """On the embedded engine, where Ctrl-C reaches the store's own code (a PostgreSQL store
    is served by processes that stop on signals between requests; the interruptions that
    matter there, at a statement or a commit, are the deterministic tests below, on both)."""
    mem = memory
    # a first write uninterrupted (what a process imports on its first write, pyarrow, is
    # not this test's subject), then a round timed: the interruptions are spread over it
    first = mem.create_many("Poi", _rows(0, 20))
    started = time.perf_counter()
    first += [e for chunk in (_rows(20, 20), _rows(40, 20))
              for e in mem.create_many("Poi", chunk)]
    round_s = time.perf_counter() - started
    acknowledged = {e.id: _text(e.data) for e in first}
    inside = 0  # interruptions that came while a round wrote
    at = 60
    trials = 60
    for trial in range(trials):
        rows = _rows(at, 40)
        at += 40
        # the interruption comes ever later, from the start of a round to past its end, so
        # it lands in every part of a write (request checks, the events' insert, the commit,
        # the hooks after it) in one run or another, on a fast machine or a slow one
        signal.setitimer(signal.ITIMER_REAL, 0.0005 + 1.5 * round_s * trial / trials)
        writing = True
        try:
            for chunk in (rows[:20], rows[20:]):
                done = mem.create_many("Poi", chunk)
                acknowledged.update((e.id, _text(e.data)) for e in done)
            writing = False
            time.sleep(round_s + 0.05)  # the alarm goes off outside the writes
        except (Interrupt, Exception):  # DuckDB reports a statement it stopped as an error
            inside += writing
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    assert inside >= 10, inside
    _assert_whole(mem, acknowledged)


def test_a_failure_after_the_events_are_written_moves_no_head_on(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = mem.create("Poi", {"name": "kept", "city": "Paris"})
    seq = mem.last_seq()
    real = audit.insert_events

    def interrupted(con: Any, rows: Any) -> None:
        real(con, rows)
        raise Interrupt

    monkeypatch.setattr(audit, "insert_events", interrupted)
    with pytest.raises(Interrupt):
        mem.create_many("Poi", _rows(0, 5))
    monkeypatch.setattr(audit, "insert_events", real)
    assert mem.last_seq() == seq
    _assert_whole(mem, {kept.id: _text(kept.data)})


class _Writer:
    """The store's writer connection, with an interruption just before or just after the
    COMMIT runs (as a signal's handler raises at either moment)."""

    def __init__(self, con: Any, after: bool) -> None:
        self.con, self.after, self.armed = con, after, True

    def execute(self, query: str, *args: Any) -> Any:
        if query == "COMMIT" and self.armed:
            self.armed = False
            if self.after:
                self.con.execute(query, *args)
            raise Interrupt
        return self.con.execute(query, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_commit_interrupted_counts_as_what_the_database_did(mem: Memory, after: bool) -> None:
    kept = mem.create("Poi", {"name": "kept", "city": "Paris"})
    seq = mem.last_seq()
    db = mem._store.db
    real = db._writer
    db._writer = _Writer(real, after)
    try:
        with pytest.raises(Interrupt):
            mem.create("Poi", {"name": "the interrupted one", "city": "上海"})
    finally:
        db._writer = real
    found = mem.query("Poi", {"name": "the interrupted one"}).items
    acknowledged = {kept.id: _text(kept.data)}
    if after:  # in the database: the process holds it too (its head, the mirrors)
        assert mem.last_seq() == seq + 1 and len(found) == 1
        acknowledged[found[0].id] = _text(found[0].data)
    else:
        assert mem.last_seq() == seq and found == []
    _assert_whole(mem, acknowledged)


def _interrupt() -> None:
    raise Interrupt


def test_an_interruption_inside_a_rollback_hook_leaves_the_others_to_run(mem: Memory) -> None:
    kept = mem.create("Poi", {"name": "kept", "city": "Paris"})
    seq = mem.last_seq()
    with pytest.raises(Interrupt):
        with mem.transaction():
            mem.create("Poi", {"name": "rolled back", "city": "上海"})
            mem._store.db.on_rollback(_interrupt)  # the newest: it runs first
            raise ValueError("a step failed")
    assert mem.last_seq() == seq
    assert mem.query("Poi", {"name": "rolled back"}).items == []
    _assert_whole(mem, {kept.id: _text(kept.data)})


def test_an_interruption_inside_a_commit_hook_leaves_the_others_to_run(mem: Memory) -> None:
    kept = mem.create("Poi", {"name": "kept", "city": "Paris"})
    seq = mem.last_seq()
    with pytest.raises(Interrupt):
        with mem.transaction():
            mem._store.db.after_commit(_interrupt)  # the first: it runs first
            mem.create("Poi", {"name": "committed", "city": "上海"})
    assert mem.last_seq() == seq + 1
    found = mem.query("Poi", {"name": "committed"}).items
    assert len(found) == 1  # and the mirrors heard of it: the search below finds it
    _assert_whole(mem, {kept.id: _text(kept.data), found[0].id: _text(found[0].data)})
