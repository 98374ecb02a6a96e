"""Probes of what a hostile client once found, beyond refusing bad input (that part is in
:mod:`evaluation.reliability_hostile`): each probe checks a promise and counts as failed when
the promise does not hold.

- a write with a name ending in a newline is refused and never commits (before, it committed
  and the response died building its ``Location`` header);
- the audit event records the key that authenticated, whatever ``X-Actor`` claims;
- keys below admin see their own tenant's audit head and verify report, never store-wide
  counts (the chain is still checked store-wide and a break is still reported);
- a cursor is opaque, deterministic, and refused when changed or made by another store;
- a data directory copied with its archives verifies once the original is gone;
- one tenant's largest allowed value leaves another tenant's updates within 2x of a store
  without it (the ratio of medians measured in turns, both stores in the same run).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dmf_hybrid._internal.checks import MAX_VALUE_BYTES
from dmf_hybrid._internal.errors import FilterError, LimitExceeded
from evaluation.reliability_service import POI_TYPE, open_memory, seed_travel, service

SLOWDOWN_ROWS = 3000
SLOWDOWN_ROUNDS = 40


@dataclass
class HardeningFigures:
    """What the probes found: how many ran, which failed, the measured slowdown ratio."""

    probes: int = 0
    failed: list[str] = field(default_factory=list)
    slowdown_ratio: float | None = None

    def check(self, name: str, ok: bool) -> None:
        """Count one probe; remember it when its promise does not hold."""
        self.probes += 1
        if not ok:
            self.failed.append(name)


def _label(key: str) -> str:
    return f"key:{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def _http(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"})


def probe_service(workdir: Path, figures: HardeningFigures) -> None:
    """The probes over HTTP: newline IDs, the audit principal, per-tenant head and verify."""
    keys = "hw-acme:default:writer,hw-acme-2:default:writer,hr-acme:default:reader," \
           "hw-other:other:writer,h-admin:default:admin"
    with service(workdir, keys, seed=seed_travel) as (base, mem):
        mem.for_tenant("other").define_type(POI_TYPE)
        with _http(base, "hw-acme") as c:
            seq = mem.last_seq()
            try:
                response = c.post("/entities/Poi", json={"id": "nl\n", "data": {
                    "name": "nl", "city": "c"}})
                answered = response.status_code == 422
            except httpx.HTTPError:  # a dropped connection: the old failure
                answered = False
            figures.check("newline id refused with an answer", answered)
            figures.check("newline id not committed", mem.last_seq() == seq)
            for actor in (_label("hw-acme-2"), "admin", "h-admin"):
                created = c.post("/entities/Poi", json={"data": {"name": f"by {actor}",
                                                                 "city": "c"}},
                                 headers={"X-Actor": actor}).json()
                event = mem.history(created["id"])[-1]
                figures.check(f"principal not forged by X-Actor {actor!r}",
                              event.principal == _label("hw-acme") and event.actor == actor)
        with _http(base, "hw-other") as other:
            for i in range(3):
                other.post("/entities/Poi", json={"data": {"name": f"o{i}", "city": "x"}})
        own = mem.events()  # the default tenant's events
        with _http(base, "hr-acme") as reader, _http(base, "h-admin") as admin:
            head = reader.get("/audit/head").json()
            figures.check("reader head is its tenant's", head.get("last_seq") == own[-1].seq
                          and head.get("scope") == "tenant")
            report = reader.get("/audit/verify").json()
            figures.check("reader verify counts its tenant's events",
                          report.get("ok") is True and report.get("events_checked") == len(own))
            full = admin.get("/audit/verify").json()
            figures.check("admin verify checks every tenant's chain", full.get("scope") ==
                          "store" and full.get("chains") == 2 and full.get("ok") is True)
            theirs = mem.for_tenant("other").last_seq()
            tamper = "UPDATE events SET reason = ? WHERE tenant = 'other' AND seq = ?"
            with mem._store.db.write() as con:  # noqa: SLF001 - break another tenant's event
                con.execute(tamper, ["x", theirs])
            mine = reader.get("/audit/verify").json()
            figures.check("reader verify is its tenant's chain, which holds",
                          mine.get("ok") is True and mine.get("scope") == "tenant")
            broken = admin.get("/audit/verify").json()
            figures.check("admin verify names the tenant of a break",
                          broken.get("ok") is False and broken.get("tenant") == "other"
                          and broken.get("first_bad_seq") == theirs)
            with mem._store.db.write() as con:  # noqa: SLF001 - and mend it
                con.execute(tamper, [None, theirs])


def probe_cursors(workdir: Path, figures: HardeningFigures) -> None:
    """Cursors: no readable row values, deterministic, refused when forged or foreign."""
    mems = [open_memory(workdir / name) for name in ("a", "b")]
    try:
        for m in mems:
            m.define_type(POI_TYPE)
            m.create_many("Poi", [{"name": f"secret-{i}", "city": "c"} for i in range(5)])
        first, second = (m.query("Poi", order_by="name", limit=2).next_cursor for m in mems)
        raw = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4))
        figures.check("cursor carries no readable value", b"secret" not in raw)
        figures.check("cursor deterministic",
                      mems[0].query("Poi", order_by="name", limit=2).next_cursor == first)
        changed = bytearray(raw)
        changed[len(changed) // 2] ^= 1
        forged = base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        for name, cursor in (("changed", forged), ("another store's", second)):
            try:
                mems[0].query("Poi", order_by="name", cursor=cursor)
                refused = False
            except FilterError:
                refused = True
            figures.check(f"{name} cursor refused", refused)
    finally:
        for m in mems:
            m.close()


def probe_archive_copy(workdir: Path, figures: HardeningFigures) -> None:
    """A data directory copied with its archives verifies and reads without the original."""
    original, copy = workdir / "original", workdir / "copy"
    m = open_memory(original)
    try:
        m.define_type(POI_TYPE)
        for i in range(20):
            m.create("Poi", {"name": f"p{i}", "city": "c"})
        m.archive_events(10, original / "archives" / "old")
        m.archive_events(18, original / "archives" / "old")
        before = [e.seq for e in m.events()]
    finally:
        m.close()
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    m = open_memory(copy)
    try:
        figures.check("copied directory verifies", m.verify_audit().ok)
        figures.check("copied directory reads its archives", [e.seq for e in m.events()]
                      == before)
    finally:
        m.close()


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def probe_slowdown(workdir: Path, figures: HardeningFigures) -> None:
    """One tenant's huge value is refused; its largest allowed one does not slow another
    tenant's updates past 2x (medians of updates made in turns on two stores)."""
    stores = []
    for name, value in (("baseline", None), ("large", "y" * MAX_VALUE_BYTES)):
        m = open_memory(workdir / name)
        mallory, alice = m.for_tenant("mallory"), m.for_tenant("alice")
        for view in (mallory, alice):  # each tenant owns its types
            view.define_type(POI_TYPE)
        if value is not None:
            try:
                mallory.create("Poi", {"name": "x" * 1_900_000, "city": "c"})
                figures.check("1.9 MB value refused", False)
            except LimitExceeded:
                figures.check("1.9 MB value refused", True)
            mallory.create("Poi", {"name": value, "city": "c"})
        ids = [e.id for e in alice.create_many(
            "Poi", [{"name": f"p{i}", "city": "c"} for i in range(SLOWDOWN_ROWS)])]
        stores.append((m, alice, ids))
    try:
        times: list[list[float]] = [[], []]
        for i in range(SLOWDOWN_ROUNDS + 5):
            for j, (_, alice, ids) in enumerate(stores):
                eid = ids[(i * 61) % len(ids)]
                seconds = _timed(lambda a=alice, e=eid, n=i: a.update(e, {"tags": [f"t{n}"]}))
                if i >= 5:
                    times[j].append(seconds)
        ratio = statistics.median(times[1]) / statistics.median(times[0])
        figures.slowdown_ratio = round(ratio, 2)
        figures.check("updates within 2x behind the largest value", ratio <= 2)
    finally:
        for m, _, _ in stores:
            m.close()


def run_hardening(workdir: Path, slowdown: bool = True) -> HardeningFigures:
    """Every probe, each under its own directory of ``workdir`` (``slowdown=False`` leaves out
    the timing probe, which tests/store/test_limits.py runs in the test suite)."""
    figures = HardeningFigures()
    probes: list[tuple[str, Callable[[Path, HardeningFigures], None]]] = [
        ("service", probe_service), ("cursors", probe_cursors),
        ("archive", probe_archive_copy)]
    if slowdown:
        probes.append(("slowdown", probe_slowdown))
    for name, probe in probes:
        (workdir / name).mkdir(parents=True, exist_ok=True)
        probe(workdir / name, figures)
    return figures
