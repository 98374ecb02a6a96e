"""The audit log: one event per mutation, a verifiable chain, tamper detection, erasure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from dmf_hybrid import AuditEvent, AuditReport, Memory, NotFound
from dmf_hybrid._internal.ids import canonical_json, content_hash
from dmf_hybrid._internal.store.audit import GENESIS_HASH, event_hash, payload_hash_of
from tests.conftest import define_travel, tenant_like
from tests.store import audit_seqs, dump_rows, open_memory


def _one_event(mem: Memory, op: str, call: Callable[[], Any]) -> AuditEvent:
    seq = mem.last_seq()
    call()
    assert mem.last_seq() == seq + 1, f"{op} wrote {mem.last_seq() - seq} events"
    (event,) = mem.events(since_seq=seq)
    assert event.op == op and event.seq == seq + 1
    return event


def test_one_event_per_mutation(mem: Memory) -> None:
    class Note(BaseModel):
        text: str

    define = _one_event(mem, "define", lambda: mem.define(Note, identity=["text"]))
    assert (define.type, define.entity_id, define.version_after) == ("Note", None, 1)
    created: list[Any] = []
    create = _one_event(mem, "create", lambda: created.append(
        mem.create("Trip", {"destination": "Paris"}, actor="ana", reason="user asked",
                   trace_id="t-1")))
    tid = created[0].id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    assert (create.actor, create.reason, create.trace_id) == ("ana", "user asked", "t-1")
    assert (create.version_before, create.version_after, create.before) == (None, 1, None)
    assert create.after is not None and create.after["data"]["destination"] == "Paris"
    update = _one_event(mem, "update", lambda: mem.update(tid, {"budget": 5}, actor="bot"))
    assert update.before is not None and update.after is not None
    assert (update.before["data"]["budget"], update.after["data"]["budget"]) == (0, 5)
    assert (update.version_before, update.version_after, update.actor) == (1, 2, "bot")
    _one_event(mem, "append", lambda: mem.append(tid, "tags", ["art"]))
    _one_event(mem, "link", lambda: mem.link(tid, "includes", poi))
    _one_event(mem, "unlink", lambda: mem.unlink(tid, "includes", poi))
    delete = _one_event(mem, "delete", lambda: mem.delete(tid))
    assert delete.after is not None and delete.after["deleted_at"] is not None
    _one_event(mem, "restore", lambda: mem.restore(tid))
    erase = _one_event(mem, "erase", lambda: mem.erase(tid, reason="GDPR request"))
    assert (erase.before, erase.after, erase.reason) == (None, None, "GDPR request")
    assert audit_seqs(mem) == list(range(1, mem.last_seq() + 1))
    # timestamps are UTC and never go backwards
    events = mem.events()
    assert all(e.ts.tzinfo is not None and e.ts.utcoffset() == dt.timedelta(0) for e in events)
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    report = mem.verify_audit()
    assert report.ok and report.events_checked == mem.last_seq()
    assert report.last_hash == events[-1].hash


def test_the_chain_is_what_the_docs_say(mem: Memory) -> None:
    mem.create("Trip", {"destination": "Paris"})
    events = mem.events()
    prev = GENESIS_HASH
    for event in events:
        assert event.prev_hash == prev
        assert event.payload_hash == content_hash({"before": event.before,
                                                   "after": event.after})
        header = {
            "seq": event.seq, "ts": event.ts.replace(tzinfo=None).isoformat(),
            "tenant": event.tenant, "actor": event.actor, "reason": event.reason,
            "trace_id": event.trace_id, "op": event.op, "type": event.type,
            "entity_id": event.entity_id, "version_before": event.version_before,
            "version_after": event.version_after, "meta": event.meta,
            "payload_hash": event.payload_hash,
        }
        assert event.hash == event_hash(prev, header)
        prev = event.hash


def test_failed_operations_write_no_event(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"})
    seq = mem.last_seq()
    for call in (lambda: mem.update(trip.id, {"budget": "x"}),
                 lambda: mem.update(trip.id, {"budget": 1}, expected_version=7),
                 lambda: mem.restore(trip.id),
                 lambda: mem.link(trip.id, "includes", trip.id)):
        with pytest.raises(Exception):  # noqa: B017 - any of the typed errors
            call()
    assert mem.last_seq() == seq and audit_seqs(mem) == list(range(1, seq + 1))


def test_history_and_events(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    mem.update(trip, {"budget": 1})
    mem.link(trip, "includes", poi)
    assert [e.op for e in mem.history(trip)] == ["create", "update", "link"]
    assert [e.op for e in mem.history(poi)] == ["create", "link"]
    with pytest.raises(NotFound):
        mem.history("Trip_00000000000000000000")
    last = mem.last_seq()
    assert [e.seq for e in mem.events(since_seq=last - 2)] == [last - 1, last]
    assert [e.seq for e in mem.events(since_seq=0, until_seq=2)] == [1, 2]
    assert len(mem.events(limit=1)) == 1
    other = tenant_like(mem, "other")
    other.create("Trip", {"destination": "Far away"}, id="other-trip")
    assert all(e.tenant == "default" for e in mem.events())
    assert [e.op for e in other.events()] == ["define", "define", "create"]  # its own types
    with pytest.raises(NotFound):
        mem.history("other-trip")  # another tenant's entity is not visible


# ---------------------------------------------------------------- tampering


def _write_log(mem: Memory) -> Memory:
    """Ten events after the two defines."""
    trip = mem.create("Trip", {"destination": "Paris"}).id
    for i in range(1, 8):
        mem.update(trip, {"budget": float(i)})
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    mem.link(trip, "includes", poi)
    assert mem.last_seq() == 12 and mem.verify_audit().ok
    return mem


@pytest.fixture
def logged(mem: Memory) -> Memory:
    """A memory of its own with ten events after the two defines (tampered for good)."""
    return _write_log(mem)


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """One logged memory for the tamper cases that are rolled back after verifying."""
    mem = open_memory(Path(tmp_path_factory.mktemp("audit")) / "mem")
    define_travel(mem)
    yield _write_log(mem)
    mem.close()


def _raw(mem: Memory, sql: str, params: list[Any] | None = None) -> None:
    with mem._store.db.write() as con:
        con.execute(sql, params or [])


class _Undo(Exception):
    """Rolls the tampering back once verify_audit has seen it."""


def _verify_tampered(mem: Memory, sql: str) -> AuditReport:
    """What verify_audit reports while ``sql`` has tampered with the log (then undone)."""
    reports: list[AuditReport] = []
    with pytest.raises(_Undo):
        with mem._store.db.write() as con:  # the raw writer connection, no store API
            con.execute(sql)
            reports.append(mem.verify_audit())
            raise _Undo
    assert mem.verify_audit().ok, "the tampering was not undone"
    return reports[0]


@pytest.mark.parametrize(("sql", "bad_seq", "problem"), [
    ("UPDATE events SET actor = 'mallory' WHERE seq = 6", 6, "hash does not match"),
    ("UPDATE events SET reason = 'edited' WHERE seq = 3", 3, "hash does not match"),
    ("UPDATE events SET ts = ts + INTERVAL 1 SECOND WHERE seq = 9", 9, "hash does not match"),
    ("UPDATE events SET op = 'delete' WHERE seq = 4", 4, "hash does not match"),
    ("UPDATE events SET version_after = 99 WHERE seq = 5", 5, "hash does not match"),
    ("UPDATE events SET after = replace(after, '\"budget\":4.0', '\"budget\":400.0') "
     "WHERE seq = 7", 7, "payload_hash"),
    ("UPDATE events SET before = NULL, after = NULL, redacted = TRUE WHERE seq = 8", 8,
     "never erased"),
    ("UPDATE events SET payload_hash = repeat('0', 64) WHERE seq = 10", 10, "payload_hash"),
    ("UPDATE events SET hash = repeat('a', 64) WHERE seq = 11", 11, "hash does not match"),
    ("UPDATE events SET prev_hash = repeat('b', 64) WHERE seq = 2", 2, "prev_hash"),
    ("UPDATE events SET meta = NULL WHERE seq = 12", 12, "hash does not match"),
    ("DELETE FROM events WHERE seq = 5", 5, "missing"),
    ("DELETE FROM events WHERE seq = 1", 1, "missing"),
    ("UPDATE events SET seq = seq + 100 WHERE seq >= 7", 7, "missing"),
])
def test_verify_detects_tampering_and_names_the_first_bad_seq(
        shared_log: Memory, sql: str, bad_seq: int, problem: str) -> None:
    report = _verify_tampered(shared_log, sql)
    assert not report.ok
    assert report.first_bad_seq == bad_seq, report
    assert problem in (report.problem or "")
    assert report.events_checked == bad_seq - 1


def test_verify_detects_reordered_events(logged: Memory) -> None:
    # swap events 5 and 6 (their rows keep their own content; only the order changes)
    _raw(logged, "UPDATE events SET seq = -5 WHERE seq = 5")
    _raw(logged, "UPDATE events SET seq = 5 WHERE seq = 6")
    _raw(logged, "UPDATE events SET seq = 6 WHERE seq = -5")
    report = logged.verify_audit()
    assert not report.ok and report.first_bad_seq == 5


def test_verify_detects_a_rewritten_tail_without_the_chain(logged: Memory) -> None:
    """Recomputing one event's own hash is not enough: the next event's prev_hash breaks."""
    event = logged.events(since_seq=5, until_seq=6)[0]
    header = {
        "seq": event.seq, "ts": event.ts.replace(tzinfo=None).isoformat(),
        "tenant": event.tenant, "actor": "mallory", "reason": event.reason,
        "trace_id": event.trace_id, "op": event.op, "type": event.type,
        "entity_id": event.entity_id, "version_before": event.version_before,
        "version_after": event.version_after, "meta": event.meta,
        "payload_hash": event.payload_hash,
    }
    _raw(logged, "UPDATE events SET actor = 'mallory', hash = ? WHERE seq = 6",
         [event_hash(event.prev_hash, header)])
    report = logged.verify_audit()
    assert not report.ok and report.first_bad_seq == 7
    assert "prev_hash" in (report.problem or "")


# ---------------------------------------------------------------- erasure


SECRET = "Secret Street 42"


def test_erasure_removes_content_everywhere_and_keeps_the_chain(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": SECRET, "tags": [SECRET]}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    mem.update(trip, {"budget": 12})
    mem.link(trip, "includes", poi)
    mem.delete(trip)
    mem.restore(trip)
    before_erase = mem.last_seq()
    assert SECRET in repr(dump_rows(mem))
    seq = mem.erase(trip, actor="dpo", reason="right to be forgotten")
    assert seq == mem.last_seq()
    assert SECRET not in repr(dump_rows(mem)), "erased content is still stored"
    report = mem.verify_audit()
    assert report.ok and report.events_checked == mem.last_seq()
    with pytest.raises(NotFound, match=f"erased at seq {seq}"):
        mem.get(trip)
    for at in range(0, before_erase + 1):
        with pytest.raises(NotFound):
            mem.get(trip, as_of=at)
    with pytest.raises(NotFound, match="erased"):
        mem.get(trip, as_of=before_erase)
    assert mem.query("Trip", as_of=before_erase).items == []
    assert mem.related(poi, direction="in") == []
    history = mem.history(trip)
    assert [e.op for e in history] == ["create", "update", "link", "delete", "restore",
                                       "erase"]
    assert all(e.redacted and e.before is None and e.after is None
               for e in history if e.op in ("create", "update", "delete", "restore"))
    # an erased ID cannot be reused and cannot be erased twice
    from dmf_hybrid import Conflict

    with pytest.raises(Conflict):
        mem.create("Trip", {"destination": SECRET, "tags": [SECRET]})
    with pytest.raises(NotFound):
        mem.erase(trip)
    # other entities are untouched
    assert mem.get(poi).version == 1


def test_verify_detects_a_truncated_tail_while_open(shared_log: Memory) -> None:
    report = _verify_tampered(shared_log, "DELETE FROM events WHERE seq >= 11")
    assert not report.ok and report.first_bad_seq == 11
    assert "removed" in (report.problem or "")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@given(before=st.none() | st.dictionaries(st.text(), _JSON, max_size=5),
       after=st.none() | st.dictionaries(st.text(), _JSON, max_size=5))
def test_the_spliced_payload_hash_is_the_hash_of_the_pair(before: Any, after: Any) -> None:
    spliced = payload_hash_of(None if before is None else canonical_json(before),
                              None if after is None else canonical_json(after))
    assert spliced == content_hash({"before": before, "after": after})
