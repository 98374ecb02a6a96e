"""The service under test: a uvicorn server in a thread, state dumps, concurrent writers.

:func:`serve` runs the FastAPI app on a free 127.0.0.1 port in this process (the Memory stays
reachable for direct checks); :func:`service` does it over a fresh memory with the test types;
:func:`dump_state` / :func:`quick_state` fingerprint everything a request could change;
:func:`run_concurrency` points 8-16 HTTP clients at the same entities with ``If-Match`` and
checks that no update is lost, each version is won exactly once, the audit log is gap-free and
verifies, and readers never see half of a plan.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ADMIN_KEY = "rel-admin-key"
START_TIMEOUT = 30.0

COUNTER_TYPE: dict[str, Any] = {
    "name": "Counter",
    "fields": {"name": {"type": "str", "required": True, "nullable": False},
               "hits": {"type": "list", "item": "str", "default": []},
               "total": {"type": "int", "default": 0}},
    "identity": ["name"],
    "embed": "counter {name}",
}
ACCOUNT_TYPE: dict[str, Any] = {
    "name": "Account",
    "fields": {"name": {"type": "str", "required": True, "nullable": False},
               "balance": {"type": "int", "default": 0}},
    "identity": ["name"],
    "embed": "account {name}",
}
TOTAL_BALANCE = 1000


def serve(app: Any) -> AbstractContextManager[str]:
    """Run ``app`` under uvicorn on a free 127.0.0.1 port in a thread; yields its base URL."""
    from dmf_hybrid._internal.api.server import serve_in_thread

    return serve_in_thread(app, timeout=START_TIMEOUT, access_log=False)


def open_memory(path: Path | None, vectors: str = "exact", store_url: str | None = None) -> Any:
    """A memory with the hash embedder; ``vectors`` = "exact" (in memory) or "chroma" (on disk);
    the store in DuckDB, or in the PostgreSQL database ``store_url``."""
    from dmf_hybrid import HashEmbedder, Memory, Settings
    from dmf_hybrid._internal.vector.exact import ExactIndex

    kwargs: dict[str, Any] = {"embedder": HashEmbedder(),
                              "settings": Settings(store_url=store_url)}
    if vectors == "exact":
        kwargs["vector_index"] = ExactIndex()
    return Memory.open(path, **kwargs)


def make_app(mem: Any, data_dir: Path, api_keys: str, **overrides: Any) -> Any:
    """The FastAPI app over ``mem`` with these keys (hash embedder, no example data)."""
    from dmf_hybrid import Settings
    from dmf_hybrid._internal.api import create_app

    settings = Settings(data_dir=data_dir, embedder="hash", api_keys=api_keys,
                        load_examples=False, **overrides)
    return create_app(settings, mem)


POI_TYPE: dict[str, Any] = {
    "name": "Poi",
    "fields": {"name": {"type": "str", "required": True, "nullable": False},
               "city": {"type": "str", "required": True, "nullable": False},
               "cost": {"type": "float", "default": 0.0},
               "tags": {"type": "list", "item": "str", "default": []}},
    "identity": ["name", "city"],
    "embed": "{name} in {city} {tags}",
}
TRIP_TYPE: dict[str, Any] = {
    "name": "Trip",
    "fields": {"destination": {"type": "str", "required": True, "nullable": False},
               "budget": {"type": "float", "default": 0.0},
               "tags": {"type": "list", "item": "str", "default": []}},
    "identity": ["destination"],
    "embed": "Trip to {destination} {tags}",
    "relations": {"includes": {"target": "Poi", "cardinality": "many"}},
}



@contextmanager
def service(workdir: Path, api_keys: str, vectors: str = "exact",
            seed: Callable[[Any], None] | None = None) -> Iterator[tuple[str, Any]]:
    """A server over a fresh memory with the test types (and ``seed`` data): (base URL, mem)."""
    mem = open_memory(workdir / "mem", vectors)
    try:
        mem.define_type(POI_TYPE)
        mem.define_type(TRIP_TYPE)
        if seed is not None:
            seed(mem)
        app = make_app(mem, workdir / "data", api_keys)
        with serve(app) as base:
            yield base, mem
    finally:
        mem.close()


def seed_travel(mem: Any) -> None:
    pois = [mem.create("Poi", {"name": n, "city": c, "cost": cost, "tags": ["culture"]})
            for n, c, cost in (("Shanghai Museum", "Shanghai", 0), ("Oriental Pearl Tower",
                                                                    "Shanghai", 199),
                               ("Yu Garden", "Shanghai", 40))]
    trip = mem.create("Trip", {"destination": "Shanghai", "budget": 5000})
    for poi in pois[:2]:
        mem.link(trip.id, "includes", poi.id)



def dump_state(mem: Any, root: Path) -> str:
    """A hash of every DuckDB table, the vector index and the files under ``root``."""
    digest = hashlib.sha256()
    db = mem._store.db  # noqa: SLF001 - the harness compares the raw tables
    tables = [r[0] for r in db.fetchall(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "ORDER BY table_name")]
    for table in tables:
        digest.update(table.encode())
        for row in db.fetchall(f'SELECT * FROM "{table}" ORDER BY ALL'):
            digest.update(repr(row).encode())
    vectors = mem.engine.vectors
    for name in sorted(vectors.collections()):
        digest.update(name.encode())
        digest.update(repr(sorted(vectors.records(name).items())).encode())
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
    return digest.hexdigest()


def quick_state(mem: Any, root: Path) -> tuple[Any, ...]:
    """A cheap fingerprint (audit seq, row counts, vector counts, file names) for each probe."""
    db = mem._store.db  # noqa: SLF001
    tables = [r[0] for r in db.fetchall(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "ORDER BY table_name")]
    counts = [db.fetchone(f'SELECT count(*) FROM "{t}"') for t in tables]
    vectors = mem.engine.vectors
    return (mem.last_seq(), tuple(zip(tables, counts, strict=True)),
            tuple((n, vectors.count(n)) for n in sorted(vectors.collections())),
            tuple(sorted(str(p.relative_to(root)) for p in root.rglob("*"))))



# ---------------------------------------------------------------------------- concurrency


@dataclass
class ConcurrencyFigures:
    """What the concurrency run measured."""

    concurrent_updates: int = 0
    successful_updates: int = 0
    conflicts: int = 0
    lost_updates: int = 0
    transfers: int = 0
    doomed_plans: int = 0
    reader_checks: int = 0
    reader_violations: int = 0
    problems: list[str] = field(default_factory=list)


def _client(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=60,
                        headers={"Authorization": f"Bearer {ADMIN_KEY}"})


def _writer(base: str, worker: int, counters: list[str], updates: int, seed: int,
            wins: list[tuple[str, int, str]], figures: ConcurrencyFigures,
            lock: threading.Lock) -> None:
    """Append this writer's tokens to random counters with If-Match until ``updates`` won."""
    rng = random.Random(seed)
    done = 0
    with _client(base) as client:
        while done < updates:
            cid = rng.choice(counters)
            current = client.get(f"/entities/{cid}")
            current.raise_for_status()
            body = current.json()
            token = f"w{worker}-{done}"
            data = {"hits": [*body["data"]["hits"], token], "total": body["data"]["total"] + 1}
            response = client.patch(f"/entities/{cid}", json={"data": data},
                                    headers={"If-Match": current.headers["etag"]})
            with lock:
                figures.concurrent_updates += 1
                if response.status_code == 200:
                    figures.successful_updates += 1
                    wins.append((cid, response.json()["version"], token))
                    done += 1
                elif response.status_code == 412:
                    figures.conflicts += 1
                else:
                    figures.problems.append(f"PATCH {cid}: {response.status_code} "
                                            f"{response.text[:200]}")
                    return


def _transfers(base: str, accounts: list[str], n: int, seed: int,
               figures: ConcurrencyFigures, lock: threading.Lock) -> None:
    """Move money between two accounts with two-step plans (and some plans bound to fail)."""
    rng = random.Random(seed)
    a, b = accounts
    done = 0
    with _client(base) as client:
        while done < n:
            ea, eb = client.get(f"/entities/{a}").json(), client.get(f"/entities/{b}").json()
            amount = rng.randint(1, 50)
            ops = [{"op": "update", "id": a, "data": {"balance": ea["data"]["balance"] - amount},
                    "expected_version": ea["version"]},
                   {"op": "update", "id": b, "data": {"balance": eb["data"]["balance"] + amount},
                    "expected_version": eb["version"]}]
            doomed = rng.random() < 0.25
            if doomed:  # the second step names an entity that does not exist
                ops[1] = {**ops[1], "id": "Account_does_not_exist"}
            response = client.post("/plans/execute", json={"ops": ops})
            with lock:
                if doomed:
                    figures.doomed_plans += 1
                    if response.status_code < 400 or response.status_code >= 500:
                        figures.problems.append(f"a doomed plan answered {response.status_code}")
                elif response.status_code == 200:
                    figures.transfers += 1
                    done += 1
                elif response.status_code not in (409, 412, 422):
                    figures.problems.append(f"transfer: {response.status_code} "
                                            f"{response.text[:200]}")
                    return


def _reader(base: str, accounts: list[str], counters: list[str], stop: threading.Event,
            figures: ConcurrencyFigures, lock: threading.Lock) -> None:
    """Read while others write: one query, a pinned as_of pair, a read plan, a counter."""
    violations: list[str] = []
    checks = 0
    with _client(base) as client:
        while not stop.is_set():
            items = client.post("/entities/Account/query", json={}).json()["items"]
            total = sum(i["data"]["balance"] for i in items)
            checks += 1
            if total != TOTAL_BALANCE:
                violations.append(f"query saw balances summing to {total}")
            seq = client.get("/audit/head").json()["last_seq"]
            pinned = [client.get(f"/entities/{eid}", params={"as_of": seq}).json()
                      for eid in accounts]
            total = sum(p["data"]["balance"] for p in pinned)
            checks += 1
            if total != TOTAL_BALANCE:
                violations.append(f"as_of {seq} saw balances summing to {total}")
            plan = client.post("/plans/execute", json={"ops": [
                {"op": "get", "id": eid} for eid in accounts]})
            if plan.status_code == 200:
                total = sum(r["data"]["balance"] for r in plan.json()["results"])
                checks += 1
                if total != TOTAL_BALANCE:
                    violations.append(f"a read plan saw balances summing to {total}")
            counter = client.get(f"/entities/{random.choice(counters)}").json()
            checks += 1
            data = counter["data"]
            if len(data["hits"]) != data["total"] or counter["version"] != data["total"] + 1:
                violations.append(f"counter {counter['id']} half-applied: {counter}")
    with lock:
        figures.reader_checks += checks
        figures.reader_violations += len(violations)
        figures.problems += violations[:5]


def _check_audit(client: httpx.Client, figures: ConcurrencyFigures) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    since = 0
    while True:
        page = client.get("/audit/events", params={"since_seq": since, "limit": 1000}).json()
        if not page:
            break
        events += page
        since = page[-1]["seq"]
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        figures.problems.append("audit seqs are not gap-free from 1")
    report = client.get("/audit/verify").json()
    if not report["ok"] or report["last_seq"] != len(seqs):
        figures.problems.append(f"audit verification: {report}")
    return events


def run_concurrency(workdir: Path, writers: int = 12, updates: int = 5, counters: int = 3,
                    transfer_threads: int = 2, transfers: int = 8, readers: int = 3,
                    vectors: str = "exact", seed: int = 0, store_url: str | None = None
                    ) -> ConcurrencyFigures:
    """Concurrent If-Match writers, transfer plans and readers against one server (its store
    in DuckDB, or in the PostgreSQL database ``store_url``)."""
    figures = ConcurrencyFigures()
    mem = open_memory(workdir / "concurrency", vectors, store_url)
    try:
        mem.define_type(COUNTER_TYPE)
        mem.define_type(ACCOUNT_TYPE)
        counter_ids = [mem.create("Counter", {"name": f"c{i}"}).id for i in range(counters)]
        half = TOTAL_BALANCE // 2
        account_ids = [mem.create("Account", {"name": n, "balance": half}).id
                       for n in ("alice", "bob")]
        app = make_app(mem, workdir / "concurrency", f"{ADMIN_KEY}:default:admin")
        lock = threading.Lock()
        wins: list[tuple[str, int, str]] = []
        stop = threading.Event()
        with serve(app) as base:
            threads = [threading.Thread(target=_writer, args=(
                base, w, counter_ids, updates, seed * 100 + w, wins, figures, lock))
                for w in range(writers)]
            threads += [threading.Thread(target=_transfers, args=(
                base, account_ids, transfers, seed * 100 + 50 + t, figures, lock))
                for t in range(transfer_threads)]
            reader_threads = [threading.Thread(target=_reader, args=(
                base, account_ids, counter_ids, stop, figures, lock)) for _ in range(readers)]
            for t in threads + reader_threads:
                t.start()
            for t in threads:
                t.join(600)
            stop.set()
            for t in reader_threads:
                t.join(600)
            with _client(base) as client:
                events = _check_audit(client, figures)
                finals = {cid: client.get(f"/entities/{cid}").json() for cid in counter_ids}
                accounts = [client.get(f"/entities/{a}").json() for a in account_ids]
        _check_wins(wins, finals, events, figures)
        total = sum(a["data"]["balance"] for a in accounts)
        if total != TOTAL_BALANCE:
            figures.problems.append(f"balances sum to {total} after the transfers")
        if accounts[0]["version"] != 1 + figures.transfers:
            figures.problems.append(f"{figures.transfers} transfers committed but the account is "
                                    f"at version {accounts[0]['version']}")
    finally:
        mem.close()
    return figures


def _check_wins(wins: list[tuple[str, int, str]], finals: dict[str, Any],
                events: list[dict[str, Any]], figures: ConcurrencyFigures) -> None:
    """Every acknowledged token is in its counter once, in version order; versions won once."""
    by_counter: dict[str, list[tuple[int, str]]] = {}
    for cid, version, token in wins:
        by_counter.setdefault(cid, []).append((version, token))
    lost = 0
    for cid, final in finals.items():
        won = sorted(by_counter.get(cid, []))
        hits = final["data"]["hits"]
        versions = Tally(v for v, _ in won)
        doubles = [v for v, n in versions.items() if n > 1]
        if doubles:
            figures.problems.append(f"{cid}: versions {doubles} were won more than once")
        lost += sum(n - 1 for n in versions.values() if n > 1)
        missing = [t for _, t in won if t not in hits]
        lost += len(missing)
        if missing:
            figures.problems.append(f"{cid}: acknowledged updates lost: {missing[:5]}")
        if [t for _, t in won] != hits:
            figures.problems.append(f"{cid}: hits are not the acknowledged tokens in version "
                                    "order")
        if sorted(versions) != list(range(2, final["version"] + 1)):
            figures.problems.append(f"{cid}: won versions {sorted(versions)} do not cover "
                                    f"2..{final['version']}")
        logged = sorted(e["version_after"] for e in events
                        if e["entity_id"] == cid and e["op"] == "update")
        if logged != list(range(2, final["version"] + 1)):
            figures.problems.append(f"{cid}: audit update events {logged} are not one per "
                                    "version")
    figures.lost_updates = lost
