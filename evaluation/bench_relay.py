"""Benchmark of the relay's lag: how long after a commit in one process the shared Chroma
server holds its vector, written by the relay leader in another.
``python -m evaluation.bench_relay [--samples 40] [--gap 0.3]``

Starts its own PostgreSQL (Debian's binaries) and ``chroma run``; opens two memories on them
(the leader first, so it leads; the writer's memory does not relay). The writer creates one
entity every ``--gap`` seconds; each lag is the time from ``create`` returning to the entity's
vector being in Chroma (looked for every 2 ms). Two arms in one run, on fresh stores:
``notify`` (the product: once a writer has embedded the texts of its commit into the shared
cache it sends a PostgreSQL ``NOTIFY``, and the leader drains at once) and ``poll`` (no
``NOTIFY``: the leader drains at its poll interval, 0.2 s as before the wake-up existed).
Hash embedder: the lag measured is the relay's, not the model's. Prints a table, writes JSON
(``--out``) and a markdown table (same stem).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.store.postgres import PgDatabase
from dmf_hybrid._internal.store.txn import Transactions
from dmf_hybrid._internal.vector.chroma import ChromaIndex
from evaluation.chromaserver import ChromaServer, chroma_executable
from evaluation.pgserver import PgServer, binaries
from evaluation.plotting import environment, latency_summary, markdown_table, publish

OUT = Path(__file__).resolve().parent / "results" / "bench_relay.json"
#: The leader's poll interval before commits woke it (the ``poll`` arm).
OLD_INTERVAL = 0.2


class Note(BaseModel):
    """A note: what the writer creates."""

    title: str


@contextmanager
def without_wake_up() -> Iterator[None]:
    """Writers send no ``NOTIFY`` (the ``poll`` arm)."""
    announce = PgDatabase.announce_outbox
    PgDatabase.announce_outbox = Transactions.announce_outbox  # type: ignore[method-assign]
    try:
        yield
    finally:
        PgDatabase.announce_outbox = announce  # type: ignore[method-assign]


def lags(settings: Settings, tmp: Path, samples: int, gap: float, poll: bool) -> list[float]:
    """Seconds from each create's answer to its vector in Chroma."""
    leader = Memory.open(tmp / "leader", settings=settings, embedder=HashEmbedder())
    writer = Memory.open(tmp / "writer", settings=settings, embedder=HashEmbedder())
    try:
        if poll:
            assert leader.engine.relay is not None
            leader.engine.relay.interval = OLD_INTERVAL
        leader.define(Note, identity=["title"], embed="{title}")
        assert leader.engine.indexer.leading and not writer.engine.indexer.leading
        index, collection = writer.engine.vectors, writer.engine.indexer.collection("Note")
        out: list[float] = []
        for i in range(samples):
            time.sleep(gap)
            entity = writer.create("Note", {"title": f"note {i} of {tmp.name}"})
            done = time.perf_counter()
            while not (collection in index.collections()
                       and entity.id in index.records(collection)):
                time.sleep(0.002)
            out.append(time.perf_counter() - done)
        return out
    finally:
        writer.close()
        leader.close()


def run(samples: int, gap: float) -> dict[str, Any]:
    bin_dir, exe = binaries(), chroma_executable()
    if bin_dir is None or exe is None:
        raise RuntimeError("needs PostgreSQL's server binaries (make postgres) and the chroma "
                           "command (chromadb)")
    pg, chroma = PgServer(bin_dir), ChromaServer(exe)
    arms: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dmf-relay-") as tmp:
            for name in ("notify", "poll"):
                index = ChromaIndex.http("127.0.0.1", chroma.port)
                for collection in index.collections():  # the other arm's
                    index.drop(collection)
                index.close()
                settings = Settings(store_url=pg.fresh(), chroma_url=chroma.url)
                if name == "poll":
                    with without_wake_up():
                        seconds = lags(settings, Path(tmp) / name, samples, gap, poll=True)
                else:
                    seconds = lags(settings, Path(tmp) / name, samples, gap, poll=False)
                arms[name] = latency_summary(seconds)
    finally:
        chroma.stop()
        pg.stop()
    return {"benchmark": "bench_relay", "samples": samples, "gap_s": gap, "arms": arms,
            "environment": environment()}


def markdown(doc: Any) -> str:
    rows = [[name, a["p50_ms"], a["p95_ms"], a["mean_ms"], a["max_ms"]]
            for name, a in doc["arms"].items()]
    return ("Commit to vector in the shared Chroma server (ms), one writer process, the relay "
            f"in another; {doc['samples']} creates {doc['gap_s']} s apart\n\n"
            + markdown_table(["arm", "p50", "p95", "mean", "max"], rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    publish(run(args.samples, args.gap), args.out, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
