"""The checks after a crash: what the reopened memory holds against what was acknowledged.

:func:`check_state` is what :mod:`evaluation.crash_worker` runs first thing after each kill (in
the next worker, before it writes anything); the harness reads its report.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from evaluation.crash_worker import ENTITY_OPS, TYPE_NAME, WORDS, Link, State, digested


def entity_state(mem: Any, eid: str) -> State | None:
    """The entity's state as DuckDB has it (deleted ones from their last audit event)."""
    from dmf_hybrid._internal.errors import NotFound

    try:
        entity = mem.get(eid)
        return {"version": entity.version, "deleted": False,
                "data": digested(entity.data.model_dump(mode="json"))}
    except NotFound:
        pass
    try:
        events = [e for e in mem.history(eid) if e.op in ENTITY_OPS and e.entity_id == eid]
    except NotFound:
        return None
    if not events or events[-1].after is None:
        return None
    last = events[-1]
    return {"version": last.version_after, "deleted": last.after.get("deleted_at") is not None,
            "data": digested(last.after["data"])}


def db_rows(mem: Any) -> dict[str, tuple[int, bool]]:
    """Every row of the Note table: {id: (version, deleted)}."""
    rows = mem._store.db.fetchall(  # noqa: SLF001 - the harness reads the tables directly
        f'SELECT id, version, deleted_at IS NOT NULL FROM "ent_{TYPE_NAME}" ORDER BY id')
    return {r[0]: (int(r[1]), bool(r[2])) for r in rows}


def db_links(mem: Any) -> set[Link]:
    """The active links in the relations table."""
    rows = mem._store.db.fetchall(  # noqa: SLF001
        "SELECT from_id, relation, to_id FROM relations WHERE deleted_seq IS NULL")
    return {(r[0], r[1], r[2]) for r in rows}


def read_view(mem: Any) -> tuple[dict[str, State], set[Link]]:
    """The whole state: every entity (deleted ones too) and every active link."""
    view = {}
    for eid in db_rows(mem):
        state = entity_state(mem, eid)
        if state is not None:
            view[eid] = state
    return view, db_links(mem)


# ---------------------------------------------------------------------------- checks


def _same(a: State | None, b: State | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(a["version"] == b["version"] and a["deleted"] == b["deleted"]
                and digested(a["data"]) == digested(b["data"]))


def check_state(mem: Any, expect: dict[str, Any], snapshot_root: Path,
                exhaustive: bool = False) -> dict[str, Any]:
    """Compare what the reopened memory holds with what was acknowledged before the kill.

    ``expect`` = ``{"entities": {id: state}, "links": [[from, rel, to]], "acked": [[id,
    version]], "in_flight": {"op", "post", "links"} | None, "snapshots": [names]}``. The
    report counts acknowledged writes that are missing or older (``lost``) and lists every
    other problem: an entity not in the acknowledged state (except the one call in flight,
    which must be applied entirely or not at all), a phantom entity or link, an audit chain
    that does not verify, outbox rows left after the replay, drift on a second reconcile, a
    search hit that is deleted or stale, a snapshot that is neither complete nor refused,
    an entity a filter finds but a lookup by ID does not. ``exhaustive`` also finds every
    acknowledged live entity by filter and by search (``crash_wal.check_reachable``).
    """
    problems: list[str] = []
    expected: dict[str, State] = expect.get("entities", {})
    in_flight = expect.get("in_flight") or {}
    post = {p["id"]: p["state"] for p in in_flight.get("post", [])}
    flight_links = {tuple(x[:3]): bool(x[3]) for x in in_flight.get("links", [])}
    report: dict[str, Any] = {"ev": "check"}

    report["outbox_pending"] = mem.engine.indexer.pending()
    if report["outbox_pending"]:
        problems.append(f"{report['outbox_pending']} outbox rows pending after the replay")

    # acknowledged writes: present with at least their version
    actual = {eid: entity_state(mem, eid) for eid in sorted(set(expected) | set(post))}
    lost = []
    for eid, version in expect.get("acked", []):
        state = actual.get(eid)
        if state is None or state["version"] < version:
            lost.append([eid, version])
    report["acked"] = len(expect.get("acked", []))
    report["lost"] = lost

    # the exact state: the last acknowledged one, or the in-flight call's result
    applied = []
    for eid, state in actual.items():
        want = expected.get(eid)
        if eid in post:
            if _same(state, post[eid]):
                applied.append(True)
                continue
            if _same(state, want):
                applied.append(False)
                continue
            problems.append(f"{eid}: {state} is neither the acknowledged {want} nor the "
                            f"in-flight {post[eid]}")
        elif not _same(state, want):
            problems.append(f"{eid}: found {state}, acknowledged {want}")
    rows = db_rows(mem)
    for eid in sorted(set(rows) - set(expected) - set(post)):
        problems.append(f"{eid}: a row nobody acknowledged or attempted (phantom)")
    links = db_links(mem)
    want_links = {tuple(x) for x in expect.get("links", [])}
    for link in sorted(links | want_links | set(flight_links)):
        now = link in links
        if link in flight_links:
            if flight_links[link] != (link in want_links):  # the call would change it
                applied.append(now == flight_links[link])
            continue
        if now and link not in want_links:
            problems.append(f"link {link}: present but never acknowledged (phantom)")
        elif not now and link in want_links:
            lost.append(list(link))
            problems.append(f"link {link}: acknowledged but missing")
    if applied and len(set(applied)) > 1:
        problems.append(f"the in-flight {in_flight.get('op')} is half-applied: {applied}")
    from dmf_hybrid._internal.ids import entity_id

    for eid, state in actual.items():  # derived IDs are stable across processes and seeds
        if state is not None and "_" in eid and eid != entity_id(
                TYPE_NAME, {"title": state["data"]["title"]}):
            problems.append(f"{eid}: the ID derived from its title differs in this process")
    report["in_flight_applied"] = bool(applied) and all(applied)

    # the audit log agrees with the tables and verifies
    audit = mem.verify_audit()
    report["audit_ok"] = audit.ok
    report["unreachable_by_id"] = audit.unreachable_by_id
    if not audit.ok:
        problems.append(f"audit chain: {audit.problem} at seq {audit.first_bad_seq}")
    mismatch = mem._store.db.fetchall(  # noqa: SLF001
        f'SELECT t.id, t.version, e.version_after FROM "ent_{TYPE_NAME}" t JOIN ('
        "SELECT tenant, entity_id, arg_max(version_after, seq) AS version_after FROM events "
        f"WHERE op IN {ENTITY_OPS!r} GROUP BY tenant, entity_id) e ON e.entity_id = t.id "
        "AND e.tenant = t.tenant "
        "WHERE t.version <> e.version_after")
    for eid, version, logged in mismatch:
        problems.append(f"{eid}: table version {version}, audit log version {logged}")

    # the vector index converges: a second reconcile finds nothing
    first = mem.reconcile()
    second = mem.reconcile()
    report["reconcile_first"] = first.model_dump()
    report["reconcile_second"] = second.model_dump()
    drift = sum(getattr(second, k) for k in ("missing", "stale", "orphan", "unreachable_by_id"))
    if drift:
        problems.append(f"reconcile still finds drift on the second call: {second}")
    if first.unreachable_by_id:
        problems.append(f"{first.unreachable_by_id} entities were reachable by filter but "
                        "not by ID")
    records = mem.engine.vectors.records(mem.engine.indexer.collection(TYPE_NAME))
    live = {eid: v for eid, (v, deleted) in rows.items() if not deleted}
    for eid in sorted(set(records) ^ set(live)):
        problems.append(f"vector index and DuckDB disagree about {eid}")
    for eid, meta in records.items():
        if eid in live and meta.get("version") != live[eid]:
            problems.append(f"{eid}: vector of version {meta.get('version')}, row {live[eid]}")

    report.update(check_search(mem, rows, problems))
    if exhaustive:
        from evaluation.crash_wal import check_reachable

        report.update(check_reachable(mem, actual, problems))
    report.update(check_snapshots(expect, snapshot_root, problems))
    report["problems"] = problems
    return report


def check_search(mem: Any, rows: dict[str, tuple[int, bool]], problems: list[str]
                 ) -> dict[str, Any]:
    """Search for deleted and overwritten texts in every mode: hits must be live and current."""
    texts = [" ".join(WORDS[:3]), "note", "deleted"]
    for eid, (_version, deleted) in sorted(rows.items())[:40]:
        try:
            events = [e for e in mem.history(eid) if e.op in ENTITY_OPS and e.after]
        except Exception:  # noqa: BLE001 - erased or unknown: nothing to search for
            continue
        if deleted or len(events) > 1:
            data = events[0].after["data"]
            texts.append(f"{data.get('title')} {str(data.get('body'))[:200]}")
    checked = 0
    for text in texts[:30]:
        for mode in ("vector", "keyword", "hybrid"):
            result = mem.search(TYPE_NAME, text, k=10, mode=mode)
            for hit in result.hits:
                checked += 1
                row = rows.get(hit.entity.id)
                if row is None or row[1]:
                    problems.append(f"search {mode} {text!r} returned deleted {hit.entity.id}")
                elif row[0] != hit.entity.version:
                    problems.append(f"search {mode} returned {hit.entity.id} at version "
                                    f"{hit.entity.version}, current is {row[0]}")
    return {"search_hits_checked": checked}


def check_snapshots(expect: dict[str, Any], root: Path, problems: list[str]) -> dict[str, Any]:
    """Every acknowledged snapshot restores and verifies; a partial one is refused cleanly."""
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.errors import ValidationError
    from dmf_hybrid._internal.store.snapshot import MANIFEST as SNAPSHOT_MANIFEST
    from dmf_hybrid._internal.vector.exact import ExactIndex

    if not root.is_dir():
        return {"snapshots_checked": 0}
    acked = set(expect.get("snapshots", []))
    checked = 0
    newest = max(acked, key=lambda n: int(n.rsplit("-", 1)[-1]), default=None)
    for snap in sorted(root.iterdir()):
        complete = (snap / SNAPSHOT_MANIFEST).is_file()
        if snap.name in acked and not complete:
            problems.append(f"acknowledged snapshot {snap.name} has no manifest")
        if snap.name in acked and snap.name != newest:
            continue  # restoring every snapshot each round is slow; the newest stands for all
        target = root.parent / f"restore-check-{snap.name}"
        shutil.rmtree(target, ignore_errors=True)
        checked += 1
        try:
            restored = Memory.restore_snapshot(snap, target, embedder=HashEmbedder(),
                                               vector_index=ExactIndex())
        except ValidationError:
            if complete:
                problems.append(f"complete snapshot {snap.name} does not restore")
        except Exception as exc:  # noqa: BLE001 - reported as a problem
            problems.append(f"snapshot {snap.name}: restore failed with {type(exc).__name__}: "
                            f"{exc}")
        else:
            report = restored.verify_audit()
            restored.close()
            if not report.ok:
                problems.append(f"restored snapshot {snap.name} fails verification")
            if not complete:
                problems.append(f"partial snapshot {snap.name} (no manifest) was restored")
        finally:
            shutil.rmtree(target, ignore_errors=True)
    return {"snapshots_checked": checked}
