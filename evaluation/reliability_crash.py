"""Crash consistency: SIGKILL the embedded workload (and the HTTP server) and check what survives.

:func:`run_embedded_crashes` starts :mod:`evaluation.crash_worker` again and again on one memory
directory, kills it (at random times or at named points: around DuckDB's COMMIT, around the
Chroma upsert, inside a reindex, inside a snapshot), and lets the next worker check, before it
writes anything, that every acknowledged write survived (see ``crash_worker.check_state``).

:func:`run_http_crashes` does the same through the service: ``python -m
dmf_hybrid._internal.api.server`` as a subprocess, clients recording every 2xx, SIGKILL mid-load,
restart, check over HTTP."""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evaluation.crash_worker import KILL_ENV, KILL_POINTS, NOTE_TYPEDEF, TYPE_NAME, WORDS
from evaluation.ports import free_port

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
#: How long a worker may take to open, check and get ready (the machine may be busy).
START_TIMEOUT = 180.0
#: A worker killed at a named point that it never reaches is killed by the parent after this.
FAULT_TIMEOUT = 20.0
#: The HTTP server is killed a random time after this many more acknowledged writes.
MIN_ACKED_BEFORE_KILL = 3
#: A ``("wal", bytes)`` kill: how often the WAL's size is looked at, and how long the worker
#: may take to write that much before it is killed anyway (a problem is recorded).
WAL_POLL = 0.02
WAL_TIMEOUT = 600.0


@dataclass
class CrashFigures:
    """What a crash run measured and every problem it found."""

    kills: int = 0
    acknowledged_writes: int = 0
    lost: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    kill_points: dict[str, int] = field(default_factory=dict)
    in_flight_applied: int = 0
    reports: list[dict[str, Any]] = field(default_factory=list)
    #: the WAL's size when a ``("wal", bytes)`` kill landed
    wal_bytes_at_kill: list[int] = field(default_factory=list)

    @property
    def lost_writes(self) -> int:
        """Acknowledged writes found missing (or older) after some kill."""
        return len(self.lost)

    def merge(self, other: CrashFigures) -> None:
        """Add another run's figures to these."""
        self.kills += other.kills
        self.acknowledged_writes += other.acknowledged_writes
        self.lost |= other.lost
        self.problems += other.problems
        for point, n in other.kill_points.items():
            self.kill_points[point] = self.kill_points.get(point, 0) + n
        self.in_flight_applied += other.in_flight_applied
        self.reports += other.reports
        self.wal_bytes_at_kill += other.wal_bytes_at_kill


# ---------------------------------------------------------------------------- embedded


@dataclass
class Ledger:
    """What the parent saw acknowledged: the expected state the next worker checks."""

    entities: dict[str, Any] = field(default_factory=dict)
    links: set[tuple[str, str, str]] = field(default_factory=set)
    acked: list[tuple[str, int]] = field(default_factory=list)
    acked_calls: int = 0
    snapshots: list[str] = field(default_factory=list)
    in_flight: dict[str, Any] | None = None

    def expect(self) -> dict[str, Any]:
        """The ``--expect`` document of the next check."""
        return {"entities": self.entities, "links": sorted(list(x) for x in self.links),
                "acked": self.acked, "in_flight": self.in_flight, "snapshots": self.snapshots}

    def apply(self, event: dict[str, Any]) -> None:
        """Take one protocol line of a worker into account."""
        ev = event["ev"]
        if ev == "begin":
            self.in_flight = event
        elif ev == "ack":
            for post in event["post"]:
                self.entities[post["id"]] = post["state"]
                self.acked.append((post["id"], post["state"]["version"]))
            for a, rel, b, present in event["links"]:
                (self.links.add if present else self.links.discard)((a, rel, b))
            if event["op"] == "snapshot":
                self.snapshots.append(event["name"])
            self.acked_calls += 1
            self.in_flight = None
        elif ev == "view":
            # the check before it passed judgement; the view settles the in-flight call
            self.entities = dict(event["entities"])
            self.links = {tuple(x) for x in event["links"]}  # type: ignore[misc]
            self.in_flight = None


def kill_schedule(kills: int, rng: random.Random) -> list[tuple[str, int]]:
    """Where each kill lands: ~40 % at random times, the rest cycling through the named points."""
    plan: list[tuple[str, int]] = []
    points = list(KILL_POINTS)
    for i in range(kills):
        if i % 5 in (0, 3):
            plan.append(("random", 0))
        else:
            point = points[len([p for p in plan if p[0] != "random"]) % len(points)]
            plan.append((point, rng.randint(1, 4 if point in ("reindex", "snapshot") else 8)))
    return plan


def _parse(line: str) -> dict[str, Any]:
    try:
        event: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError:
        return {"ev": "garbage", "line": line[:200]}
    return event


def _reader(stream: Any, out: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        if line.strip():
            out.put(_parse(line.strip()))
    out.put(None)


def _worker_env(kill_at: str | None, rng: random.Random) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    env["PYTHONHASHSEED"] = str(rng.randrange(1, 2**31))  # IDs must not depend on it
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class WorkerHandle:
    """A running worker: its protocol events (None at the end), kill and wait."""

    events: queue.Queue[dict[str, Any] | None]

    def kill(self) -> None:
        """SIGKILL the worker."""
        raise NotImplementedError

    def wait(self, timeout: float) -> int:
        """The exit status (negative: killed by that signal)."""
        raise NotImplementedError


class _Subprocess(WorkerHandle):
    """A worker in a fresh interpreter (its own hash seed)."""

    def __init__(self, argv: list[str], env: dict[str, str], err: Path) -> None:
        with open(err, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "evaluation.crash_worker", *argv],
                stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=ROOT)
        self.events = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, self.events),
                         daemon=True).start()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc


class Zygote:
    """``crash_worker --zygote``: imports once, forks a worker per round (see its docstring)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evaluation.crash_worker", "--zygote"], env=env, cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, self.replies),
                         daemon=True).start()
        self._reply("ev")

    def _reply(self, key: str, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        reply = self.replies.get(timeout=timeout)
        if reply is None or key not in reply:
            raise RuntimeError(f"the crash zygote answered {reply!r}")
        return reply

    def spawn(self, argv: list[str], env: dict[str, str], out: Path, err: Path
              ) -> WorkerHandle:
        """Fork a worker writing its protocol lines to ``out``."""
        out.write_text("")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "out": str(out),
                                          "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        return _Forked(self, int(self._reply("started")["started"]), out)

    def close(self) -> None:
        """Stop the zygote."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class _Forked(WorkerHandle):
    """A worker forked by the zygote; its protocol lines are tailed from a file."""

    def __init__(self, zygote: Zygote, pid: int, out: Path) -> None:
        self.zygote, self.pid = zygote, pid
        self.events = queue.Queue()
        self._exited: dict[str, Any] | None = None
        self._done = threading.Event()
        threading.Thread(target=self._tail, args=(out,), daemon=True).start()

    def _tail(self, out: Path) -> None:
        with open(out) as stream:
            pending = ""
            while True:
                chunk = stream.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split("\n")
                    for line in lines:
                        if line.strip():
                            self.events.put(_parse(line.strip()))
                    continue
                if self._done.is_set():
                    break
                if self._exited is None:
                    try:
                        reply = self.zygote.replies.get_nowait()
                    except queue.Empty:
                        pass
                    else:  # None: the zygote itself is gone
                        self._exited = reply or {"exited": self.pid, "rc": 999}
                        continue  # read what the worker wrote before it died
                    time.sleep(0.01)
                else:
                    self._done.set()
        self.events.put(None)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self._exited is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._exited is None or "exited" not in self._exited:
            raise RuntimeError(f"worker {self.pid}: no exit status ({self._exited!r})")
        return int(self._exited["rc"])


def _wal_bytes(directory: Path) -> int:
    try:
        return (directory / "memory.duckdb.wal").stat().st_size
    except FileNotFoundError:
        return 0


def _run_worker(directory: Path, seed: int, ledger: Ledger, expect_file: Path | None,
                kill: tuple[str, int] | None, rng: random.Random, figures: CrashFigures,
                window: tuple[float, float], zygote: Zygote | None,
                large_wal: bool = False) -> bool:
    """One worker life: check, work, die. False when it could not even get ready.

    ``kill`` is (point, n): a named point of the worker, ``("random", 0)``, or ``("wal",
    bytes)``: killed once the WAL has grown to that size (``large_wal``: the worker's
    large-WAL workload and exhaustive checks).
    """
    argv = ["--dir", str(directory), "--seed", str(seed)]
    if expect_file is not None:
        argv += ["--expect", str(expect_file)]
    if kill is None:
        argv.append("--check-only")
    if large_wal:
        argv.append("--large-wal")
    by_wal = kill is not None and kill[0] == "wal"
    kill_at = f"{kill[0]}:{kill[1]}" if kill and kill[0] not in ("random", "wal") else None
    err_path = directory.parent / f"worker-{seed}.err"
    env = _worker_env(kill_at, rng)
    worker: WorkerHandle
    if zygote is None:
        worker = _Subprocess(argv, env, err_path)
    else:
        worker = zygote.spawn(argv, {KILL_ENV: kill_at or ""},
                              directory.parent / f"worker-{seed}.out", err_path)
    deadline = time.monotonic() + START_TIMEOUT
    kill_deadline: float | None = None
    ready = False
    try:
        while True:
            timeout = (kill_deadline or deadline) - time.monotonic()
            if by_wal and kill_deadline is not None:
                assert kill is not None
                if _wal_bytes(directory) >= kill[1]:
                    figures.wal_bytes_at_kill.append(_wal_bytes(directory))
                    worker.kill()
                    kill_deadline, deadline = None, time.monotonic() + 60
                    continue
                timeout = min(timeout, WAL_POLL)
            try:
                event = worker.events.get(timeout=max(0.01, timeout))
            except queue.Empty:
                event = {"ev": "timeout"}
                if by_wal and kill_deadline is not None and time.monotonic() < kill_deadline:
                    continue  # only a poll of the WAL's size
            if event is None:
                break
            if event["ev"] == "timeout":
                if by_wal and kill_deadline is not None:
                    figures.problems.append(f"worker {seed}: the WAL stayed under {kill}")
                if kill_deadline is not None:
                    worker.kill()
                    kill_deadline = None
                    deadline = time.monotonic() + 60
                    continue
                figures.problems.append(f"worker {seed} did not get ready in time")
                worker.kill()
                break
            if event["ev"] == "check":
                figures.reports.append(event)
                figures.lost |= {json.dumps(x) for x in event["lost"]}
                figures.problems += [f"after kill {figures.kills}: {p}" for p in event["problems"]]
                figures.in_flight_applied += int(bool(event.get("in_flight_applied")))
            elif event["ev"] == "ready":
                ready = True
                if by_wal:
                    kill_deadline = time.monotonic() + WAL_TIMEOUT
                elif not (kill and kill[0] == "random"):
                    kill_deadline = time.monotonic() + FAULT_TIMEOUT
            elif event["ev"] == "garbage":
                figures.problems.append(f"worker {seed} wrote {event['line']!r}")
            else:
                ledger.apply(event)
                if event["ev"] == "ack" and kill_deadline is None and kill \
                        and kill[0] == "random":
                    # a random time after the first acknowledged write of this life
                    kill_deadline = time.monotonic() + rng.uniform(*window)
    finally:
        rc = worker.wait(timeout=60)
    expected_rc = 0 if kill is None else -signal.SIGKILL
    if rc != expected_rc:
        tail = err_path.read_text()[-2000:] if err_path.exists() else ""
        figures.problems.append(f"worker {seed} exited with {rc}, not {expected_rc}: {tail}")
    elif kill is not None:
        figures.kills += 1
        figures.kill_points[kill[0]] = figures.kill_points.get(kill[0], 0) + 1
    return ready or kill is None


def run_embedded_crashes(workdir: Path, kills: int, seed: int = 0,
                         window: tuple[float, float] = (0.3, 2.5),
                         fork: bool = True, fresh_check: bool = True) -> CrashFigures:
    """Kill the embedded workload ``kills`` times on one directory; check after every kill.

    With ``fork`` the workers are forked from one zygote process that imported everything
    (about 1 s per start instead of 8 here); with ``fresh_check`` the final check runs in a
    fresh interpreter with another hash seed (derived IDs must not change).
    """
    rng = random.Random(seed)
    figures = CrashFigures()
    ledger = Ledger()
    workdir.mkdir(parents=True, exist_ok=True)
    directory = workdir / "mem"
    expect_file = workdir / "expect.json"
    schedule: list[tuple[str, int] | None] = [*kill_schedule(kills, rng), None]
    zygote = Zygote(_worker_env(None, rng)) if fork else None
    try:
        for i, kill in enumerate(schedule):
            expect = expect_file if i > 0 else None
            if expect is not None:
                expect_file.write_text(json.dumps(ledger.expect()))
            spawner = None if kill is None and fresh_check else zygote
            if not _run_worker(directory, seed * 1000 + i, ledger, expect, kill, rng, figures,
                               window, spawner):
                break
            log.info("crash round %d/%d (%s): %d acknowledged so far", i + 1, len(schedule),
                     kill, ledger.acked_calls)
    finally:
        if zygote is not None:
            zygote.close()
    figures.acknowledged_writes = ledger.acked_calls
    return figures


# ---------------------------------------------------------------------------- HTTP


HTTP_KEY = "crash-admin-key"


@contextmanager
def server_process(data_dir: Path, port: int, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m dmf_hybrid._internal.api.server`` on 127.0.0.1:port (hash embedder, no examples).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMF_")}
    env.update({"DMF_DATA_DIR": str(data_dir), "DMF_PORT": str(port), "DMF_HOST": "127.0.0.1",
                "DMF_EMBEDDER": "hash", "DMF_LOAD_EXAMPLES": "false",
                "DMF_API_KEYS": f"{HTTP_KEY}:default:admin",
                "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")})
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dmf_hybrid._internal.api.server"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT) -> None:
    """Wait until the server answers /readyz with 200 (model loaded, outbox drained)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not get ready in time")


@dataclass
class _HttpLedger:
    """What the HTTP clients saw acknowledged (2xx) per entity, and the requests in flight."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    acked: list[tuple[str, int]] = field(default_factory=list)
    in_flight: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)


def _http_client_loop(base: str, worker: int, stop: threading.Event, ledger: _HttpLedger,
                      rng: random.Random, tag: str) -> None:
    """Create and update this client's own entities until stopped (or the server dies)."""
    headers = {"Authorization": f"Bearer {HTTP_KEY}"}
    mine: list[str] = []
    n = 0
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        while not stop.is_set():
            n += 1
            request: tuple[str, str, dict[str, Any] | None, dict[str, str]]
            post: dict[str, Any]
            if len(mine) < 3 or rng.random() < 0.35:
                data: dict[str, Any] = {"title": f"{tag}-w{worker}-{n}",
                                        "body": " ".join(rng.sample(WORDS, 3)), "n": n}
                eid = f"{tag}.w{worker}.{n}"
                post = {"version": 1, "deleted": False, "data": {**data, "tags": []}}
                request = ("POST", f"/entities/{TYPE_NAME}", {"data": data, "id": eid}, {})
            else:
                eid = rng.choice(mine)
                cur = ledger.entities[eid]
                if cur["deleted"]:
                    post = {**cur, "version": cur["version"] + 1, "deleted": False}
                    request = ("POST", f"/entities/{eid}/restore", None,
                               {"If-Match": f'"{cur["version"]}"'})
                elif rng.random() < 0.15:
                    post = {**cur, "version": cur["version"] + 1, "deleted": True}
                    request = ("DELETE", f"/entities/{eid}", None,
                               {"If-Match": f'"{cur["version"]}"'})
                else:
                    changes = {"n": cur["data"]["n"] + 1}
                    post = {"version": cur["version"] + 1, "deleted": False,
                            "data": {**cur["data"], **changes}}
                    request = ("PATCH", f"/entities/{eid}", {"data": changes},
                               {"If-Match": f'"{cur["version"]}"'})
            with ledger.lock:
                ledger.in_flight[worker] = (eid, post)
            method, path, body, extra = request
            try:
                response = client.request(method, path, json=body, headers=extra)
            except httpx.HTTPError:
                return  # the server is gone: this request stays "in flight"
            if response.status_code >= 300:
                if stop.is_set():
                    return
                raise AssertionError(f"{method} {path} -> {response.status_code} "
                                     f"{response.text[:300]}")
            got = response.json()
            with ledger.lock:
                ledger.in_flight.pop(worker, None)
                ledger.entities[eid] = post
                ledger.acked.append((eid, int(post["version"])))
                if got["version"] != post["version"]:
                    raise AssertionError(f"{eid}: got version {got['version']}, "
                                         f"expected {post['version']}")
            if eid not in mine:
                mine.append(eid)


def _http_state(client: httpx.Client, eid: str) -> dict[str, Any] | None:
    response = client.get(f"/entities/{eid}")
    if response.status_code == 200:
        body = response.json()
        return {"version": body["version"], "deleted": False, "data": body["data"]}
    history = client.get(f"/entities/{eid}/history")
    if history.status_code == 404:
        return None
    events = [e for e in history.json() if e["entity_id"] == eid and e["after"]]
    last = events[-1]
    return {"version": last["version_after"], "deleted": last["after"]["deleted_at"] is not None,
            "data": last["after"]["data"]}


def _check_http(base: str, ledger: _HttpLedger, figures: CrashFigures, round_no: int) -> None:
    headers = {"Authorization": f"Bearer {HTTP_KEY}"}
    flight = {eid: post for eid, post in ledger.in_flight.values()}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        actual = {eid: _http_state(client, eid) for eid in sorted(set(ledger.entities)
                                                                   | set(flight))}
        for eid, version in ledger.acked:
            state = actual.get(eid)
            if state is None or state["version"] < version:
                figures.lost.add(json.dumps(["http", eid, version]))
        for eid, state in actual.items():
            want = ledger.entities.get(eid)
            if state == want:
                continue
            if eid in flight and state == flight[eid]:
                ledger.entities[eid] = state  # the in-flight request committed before the kill
                figures.in_flight_applied += 1
                continue
            figures.problems.append(f"http round {round_no}: {eid} is {state}, acknowledged "
                                    f"{want}")
        verify = client.get("/audit/verify").json()
        if not verify["ok"]:
            figures.problems.append(f"http round {round_no}: audit chain broken: {verify}")
        client.post("/admin/reconcile").raise_for_status()
        second = client.post("/admin/reconcile").json()
        if any(second.get(k) for k in ("missing", "stale", "orphan")):
            figures.problems.append(f"http round {round_no}: drift after reconcile: {second}")
        # search never returns deleted or stale entities
        for text in ("alpha bravo", "delta echo foxtrot", "kilo"):
            for mode in ("vector", "keyword", "hybrid"):
                hits = client.post("/search", json={"type": TYPE_NAME, "text": text, "k": 20,
                                                    "mode": mode}).json()["hits"]
                for hit in hits:
                    ent = hit["entity"]
                    want = actual.get(ent["id"]) or ledger.entities.get(ent["id"])
                    if want is not None and (want["deleted"] or
                                             want["version"] != ent["version"]):
                        figures.problems.append(f"http round {round_no}: search returned "
                                                f"{ent['id']} v{ent['version']}, now {want}")
    ledger.in_flight.clear()


def run_http_crashes(workdir: Path, kills: int, seed: int = 0, clients: int = 3,
                     window: tuple[float, float] = (0.1, 2.0)) -> CrashFigures:
    """Kill the HTTP server mid-load ``kills`` times; after each restart check over HTTP."""
    rng = random.Random(seed)
    figures = CrashFigures()
    ledger = _HttpLedger()
    data_dir = workdir / "server-data"
    log_path = workdir / "server.log"
    for round_no in range(kills + 1):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with server_process(data_dir, port, log_path) as proc:
            wait_ready(base, proc)
            if round_no > 0:
                _check_http(base, ledger, figures, round_no)
            if round_no == kills:
                break
            if round_no == 0:
                httpx.post(f"{base}/types", json=NOTE_TYPEDEF, timeout=30,
                           headers={"Authorization": f"Bearer {HTTP_KEY}"}).raise_for_status()
            stop = threading.Event()
            errors: list[BaseException] = []

            def loop(worker: int, stop: threading.Event = stop,
                     errors: list[BaseException] = errors, base: str = base,
                     round_no: int = round_no) -> None:
                try:
                    _http_client_loop(base, worker, stop, ledger, random.Random(rng.random()),
                                      f"h{seed}r{round_no}")
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=loop, args=(w,), daemon=True)
                       for w in range(clients)]
            for t in threads:
                t.start()
            # a random time after this life's first few acknowledged writes
            floor = len(ledger.acked) + MIN_ACKED_BEFORE_KILL
            deadline = time.monotonic() + START_TIMEOUT
            while len(ledger.acked) < floor and time.monotonic() < deadline and not errors:
                time.sleep(0.02)
            time.sleep(rng.uniform(*window))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            stop.set()
            for t in threads:
                t.join(timeout=60)
            figures.kills += 1
            figures.kill_points["http_server"] = figures.kill_points.get("http_server", 0) + 1
            figures.problems += [f"http client: {e!r}" for e in errors]
    figures.acknowledged_writes = len(ledger.acked)
    return figures
