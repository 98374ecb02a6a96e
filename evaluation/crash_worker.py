"""The crash-test workload: a subprocess that writes to a memory directory until it is killed.

    python -m evaluation.crash_worker --dir DIR --seed N [--expect FILE] [--check-only]
                                      [--large-wal]

It opens ``Memory.open(DIR, embedder=HashEmbedder())`` (DuckDB + embedded Chroma), first checks
the state it finds against ``--expect`` (what the parent saw acknowledged before the previous
kill, see :func:`evaluation.crash_check.check_state`), then runs a random create / update /
delete / restore / link / unlink / plan / batch / reindex / snapshot workload until the parent
kills it with SIGKILL.

Protocol: one JSON object per line on stdout, flushed before the next call starts:

- ``{"ev": "check", ...}``: the report of ``crash_check.check_state`` (only with ``--expect``);
- ``{"ev": "view", "entities": {...}, "links": [...]}``: the state found (after the check);
- ``{"ev": "ready"}``: the workload starts (the parent may kill from here on);
- ``{"ev": "begin", "step", "op", "post": [...], "links": [...]}``: before a call, the state
  it will leave behind if it commits (entity states and links);
- ``{"ev": "ack", "step", "op", "post": [...], "links": [...], "seq"}``: the call returned.

With ``--large-wal`` the workload is the one of :mod:`evaluation.crash_wal`: right after the
open (the WAL replay) it commits one write of its own, checks every acknowledged entity by
ID, by filter and by search, then holds a read transaction open (DuckDB skips its automatic
checkpoints meanwhile, as under a busy server's readers) and writes mostly batches of large
values, so the WAL grows until the parent kills the worker at the size it wants.

``RELIABILITY_KILL_AT="<point>:<n>"`` makes the worker SIGKILL itself the n-th time it reaches
a point: ``before_commit`` / ``after_commit`` (around DuckDB's COMMIT of a write),
``before_vector_upsert`` / ``after_vector_upsert`` (the indexer's fault hook, after the DuckDB
commit and around the Chroma upsert), ``reindex`` (inside ``mem.reindex()``, after the
collection was dropped) or ``snapshot`` (while ``EXPORT DATABASE`` writes its files).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

KILL_ENV = "RELIABILITY_KILL_AT"
KILL_POINTS = ("before_commit", "after_commit", "before_vector_upsert", "after_vector_upsert",
               "reindex", "snapshot")
TYPE_NAME = "Note"
NOTE_TYPEDEF: dict[str, Any] = {
    "name": TYPE_NAME,
    "description": "A note the crash workload writes.",
    "fields": {
        "title": {"type": "str", "required": True, "nullable": False},
        "body": {"type": "str"},
        "n": {"type": "int", "default": 0},
        "tags": {"type": "list", "item": "str", "default": []},
    },
    "identity": ["title"],
    "embed": "{title}: {body} {tags}",
    "relations": {"refs": {"target": TYPE_NAME, "cardinality": "many"}},
}
ENTITY_OPS = ("create", "update", "append", "delete", "restore")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo")
#: Relative weights of the workload's operations.
OP_WEIGHTS = {"create": 22, "create_id": 8, "update": 30, "append": 6, "delete": 8,
              "restore": 4, "link": 10, "unlink": 3, "plan": 5, "batch": 2, "reindex": 1,
              "snapshot": 1}
#: A string value longer than this is carried as its digest in the protocol, the ledger and
#: the checks (the large-WAL workload writes thousands of ~50 KB values).
DIGEST_OVER = 1024

State = dict[str, Any]  # {"version": int, "deleted": bool, "data": {...}}
Link = tuple[str, str, str]


def digested(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as the checks compare it: each long string as ``"sha256:<hex>"``, and no
    field that is None (a field the workload never sets reads back as None)."""
    import hashlib

    return {k: "sha256:" + hashlib.sha256(v.encode()).hexdigest()
            if isinstance(v, str) and len(v) > DIGEST_OVER else v
            for k, v in data.items() if v is not None}


def emit(event: dict[str, Any]) -> None:
    """Write one protocol line and flush it (it must reach the parent before the next call)."""
    sys.stdout.write(json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


def die() -> None:
    """SIGKILL this process now (no cleanup, no atexit, no flush of anything)."""
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------- kill points


class KillSwitch:
    """Counts how often each kill point is reached and SIGKILLs on the configured one."""

    def __init__(self, spec: str | None) -> None:
        self.point: str | None = None
        self.at = 0
        self.counts: dict[str, int] = {}
        self.in_reindex = False
        if spec:
            point, _, n = spec.partition(":")
            if point not in KILL_POINTS:
                raise SystemExit(f"{KILL_ENV}: unknown point {point!r} (use {KILL_POINTS})")
            self.point, self.at = point, int(n or "1")

    def hit(self, point: str) -> None:
        """Reached ``point``: die if it is the configured one and its count is due."""
        if point == "before_vector_upsert" and self.in_reindex:
            point = "reindex"
        if point != self.point:
            return
        self.counts[point] = self.counts.get(point, 0) + 1
        if self.counts[point] >= self.at:
            die()

    def snapshot_due(self) -> bool:
        """True when this snapshot is the one to kill in."""
        if self.point != "snapshot":
            return False
        self.counts["snapshot"] = self.counts.get("snapshot", 0) + 1
        return self.counts["snapshot"] >= self.at


class _CommitProbe:
    """Wraps the store's writer connection to reach ``before_commit`` / ``after_commit``."""

    def __init__(self, con: Any, switch: KillSwitch) -> None:
        self._con = con
        self._switch = switch

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        is_commit = isinstance(sql, str) and sql.strip().upper() == "COMMIT"
        if is_commit:
            self._switch.hit("before_commit")
        result = self._con.execute(sql, *args, **kwargs)
        if is_commit:
            self._switch.hit("after_commit")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def install_kill_points(mem: Any, switch: KillSwitch) -> None:
    """Hook the kill points into an open Memory (harness-only access to internals)."""
    if switch.point is None:
        return
    mem.engine.indexer.fault = switch.hit
    db = mem._store.db  # noqa: SLF001 - the harness reaches into the store on purpose
    if switch.point in ("before_commit", "after_commit"):
        db._writer = _CommitProbe(db._writer, switch)  # noqa: SLF001


# ---------------------------------------------------------------------------- state


def open_memory(directory: Path, typedef: dict[str, Any] = NOTE_TYPEDEF) -> Any:
    """The memory under test: DuckDB + embedded Chroma; searches go through the ANN leg."""
    from dmf_hybrid import HashEmbedder, Memory, Settings

    # exact_threshold=0: every search asks Chroma (the ANN leg) first, so a stale or orphan
    # vector would have its chance to surface
    settings = Settings(exact_threshold=0, load_examples=False)
    mem = Memory.open(directory, embedder=HashEmbedder(), settings=settings)
    mem.define_type(typedef)
    return mem


# ---------------------------------------------------------------------------- workload


class Workload:
    """Random writes against one memory; announces each call before and after it."""

    def __init__(self, mem: Any, rng: random.Random, tag: str, switch: KillSwitch,
                 snapshot_root: Path, view: dict[str, State], links: set[Link],
                 weights: dict[str, int] | None = None) -> None:
        self.mem = mem
        self.rng = rng
        self.tag = tag
        self.switch = switch
        self.snapshot_root = snapshot_root
        self.view = view
        self.links = links
        self.step = 0
        self.weights = dict(weights or OP_WEIGHTS)
        if switch.point == "reindex":
            self.weights["reindex"] = 15
        if switch.point == "snapshot":
            self.weights["snapshot"] = 15

    # -- helpers

    def live(self) -> list[str]:
        return sorted(e for e, s in self.view.items() if not s["deleted"])

    def deleted(self) -> list[str]:
        return sorted(e for e, s in self.view.items() if s["deleted"])

    def new_data(self) -> dict[str, Any]:
        words = self.rng.sample(WORDS, 3)
        return {"title": f"{self.tag}-{self.step}-{words[0]}", "body": " ".join(words),
                "n": self.rng.randrange(1000), "tags": self.rng.sample(WORDS, 2)}

    def call(self, op: str, post: list[tuple[str, State]], links: list[tuple[Link, bool]],
             run: Callable[[], Any]) -> None:
        """Announce, run, acknowledge; the view takes the post state once acknowledged."""
        posts = [{"id": eid, "state": state} for eid, state in post]
        link_rows = [[*link, present] for link, present in links]
        emit({"ev": "begin", "step": self.step, "op": op, "post": posts, "links": link_rows})
        run()
        emit({"ev": "ack", "step": self.step, "op": op, "post": posts, "links": link_rows,
              "seq": self.mem.last_seq()})
        for eid, state in post:
            self.view[eid] = state
        for link, present in links:
            (self.links.add if present else self.links.discard)(link)

    # -- operations

    def op_create(self, given_id: bool) -> None:
        from dmf_hybrid._internal.ids import entity_id

        data = self.new_data()
        eid = (f"{self.tag}.{self.step}" if given_id
               else entity_id(TYPE_NAME, {"title": data["title"]}))
        state = {"version": 1, "deleted": False, "data": data}

        def run() -> None:
            entity = self.mem.create(TYPE_NAME, data, id=eid if given_id else None)
            if entity.id != eid or entity.version != 1:
                raise AssertionError(f"create returned {entity.id} v{entity.version}, "
                                     f"expected {eid} v1 (IDs must be stable)")

        self.call("create", [(eid, state)], [], run)

    def op_update(self) -> None:
        eid = self.rng.choice(self.live())
        cur = self.view[eid]
        changes = {"body": " ".join(self.rng.sample(WORDS, 3)), "n": cur["data"]["n"] + 1}
        state = {"version": cur["version"] + 1, "deleted": False,
                 "data": {**cur["data"], **changes}}
        self.call("update", [(eid, state)], [], lambda: self.mem.update(
            eid, changes, expected_version=cur["version"]))

    def op_append(self) -> None:
        eid = self.rng.choice(self.live())
        cur = self.view[eid]
        word = self.rng.choice(WORDS)
        state = {"version": cur["version"] + 1, "deleted": False,
                 "data": {**cur["data"], "tags": [*cur["data"]["tags"], word]}}
        self.call("append", [(eid, state)], [],
                  lambda: self.mem.append(eid, "tags", [word], expected_version=cur["version"]))

    def op_delete(self, restore: bool) -> None:
        eid = self.rng.choice(self.deleted() if restore else self.live())
        cur = self.view[eid]
        state = {**cur, "version": cur["version"] + 1, "deleted": not restore}
        method = self.mem.restore if restore else self.mem.delete
        self.call("restore" if restore else "delete", [(eid, state)], [],
                  lambda: method(eid, expected_version=cur["version"]))

    def op_link(self, unlink: bool) -> None:
        if unlink:
            # a deleted entity's links stay (a restore brings them back) and cannot be removed
            # until then: the store refuses to unlink from a deleted entity
            removable = sorted(link for link in self.links if not self.view[link[0]]["deleted"])
            if not removable:
                return
            link = self.rng.choice(removable)
            self.call("unlink", [], [(link, False)],
                      lambda: self.mem.unlink(link[0], link[1], link[2]))
            return
        live = self.live()
        a, b = self.rng.sample(live, 2)
        link = (a, "refs", b)
        if link in self.links:
            return
        self.call("link", [], [(link, True)], lambda: self.mem.link(a, "refs", b))

    def op_plan(self) -> None:
        """Two creates, a link between them and an update, in one transaction."""
        from dmf_hybrid._internal.ids import entity_id

        first, second = self.new_data(), self.new_data()
        second["title"] += "-b"
        ids = [entity_id(TYPE_NAME, {"title": d["title"]}) for d in (first, second)]
        target = self.rng.choice(self.live())
        cur = self.view[target]
        changes = {"n": cur["data"]["n"] + 100}
        ops = [
            {"op": "create", "type": TYPE_NAME, "data": first},
            {"op": "create", "type": TYPE_NAME, "data": second},
            {"op": "link", "from_id": "$0.id", "relation": "refs", "to_id": "$1.id"},
            {"op": "update", "id": target, "data": changes,
             "expected_version": cur["version"]},
        ]
        post = [(ids[0], {"version": 1, "deleted": False, "data": first}),
                (ids[1], {"version": 1, "deleted": False, "data": second}),
                (target, {"version": cur["version"] + 1, "deleted": False,
                          "data": {**cur["data"], **changes}})]
        self.call("plan", post, [((ids[0], "refs", ids[1]), True)],
                  lambda: self.mem.execute_plan(ops))

    def op_batch(self) -> None:
        """A larger transaction (so random kills also land inside long commits)."""
        from dmf_hybrid._internal.ids import entity_id

        rows = []
        for i in range(self.rng.randrange(20, 120)):
            data = self.new_data()
            data["title"] += f"-{i}"
            rows.append(data)
        post = [(entity_id(TYPE_NAME, {"title": d["title"]}),
                 {"version": 1, "deleted": False, "data": d}) for d in rows]
        self.call("batch", post, [], lambda: self.mem.create_many(TYPE_NAME, rows))

    def op_bulk(self) -> None:
        """A batch of large values (``crash_wal``): what makes the WAL grow by megabytes."""
        from dmf_hybrid._internal.ids import entity_id
        from evaluation.crash_wal import large_rows

        rows = large_rows(self.rng, f"{self.tag}-{self.step}")
        post = [(entity_id(TYPE_NAME, {"title": d["title"]}),
                 {"version": 1, "deleted": False, "data": digested(d)}) for d in rows]
        self.call("bulk", post, [], lambda: self.mem.create_many(TYPE_NAME, rows))

    def op_reindex(self) -> None:
        self.switch.in_reindex = True
        try:
            self.call("reindex", [], [], self.mem.reindex)
        finally:
            self.switch.in_reindex = False

    def op_snapshot(self) -> None:
        name = f"{self.tag}-{self.step}"
        dest = self.snapshot_root / name
        if self.switch.snapshot_due():
            threading.Thread(target=_kill_when_files_appear, args=(dest,), daemon=True).start()
        emit({"ev": "begin", "step": self.step, "op": "snapshot", "post": [], "links": [],
              "name": name})
        self.mem.snapshot(dest)
        emit({"ev": "ack", "step": self.step, "op": "snapshot", "post": [], "links": [],
              "name": name, "seq": self.mem.last_seq()})

    def run(self, max_steps: int) -> None:
        ops = list(self.weights)
        weights = [self.weights[o] for o in ops]
        while self.step < max_steps:
            self.step += 1
            op = self.rng.choices(ops, weights)[0]
            if len(self.live()) < 3:
                op = "create"
            if op == "restore" and not self.deleted():
                op = "delete"
            if op == "unlink" and not self.links:
                op = "link"
            if op in ("create", "create_id"):
                self.op_create(op == "create_id")
            elif op == "update":
                self.op_update()
            elif op == "append":
                self.op_append()
            elif op in ("delete", "restore"):
                self.op_delete(op == "restore")
            elif op in ("link", "unlink"):
                self.op_link(op == "unlink")
            else:
                getattr(self, f"op_{op}")()


def _kill_when_files_appear(dest: Path) -> None:
    """SIGKILL the process as soon as EXPORT DATABASE has started writing into ``dest``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if dest.is_dir() and any(dest.iterdir()):
                die()
        except OSError:
            pass
        time.sleep(0.0005)


def _iter_view(view: dict[str, State], links: set[Link]) -> Iterator[dict[str, Any]]:
    yield {"ev": "view", "entities": view, "links": sorted(list(x) for x in links)}


def main(argv: list[str] | None = None) -> int:
    """Run the worker (see the module docstring); exits only when --check-only or max steps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="memory directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--expect", type=Path, help="JSON of the acknowledged state to check")
    parser.add_argument("--check-only", action="store_true", help="check, then exit")
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--large-wal", action="store_true",
                        help="the large-WAL workload (see the module docstring)")
    args = parser.parse_args(argv)
    from evaluation import crash_wal
    from evaluation.crash_check import check_state, read_view

    switch = KillSwitch(os.environ.get(KILL_ENV))
    snapshot_root = Path(str(args.dir) + ".snapshots")
    mem = open_memory(args.dir, crash_wal.NOTE_TYPEDEF if args.large_wal else NOTE_TYPEDEF)
    if args.large_wal:
        emit(crash_wal.commit_after_replay(mem))
    if args.expect is not None:
        expect = json.loads(args.expect.read_text())
        emit(check_state(mem, expect, snapshot_root, exhaustive=args.large_wal))
    view, links = read_view(mem)
    for event in _iter_view(view, links):
        emit(event)
    if args.check_only:
        mem.close()
        return 0
    install_kill_points(mem, switch)
    weights = None
    if args.large_wal:
        crash_wal.hold_checkpoints(mem)
        weights = crash_wal.OP_WEIGHTS
    emit({"ev": "ready"})
    rng = random.Random(args.seed)
    Workload(mem, rng, f"r{args.seed}", switch, snapshot_root, view, links,
             weights).run(args.max_steps)
    mem.close()
    return 0


def zygote() -> int:
    """Import everything once, then fork one worker per command (a start takes ~1 s, not ~8 s).

    Commands (stdin, one JSON line each): ``{"argv": [...], "env": {...}, "out": path,
    "err": path}``. For each, the zygote forks a child that sends its stdout and stderr to
    those files and runs :func:`main`; it answers ``{"started": pid}`` and, when the child has
    exited (or was killed), ``{"exited": pid, "rc": rc}`` (rc < 0: killed by that signal).
    Heavy modules are imported here, but nothing is opened: every child opens its own DuckDB
    and Chroma.
    """
    import chromadb  # noqa: F401 - imported once for every child
    import duckdb  # noqa: F401
    import pandas  # noqa: F401 - DuckDB imports it on its first parameterised statement

    import dmf_hybrid._internal.memory  # noqa: F401
    import dmf_hybrid._internal.search.engine  # noqa: F401
    import dmf_hybrid._internal.vector.chroma  # noqa: F401
    import evaluation.crash_check  # noqa: F401

    emit({"ev": "zygote"})
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: become a worker, never return into this loop
            rc = 1
            try:
                out = os.open(command["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                err = os.open(command["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(out, 1)
                os.dup2(err, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                os.environ.update(command.get("env", {}))
                rc = main(command["argv"])
            except BaseException:  # noqa: BLE001 - reported through the exit status
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        emit({"started": pid})
        _, status = os.waitpid(pid, 0)
        emit({"exited": pid, "rc": -os.WTERMSIG(status) if os.WIFSIGNALED(status)
              else os.WEXITSTATUS(status)})
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        sys.exit(zygote())
    sys.exit(main())
