"""Benchmark of whole-store bundles against snapshots, on one store, side by side.

``python -m evaluation.bench_bundle [--entities 20000] [--tenants 4] [--repeat 3]``

A store with ``--entities`` entities spread over ``--tenants`` tenants (each updated once,
one in ten linked to the next, one in fifty deleted: about 2.2 events per entity) is written
with the hash embedder. Then, ``--repeat`` times in turn: ``Memory.export`` to a gzip bundle,
``Memory.import_bundle`` of it into a new directory (the whole check, the write, opening and
reindexing), and ``snapshot`` / ``restore_snapshot`` of the same store (the bundle with the
embedding cache: a restore embeds nothing). Medians, bundle and snapshot sizes, how many texts
each read back embedded; JSON (``--out``) and markdown.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.counting import CountingEmbedder
from evaluation.plotting import environment, markdown_table, publish

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "evaluation" / "results" / "bench_bundle.json"
TYPE = {"name": "Note", "identity": ["n"], "embed": "{title} {body}",
        "fields": {"n": {"type": "int"}, "title": {"type": "str"}, "body": {"type": "str"},
                   "tags": {"type": "list", "item": "str"}, "due": {"type": "date",
                                                                   "required": False}},
        "relations": {"next": {"target": "Note"}}}


def _open(path: Path) -> Memory:
    return Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())


def fill(mem: Memory, entities: int, tenants: int) -> int:
    """Write the store; how many events it holds (each tenant's seqs are its own)."""
    per = entities // tenants
    total = 0
    for t in range(tenants):
        view = mem.for_tenant(f"t{t}")
        view.define_type(TYPE)  # each tenant owns its types
        made = view.create_many("Note", [
            {"n": i, "title": f"note {i} of tenant {t}", "body": f"text {i * 7 % 1000} 上海 {i}",
             "tags": ["a", f"t{i % 5}"], "due": f"2026-{i % 12 + 1:02d}-01"}
            for i in range(per)])
        for i, entity in enumerate(made):
            view.update(entity.id, {"title": f"note {i} of tenant {t}, edited"})
            if i % 10 == 0 and i + 1 < len(made):
                view.link(entity.id, "next", made[i + 1].id)
            if i % 50 == 49:
                view.delete(entity.id)
        total += view.last_seq()
    return total + mem.last_seq()


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 1e6, 2)


def run(*, entities: int, tenants: int, repeat: int, workdir: Path | None) -> dict[str, Any]:
    times: dict[str, list[float]] = {"export": [], "import": [], "snapshot": [], "restore": []}
    sizes: dict[str, float] = {}
    embedded: dict[str, int] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        mem = _open(root / "store")
        try:
            started = time.perf_counter()
            events = fill(mem, entities, tenants)
            fill_s = time.perf_counter() - started
            head = mem.verify_audit().last_hash
            for i in range(repeat):
                bundle, snap = root / f"b{i}.jsonl.gz", root / f"snap{i}"
                t0 = time.perf_counter()
                mem.export(bundle)
                t1 = time.perf_counter()
                counting = {"import": CountingEmbedder(), "restore": CountingEmbedder()}
                with Memory.import_bundle(bundle, root / f"imported{i}",
                                          embedder=counting["import"],
                                          vector_index=ExactIndex()) as imported:
                    t2 = time.perf_counter()
                    assert imported.verify_audit().last_hash == head
                t3 = time.perf_counter()
                mem.snapshot(snap)
                t4 = time.perf_counter()
                with Memory.restore_snapshot(snap, root / f"restored{i}",
                                             embedder=counting["restore"],
                                             vector_index=ExactIndex()) as restored:
                    t5 = time.perf_counter()
                    assert restored.verify_audit().last_hash == head
                times["export"].append(t1 - t0)
                times["import"].append(t2 - t1)
                times["snapshot"].append(t4 - t3)
                times["restore"].append(t5 - t4)
                embedded = {k: e.texts for k, e in counting.items()}
                sizes = {"bundle_mb": _size_mb(bundle), "snapshot_mb": _size_mb(snap),
                         "store_mb": _size_mb(root / "store")}
                for path in (bundle, snap, root / f"imported{i}", root / f"restored{i}"):
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else \
                        path.unlink(missing_ok=True)
        finally:
            mem.close()
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    return {"benchmark": "bench_bundle", "environment": environment(), "entities": entities,
            "tenants": tenants, "events": events, "fill_s": round(fill_s, 1),
            "repeat": repeat, "median_s": medians, "sizes": sizes,
            "texts_embedded": embedded,
            "import_events_per_s": round(events / medians["import"]) if medians["import"]
            else None}


def markdown(doc: Mapping[str, Any]) -> str:
    m, s, e = doc["median_s"], doc["sizes"], doc["texts_embedded"]
    rows = [["bundle (export / import, checked)", m["export"], m["import"], s["bundle_mb"],
             e["import"]],
            ["snapshot (bundle, archives, cache / restore, checked)", m["snapshot"],
             m["restore"], s["snapshot_mb"], e["restore"]]]
    return (f"# Bundles and snapshots: {doc['entities']:,} entities, {doc['events']:,} "
            f"events, {doc['tenants']} tenants (store {s['store_mb']} MB; medians of "
            f"{doc['repeat']})\n\n"
            + markdown_table(["format", "write s", "read back s", "size MB",
                              "texts embedded on read back"], rows)
            + "\nRead back: a new memory opened, its vector index rebuilt (hash embedder); "
              "an import first checks the whole chain and every entity against its events.\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    doc = run(entities=args.entities, tenants=args.tenants, repeat=args.repeat,
              workdir=args.workdir)
    publish(doc, args.out, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
