"""Benchmark of fair sharing between tenants: does one tenant's heavy work slow another's?

``python -m evaluation.bench_fair [--batch 2000] [--as-of-clients 8] [--samples 40]``

The service runs as a child process (``python -m dmf_hybrid._internal.api.server``, the measured
embedder, two API keys: tenant ``a`` and tenant ``b``); the clients are threads here.

1. *Ingest.* Tenant ``b`` creates one entity every ``--gap-ms`` and times each create: first
   with nothing else running (idle), then while tenant ``a`` sends one legal
   ``--batch``-row batch (``POST /entities/BenchNote/batch``), until that request has been
   answered. What a create of ``b`` costs during ``a``'s batch, against idle.
2. *Time travel.* Tenant ``a`` holds ``--history`` entities updated ``--updates`` times each,
   so a search ``as_of`` the first event reconstructs a state far back. Tenant ``b``'s live
   searches are timed idle, then while ``--as-of-clients`` clients of ``a`` loop searches with
   ``as_of`` set to the first seq of ``a``'s history.

Each phase reports p50 / p95 of ``b``'s requests and the ratio of the loaded p50 to the idle
p50 (the target: within 3x). Writes JSON (``--out``), a markdown table (same stem, ``.md``).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from dmf_hybrid import MemoryClient
from dmf_hybrid._internal.config import DEFAULT_EMBEDDER
from evaluation.bench_http import BENCH_TYPE, TYPE_NAME, make_queries, make_rows, running_server
from evaluation.plotting import environment, latency_summary, markdown_table, publish

log = logging.getLogger("bench_fair")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_fair.json"
KEYS = "key-admin:a:admin,key-a:a:writer,key-b:b:writer,key-b-admin:b:admin"
#: The bound a loaded p50 is measured against (x the idle p50).
TARGET_RATIO = 3.0


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _sample_while(call: Callable[[int], Any], busy: threading.Event | None, count: int,
                  gap_s: float) -> list[float]:
    """Latencies of ``call(i)``: ``count`` of them (idle), or as many as fit while ``busy`` is
    set (at least one)."""
    out: list[float] = []
    i = 0
    while (busy is None and i < count) or (busy is not None and (busy.is_set() or not out)):
        out.append(_timed(partial(call, i)))
        i += 1
        time.sleep(gap_s)
    return out


def _phase(idle: Sequence[float], loaded: Sequence[float], **extra: Any) -> dict[str, Any]:
    idle_s, loaded_s = latency_summary(idle), latency_summary(loaded)
    ratio = loaded_s["p50_ms"] / idle_s["p50_ms"] if idle_s["p50_ms"] else float("nan")
    return {"idle": idle_s, "loaded": loaded_s, "p50_ratio": round(ratio, 2), **extra}


def ingest_phase(url: str, *, batch: int, samples: int, gap_s: float) -> dict[str, Any]:
    """Tenant b's single creates, idle and during tenant a's ``batch``-row batch."""
    rows = make_rows(batch + 2 * samples + 1000, seed=3)
    with MemoryClient(url, api_key="key-a", timeout=600) as a, \
            MemoryClient(url, api_key="key-b", timeout=60) as b:
        offset = batch

        def create_b(i: int) -> None:
            nonlocal offset
            b.create(TYPE_NAME, rows[offset])
            offset += 1

        b.search(TYPE_NAME, "warm up the mirrors", k=1)
        a.search(TYPE_NAME, "warm up the mirrors", k=1)
        idle = _sample_while(create_b, None, samples, gap_s)
        busy = threading.Event()
        busy.set()
        took: list[float] = []

        def send_batch() -> None:
            try:
                took.append(_timed(lambda: a.create_many(TYPE_NAME, rows[:batch])))
            finally:
                busy.clear()

        sender = threading.Thread(target=send_batch, daemon=True)
        sender.start()
        time.sleep(gap_s)
        loaded = _sample_while(create_b, busy, samples, gap_s)
        sender.join()
    return _phase(idle, loaded, batch_rows=batch, batch_s=round(took[0], 2) if took else None)


def as_of_phase(url: str, *, history: int, updates: int, clients: int, samples: int,
                gap_s: float) -> dict[str, Any]:
    """Tenant b's live searches, idle and while ``clients`` of tenant a loop as_of searches."""
    queries = make_queries(2 * samples + 64, seed=5)
    with MemoryClient(url, api_key="key-a", timeout=600) as a, \
            MemoryClient(url, api_key="key-b", timeout=60) as b:
        first = a.create_many(TYPE_NAME, make_rows(history, seed=9))
        far_back = a.last_seq()  # before every update below
        for round_ in range(updates):
            for e in first:
                a.update(e.id, {"year": 1990 + round_})
        b.create_many(TYPE_NAME, make_rows(200, seed=13))
        b.search(TYPE_NAME, "warm up", k=10)

        def search_b(i: int) -> None:
            b.search(TYPE_NAME, queries[i % len(queries)], k=10)

        idle = _sample_while(search_b, None, samples, gap_s)
        a_times: list[float] = []
        stop = threading.Event()

        def loop_a(n: int) -> None:
            with MemoryClient(url, api_key="key-a", timeout=600) as own:
                j = n
                while not stop.is_set():
                    a_times.append(_timed(partial(
                        own.search, TYPE_NAME, queries[j % len(queries)], k=10,
                        as_of=far_back)))
                    j += clients

        loopers = [threading.Thread(target=loop_a, args=(n,), daemon=True)
                   for n in range(clients)]
        for t in loopers:
            t.start()
        time.sleep(1.0)
        loaded = _sample_while(search_b, None, samples, gap_s)
        stop.set()
        for t in loopers:
            t.join()
    return _phase(idle, loaded, clients=clients, history=history, updates=updates,
                  as_of=far_back, a_as_of_search=latency_summary(a_times))


def run(*, embedder: str, batch: int, samples: int, gap_ms: float, history: int,
        updates: int, clients: int, workdir: Path | None) -> dict[str, Any]:
    gap_s = gap_ms / 1000.0
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        with running_server(Path(tmp) / "data", embedder=embedder,
                            log_path=Path(tmp) / "server.log", ready_timeout=600,
                            extra_env={"DMF_API_KEYS": KEYS}) as (server, times):
            for key in ("key-admin", "key-b-admin"):  # tenants a and b each own their types
                with MemoryClient(server.url, api_key=key) as client:
                    client.define_type(BENCH_TYPE)
            ingest = ingest_phase(server.url, batch=batch, samples=samples, gap_s=gap_s)
            as_of = as_of_phase(server.url, history=history, updates=updates,
                                clients=clients, samples=samples, gap_s=gap_s)
    return {"benchmark": "bench_fair", "environment": environment(), "embedder": embedder,
            "target_ratio": TARGET_RATIO, "startup": times,
            "phases": {"ingest": ingest, "as_of": as_of}}


def markdown(doc: Mapping[str, Any]) -> str:
    rows = []
    for name, what in (("ingest", "b's create while a sends a {batch_rows}-row batch"),
                       ("as_of", "b's live search while {clients} clients of a loop as_of")):
        phase = doc["phases"][name]
        rows.append([what.format(**phase), phase["idle"]["p50_ms"], phase["idle"]["p95_ms"],
                     phase["loaded"]["p50_ms"], phase["loaded"]["p95_ms"],
                     phase["loaded"]["n"], phase["p50_ratio"]])
    table = markdown_table(["tenant b's request", "idle p50 ms", "idle p95 ms",
                            "loaded p50 ms", "loaded p95 ms", "loaded n", "p50 ratio"], rows)
    ingest, as_of = doc["phases"]["ingest"], doc["phases"]["as_of"]
    return (f"# Fair sharing between tenants ({doc['embedder']})\n\n{table}\n"
            f"Tenant a's batch took {ingest['batch_s']} s; its as_of searches "
            f"(as_of={as_of['as_of']}) p50 {as_of['a_as_of_search']['p50_ms']} ms. "
            f"Target: loaded p50 within {doc['target_ratio']}x idle.\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--batch", type=int, default=2000, help="tenant a's batch rows")
    parser.add_argument("--samples", type=int, default=40, help="idle requests of tenant b")
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--history", type=int, default=300, help="tenant a's entities")
    parser.add_argument("--updates", type=int, default=5, help="updates of each")
    parser.add_argument("--as-of-clients", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    doc = run(embedder=args.embedder, batch=args.batch, samples=args.samples,
              gap_ms=args.gap_ms, history=args.history, updates=args.updates,
              clients=args.as_of_clients, workdir=args.workdir)
    publish(doc, args.out, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
