"""The indexer: crash between commit and upsert, reconcile, reindex, model change, batching."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.config import Settings
from dmf_hybrid._internal.mirrors.vectors import LocalVectors
from dmf_hybrid._internal.models import ReconcileCounts
from dmf_hybrid._internal.search.ranking import ranked
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel

ROOT = Path(__file__).resolve().parents[2]
MODES = ("vector", "keyword", "hybrid")
NO_DRIFT = {"missing": 0, "stale": 0, "orphan": 0}


class CountingEmbedder:
    """A real embedder wrapped to count its calls and the texts it embedded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.texts = 0

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return np.asarray(self.inner.embed(texts))


def drift(counts: ReconcileCounts) -> dict[str, int]:
    return {key: getattr(counts, key) for key in NO_DRIFT}


def ids_of(mem: Memory, text: str, mode: str = "vector", **kw: Any) -> list[str]:
    return [h.entity.id for h in mem.search("Poi", text, mode=mode, **kw).hits]


# ---------------------------------------------------------------- crash between commit and upsert


def test_a_failed_upsert_leaves_the_write_committed_and_the_outbox_pending(
        tmp_path: Path) -> None:
    path = tmp_path / "mem"
    mem = Memory.open(path, embedder=HashEmbedder())
    define_travel(mem)
    # a caller-chosen ID: the test renames it (an ID derived from the name could not change)
    changed = mem.create("Poi", {"name": "Pantheon", "city": "Rome"}, id="pantheon")
    mem.create("Poi", {"name": "Colosseum", "city": "Rome"})
    assert ids_of(mem, "Pantheon")[0] == changed.id  # the mirrors are loaded now

    def crash(stage: str) -> None:
        if stage == "before_vector_upsert":
            raise RuntimeError("indexer killed")

    mem.engine.indexer.fault = crash
    new = mem.create("Poi", {"name": "Trevi fountain", "city": "Rome"})
    mem.update(changed.id, {"name": "Pantheon temple"})
    assert mem.get(new.id).version == 1 and mem.get(changed.id).version == 2  # committed
    assert mem.engine.indexer.pending() == 2
    for mode in MODES:  # the mirrors follow the store whatever the index did: found at once
        assert ids_of(mem, "Trevi fountain", mode)[0] == new.id
        hit = mem.search("Poi", "Pantheon temple", mode=mode).hits[0]
        assert hit.entity.id == changed.id and hit.entity.version == 2
    mem.close()  # applying the pending rows fails again: they stay pending

    mem = Memory.open(path, embedder=HashEmbedder())
    assert mem.engine.indexer.pending() == 0
    for mode in MODES:
        assert ids_of(mem, "Trevi fountain", mode)[0] == new.id
        hit = mem.search("Poi", "Pantheon temple", mode=mode).hits[0]
        assert hit.entity.id == changed.id and hit.entity.version == 2
    assert drift(mem.reconcile()) == NO_DRIFT
    mem.close()


class DownEmbedder(CountingEmbedder):
    """An embedder that fails while ``down`` (a model server that is away)."""

    down = False

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.down:
            self.calls += 1
            raise RuntimeError("the embedder is down")
        return super().embed(texts)


def test_a_search_applies_what_a_failed_indexing_left_pending(tmp_path: Path) -> None:
    """A write whose indexing failed is committed and its outbox row waits; the next search
    applies it first (no later commit needed), so the entity is found by search too. While the
    failure lasts, searches still answer, and try again at most once a second."""
    embedder = DownEmbedder(HashEmbedder())
    mem = Memory.open(tmp_path / "mem", embedder=embedder, vector_index=ExactIndex())
    define_travel(mem)
    mem.create("Poi", {"name": "Colosseum", "city": "Rome"})
    assert ids_of(mem, "Colosseum in Rome")  # the mirrors are loaded
    embedder.down = True
    trevi = mem.create("Poi", {"name": "Trevi fountain", "city": "Rome"})
    assert mem.get(trevi.id).version == 1 and mem.engine.indexer.pending() == 1
    calls = embedder.calls
    # the query's own vector cannot be made either: a keyword search still answers (from
    # the mirrors as they were: the pending row needs its vector too), and the searches of
    # the next second do not try the pending row again
    for _ in range(5):
        assert ids_of(mem, "Colosseum", "keyword")
    assert embedder.calls - calls == 1 and mem.engine.indexer.pending() == 1
    embedder.down = False
    mem.engine.indexer._retry_at = 0.0  # (the second has passed)
    assert ids_of(mem, "Trevi fountain in Rome")[0] == trevi.id
    assert mem.engine.indexer.pending() == 0
    mem.close()


def test_a_process_killed_between_commit_and_upsert_converges_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "mem"
    mem = Memory.open(path, embedder=HashEmbedder())
    define_travel(mem)
    mem.create("Poi", {"name": "Colosseum", "city": "Rome"})
    mem.close()
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from dmf_hybrid import HashEmbedder, Memory
        mem = Memory.open({str(path)!r}, embedder=HashEmbedder())
        def kill(stage):
            if stage == "before_vector_upsert":
                os._exit(9)  # dies right after the commit, before Chroma sees anything
        mem.engine.indexer.fault = kill
        mem.create("Poi", {{"name": "Trevi fountain", "city": "Rome"}})
    """)
    done = subprocess.run([sys.executable, "-c", script], timeout=120, capture_output=True)
    assert done.returncode == 9, done.stderr.decode()[-2000:]
    # opened without replay (as the HTTP service does): the backlog waits, searches stay
    # correct (the exact plan scores the DuckDB cache), and catching up indexes it
    mem = Memory.open(path, embedder=HashEmbedder(), replay=False)
    assert mem.engine.indexer.pending() == 1
    new = mem.query("Poi", {"name": "Trevi fountain"}).items[0]
    assert ids_of(mem, "Trevi fountain", "vector")[0] == new.id
    mem.engine.catch_up()
    assert mem.engine.indexer.pending() == 0
    mem.close()
    mem = Memory.open(path, embedder=HashEmbedder())
    assert mem.engine.indexer.pending() == 0
    for mode in MODES:
        assert ids_of(mem, "Trevi fountain", mode)[0] == new.id
    assert drift(mem.reconcile()) == NO_DRIFT
    mem.close()


# ---------------------------------------------------------------- reconcile and reindex


def test_reconcile_counts_and_repairs_each_kind_of_drift(chroma_mem: Memory) -> None:
    mem = chroma_mem
    pois = mem.create_many("Poi", [{"name": f"place {i}", "city": "Rome"} for i in range(20)])
    name = mem.engine.indexer.collection("Poi")
    chroma = mem.engine.vectors
    good = dict(chroma.records(name))
    vec = mem.engine.embed_query("anything")
    chroma.delete(name, [pois[0].id])                                   # missing
    chroma.upsert(name, ["Poi_orphan00000000000"], vec[None, :],        # orphan
                  [{"type": "Poi", "tenant": "default", "version": 1, "text_hash": "x"}])
    chroma.upsert(name, [pois[1].id], vec[None, :],                     # stale text hash
                  [{**good[pois[1].id], "text_hash": "0" * 64}])
    chroma.upsert(name, [pois[2].id], vec[None, :],                     # stale version
                  [{**good[pois[2].id], "version": 7}])
    counts = mem.reconcile()
    assert counts.model_dump() == {"checked": 20, "missing": 1, "stale": 2, "orphan": 1,
                                   "unreachable_by_id": 0}
    assert chroma.records(name) == good
    assert drift(mem.reconcile()) == NO_DRIFT
    # the repaired vectors are the right ones: each is the embedding of its entity's text
    # (read back by ID: an HNSW query may not reach a re-added vector)
    stored = chroma.vectors_of(name, [poi.id for poi in pois[:3]])
    for poi in pois[:3]:
        own = mem.engine.embedder.embed([f"{poi.fields()['name']} in Rome"])[0]
        assert np.allclose(stored[poi.id], own, atol=1e-6)


def test_reindex_rebuilds_the_index_from_the_cache(chroma_mem: Memory) -> None:
    mem = chroma_mem
    mem.create_many("Poi", [{"name": f"place {i}", "city": "Rome"} for i in range(12)])
    mem.create("Trip", {"destination": "Rome"})
    name = mem.engine.indexer.collection("Poi")
    before = mem.engine.vectors.records(name)
    first = [h.entity.id for h in mem.search("Poi", "place 3", k=5).hits]
    mem.engine.vectors.drop(name)
    assert mem.reindex().model_dump() == {"types": 2, "entities": 13}
    assert mem.engine.vectors.records(name) == before
    assert [h.entity.id for h in mem.search("Poi", "place 3", k=5).hits] == first
    assert drift(mem.reconcile()) == NO_DRIFT


# ---------------------------------------------------------------- model change


def test_a_model_change_re_embeds_everything_and_is_audited(tmp_path: Path) -> None:
    path = tmp_path / "mem"
    mem = Memory.open(path, embedder=HashEmbedder())
    define_travel(mem)
    pois = mem.create_many("Poi", [{"name": f"place {i}", "city": "Oslo"} for i in range(10)])
    assert not [e for e in mem.events() if e.op == "reindex"]
    mem.close()

    small = CountingEmbedder(HashEmbedder(dim=32))
    mem = Memory.open(path, embedder=small)
    events = [e for e in mem.events() if e.op == "reindex"]
    assert len(events) == 1
    assert events[0].meta == {"from": "hash-64", "to": "hash-32", "dim": 32}
    assert events[0].before == {"model_id": "hash-64"}
    assert small.texts == 10  # every entity embedded again
    res = mem.search("Poi", "place 4", mode="vector", k=1)
    assert res.receipt.model_id == "hash-32" and res.hits[0].entity.id == pois[4].id
    names = mem.engine.vectors.collections()
    assert mem.engine.indexer.collection("Poi") in names
    assert all("hash-64" not in n for n in names)  # the old model's vectors are gone
    assert mem.verify_audit().ok
    mem.close()

    again = CountingEmbedder(HashEmbedder(dim=32))
    mem = Memory.open(path, embedder=again)
    assert len([e for e in mem.events() if e.op == "reindex"]) == 1  # same model: no event
    assert again.calls == 0
    mem.close()

    back = CountingEmbedder(HashEmbedder())
    mem = Memory.open(path, embedder=back)
    assert len([e for e in mem.events() if e.op == "reindex"]) == 2
    assert back.calls == 0  # the old model's vectors are still cached
    assert mem.search("Poi", "place 4", mode="vector", k=1).hits[0].entity.id == pois[4].id
    mem.close()


# ---------------------------------------------------------------- batching and the cache


def test_create_many_embeds_in_batches_and_reindex_never_re_embeds(tmp_path: Path) -> None:
    counting = CountingEmbedder(HashEmbedder())
    mem = Memory.open(tmp_path / "mem", embedder=counting, vector_index=ExactIndex(),
                      settings=Settings(embed_batch_size=64))
    define_travel(mem)
    rows: list[dict[str, Any]] = [{"name": f"place {i}", "city": "Rome"} for i in range(300)]
    rows += [{"name": f"place {i}", "city": "Rome", "cost": 5} for i in range(300, 310)]
    rows += [{"name": "place 0", "city": "Rome", "rating": 3}]  # same identity: no-op
    entities = mem.create_many("Poi", rows)
    assert len({e.id for e in entities}) == 310
    assert counting.texts == 310
    assert counting.calls == math.ceil(310 / 64)

    calls = counting.calls
    assert mem.reindex().entities == 310
    assert drift(mem.reconcile()) == NO_DRIFT
    assert mem.search("Poi", "place 7", mode="vector").hits[0].entity.id == entities[7].id
    assert counting.calls == calls + 1  # only the query was embedded

    mem.update(entities[1].id, {"cost": 9})  # same text: the cached vector is reused
    assert counting.calls == calls + 1
    one = mem.create("Poi", {"name": "place 1", "city": "Rome"}, id="Poi_one")  # a cached text
    assert counting.calls == calls + 1
    mem.update(one.id, {"name": "renamed place"})  # a chosen ID may change its identity
    assert counting.calls == calls + 2
    mem.create("Poi", {"name": "renamed place", "city": "Rome", "cost": 1}, id="Poi_twin")
    assert counting.calls == calls + 2  # an identical text is embedded once
    mem.close()


@pytest.mark.parametrize("size", [1, 63, 64, 65, 200])
def test_batches_never_exceed_the_configured_size(tmp_path: Path, size: int) -> None:
    sizes: list[int] = []

    class Recording(CountingEmbedder):
        def embed(self, texts: list[str]) -> np.ndarray:
            sizes.append(len(texts))
            return super().embed(texts)

    mem = Memory.open(tmp_path / "mem", embedder=Recording(HashEmbedder()),
                      vector_index=ExactIndex(), settings=Settings(embed_batch_size=64))
    define_travel(mem)
    mem.create_many("Poi", [{"name": f"p {i}", "city": "Rome"} for i in range(size)])
    assert sum(sizes) == size and max(sizes) <= 64 and len(sizes) == math.ceil(size / 64)
    mem.close()


# ---------------------------------------------------------------- the exact mirror


def test_the_mirror_keeps_rows_keys_and_metadata_in_step() -> None:
    rng = np.random.default_rng(0)
    local = LocalVectors(8)
    vectors = {f"e{i:03d}": rng.standard_normal(8).astype(np.float32) for i in range(200)}
    keys = {eid: 1000 + i for i, eid in enumerate(vectors)}
    ids = list(vectors)
    tenant = {e: "a" if i % 3 else "b" for i, e in enumerate(ids)}
    local.upsert(ids, [keys[e] for e in ids], np.stack([vectors[e] for e in ids]),
                 [tenant[e] for e in ids], [f"h{e}" for e in ids])
    gone = ids[::4]
    local.delete([(tenant[e], e) for e in gone] + [("a", "unknown")])
    # the right ID in the wrong tenant is not that entity: nothing is deleted
    local.delete([("b" if tenant[e] == "a" else "a", e) for e in ids[1:3]])
    live = [e for e in ids if e not in gone]
    assert len(local) == len(live) and not any(local.has(tenant[e], e) for e in gone)
    assert all(local.has(tenant[e], e) and not local.has("z", e) for e in live)
    assert all(local.text_hash_of(tenant[e], e) == f"h{e}" for e in live)
    assert all(local.text_hash_of("z", e) is None for e in live)
    rows = local.rows_of_keys(np.array([keys[e] for e in ids[:40]], dtype=np.uint64))
    assert rows is not None
    first = [e for e in ids[:40] if tenant[e] == "a"]
    assert sorted(rows.tolist()) == sorted(
        local.rows_of_ids("a", first).tolist() + local.rows_of_ids("b", ids[:40]).tolist())
    query = rng.standard_normal(8)
    query /= np.linalg.norm(query)
    found, scores = local.head(query, 5)
    truth = sorted(live, key=lambda e: -float(
        np.dot(vectors[e] / np.linalg.norm(vectors[e]), query)))[:5]
    assert ranked(found, scores, 5)[0][0] == truth[0]
    assert [e for e, _ in ranked(found, scores, 5)] == truth
    # a row's score does not depend on the batch it was scored in
    alone = dict(ranked(*local.head(query, 1, local.rows_of_ids(tenant[truth[2]],
                                                                [truth[2]])), 1))
    assert alone[truth[2]] == dict(ranked(found, scores, 5))[truth[2]]


def test_two_tenants_rows_with_one_id_are_two_rows() -> None:
    local = LocalVectors(4)
    eye = np.eye(4, dtype=np.float32)
    local.upsert(["trip-1", "trip-1", "x"], [1, 2, 3], eye[:3], ["default", "beta", "beta"],
                 ["hd", "hb", "hx"])
    assert len(local) == 3
    assert local.text_hash_of("default", "trip-1") == "hd"
    assert local.text_hash_of("beta", "trip-1") == "hb"
    assert local.rows_of_ids("default", ["trip-1"]).tolist() == [0]
    assert local.rows_of_ids("beta", ["trip-1", "x"]).tolist() == [1, 2]
    assert local.rows_of_tenant("beta").tolist() == [1, 2]
    # replacing one tenant's row leaves the other's alone
    local.upsert(["trip-1"], [2], eye[3:4], ["beta"], ["hb2"])
    assert local.text_hash_of("default", "trip-1") == "hd"
    assert local.text_hash_of("beta", "trip-1") == "hb2"
    # deleting one moves the last row into its place, under the right (tenant, id)
    local.delete([("default", "trip-1")])
    assert len(local) == 2 and not local.has("default", "trip-1")
    assert local.rows_of_ids("beta", ["x"]).tolist() == [0]
    assert local.rows_of_keys(np.array([2, 3], dtype=np.uint64)).tolist() == [0, 1]
    ids, _ = local.head(np.array([0, 0, 1, 0], dtype=np.float64), 1,
                        local.rows_of_tenant("beta"))
    assert ids[0] == "x"


def test_a_hash_collision_switches_key_mapping_off() -> None:
    local = LocalVectors(4)
    local.upsert(["a", "b"], [7, 7], np.eye(4, dtype=np.float32)[:2], ["t", "t"], ["x", "y"])
    assert local.rows_of_keys(np.array([7], dtype=np.uint64)) is None
    assert local.collided
    assert local.rows_of_ids("t", ["b"]).tolist() == [1]


def test_rows_found_before_a_move_are_found_again_before_scoring() -> None:
    eye = np.eye(4, dtype=np.float32)
    local = LocalVectors(4)
    local.upsert(["a", "b", "c"], [1, 2, 3], eye[:3], ["t"] * 3, ["ha", "hb", "hc"])
    query = np.array([0, 0, 1, 0], dtype=np.float64)
    finds: list[int] = []
    memo: dict[str, Any] = {}

    def find() -> np.ndarray:
        rows = local.rows_of_ids("t", ["a", "c"])
        finds.append(len(finds))
        if len(finds) == 1:
            # an entity goes while the rows are being found: "c" moves into row 0, where "a"
            # was, so row 2 ("c" until now) is past the end
            local.delete([("t", "a")])
        return rows

    found = local.top(query, 2, find, memo)
    assert found is not None and found[0] == ["c"]
    assert len(finds) == 2
    # the same candidate list maps to the same rows until something moves
    again = local.top(query, 2, find, memo)
    assert again is not None and again[0] == ["c"] and len(finds) == 2
    local.upsert(["d"], [4], eye[3:4], ["t"], ["hd"])
    local.top(query, 2, find, memo)
    assert len(finds) == 3
    # a stale generation is refused by head itself
    assert local.head(query, 1, np.array([0]), local.generation - 1) is None
    # a rebuilt mirror never matches an old mirror's memo, even at the same size
    fresh = LocalVectors(4)
    fresh.upsert(["x", "y", "z"], [1, 2, 3], eye[:3], ["t"] * 3, ["hx", "hy", "hz"])
    assert fresh.generation != local.generation


def test_mirrors_loaded_in_batches_answer_as_loaded_at_once(mem: Memory,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from dmf_hybrid._internal import mirror_load

    cities = ["Shanghai", "Hangzhou", "Beijing", "上海"]
    mem.create_many("Poi", [{"name": f"place {i} by the river", "city": cities[i % 4]}
                            for i in range(23)])
    mem.delete(mem.query("Poi", where={"city": "Beijing"}, limit=1).items[0].id)

    def answers() -> list[list[tuple[str, float]]]:
        mem.engine.indexer.forget_local()  # rebuilt on the next search
        return [[(h.entity.id, h.score) for h in mem.search(
            "Poi", text, k=30, mode=mode, where=where).hits]
            for text in ("river place 7", "上海 place")
            for mode in ("vector", "keyword", "hybrid")
            for where in (None, {"city": "Shanghai"})]

    at_once = answers()
    monkeypatch.setattr(mirror_load, "LOAD_BATCH", 3)
    assert answers() == at_once
    assert len(mem.engine.indexer.local("Poi") or ()) == 22
    assert all(at_once)


@pytest.mark.timeout(120)
def test_a_mirror_load_racing_commits_never_deadlocks(tmp_path: Path) -> None:
    # a load that finds a committed row whose vector the commit's drain has not cached yet
    # embeds and caches it itself; it must take the locks in the commit's order
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(mem)
    indexer = mem.engine.indexer
    store = mem._store
    at = store.listeners.index(indexer.on_commit)
    drain = store.listeners[at]

    def slow_hook(batch: Any) -> None:
        time.sleep(0.01)  # the committed row waits a while for its vector
        drain(batch)

    store.listeners[at] = slow_hook
    poi = store.type_of("Poi", "default")
    done = threading.Event()
    failures: list[BaseException] = []

    def load() -> None:
        try:
            while not done.is_set():
                indexer.forget_local()
                indexer.ensure_local(poi)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    def write() -> None:
        try:
            for i in range(40):
                mem.create("Poi", {"name": f"cafe {i}", "city": "Oslo"})
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (load, write)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "deadlocked"
    assert failures == []
    indexer.ensure_local(poi)
    assert len(mem.search("Poi", "cafe", k=50, mode="vector").hits) == 40
    mem.close()


def test_few_and_many_hash_lookups_and_cache_writes_agree(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from dmf_hybrid._internal.store import embedding_cache, mirror_reads

    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(mem)
    ours = mem.engine.indexer
    rng = np.random.default_rng(3)
    vectors = {f"h{i}": rng.standard_normal(64).astype(np.float32) for i in range(6)}
    ours._cache(list(vectors.items())[:4])
    ours._cache(list(vectors.items())[2:])  # two of them again: dropped, not a conflict
    with mem._store.db.write() as con:  # the same text hash under another model
        con.execute("INSERT INTO embeddings VALUES ('other-model', 'h9', 2, [1.0, 0.0])")
    asked = ["h0", "h3", "h5", "h9", "missing"]
    few = ours.cached_vectors(asked)
    monkeypatch.setattr(embedding_cache, "POINT_LOOKUP_MAX", 0)  # the scanning forms
    monkeypatch.setattr(mirror_reads, "POINT_LOOKUP_MAX", 0)
    many = ours.cached_vectors(asked)
    assert sorted(few) == sorted(many) == ["h0", "h3", "h5"]
    for h in few:
        np.testing.assert_array_equal(few[h], many[h])
        np.testing.assert_array_equal(few[h], vectors[h])
    ours._cache([("h1", vectors["h1"]), ("h7", vectors["h0"])])  # ON CONFLICT form
    count = mem._store.db.fetchone("SELECT count(*) FROM embeddings WHERE model_id = ?",
                                   [ours.embedder.model_id])
    assert count is not None and count[0] == 7
    # the few-IDs row lookup answers as the list form: live rows only, by ID then tenant
    poi = mem.get_type("Poi")
    made = [mem.create("Poi", {"name": f"stop {i}", "city": "Oslo"}) for i in range(3)]
    mem.delete(made[1].id)
    keys = [("default", e.id) for e in made] + [("beta", made[0].id)]
    listed = ours._live_rows(poi, keys)
    monkeypatch.setattr(mirror_reads, "POINT_LOOKUP_MAX", 64)
    assert ours._live_rows(poi, keys) == listed
    assert [r[0] for r in listed] == sorted([made[0].id, made[2].id])
    assert ours._live_rows(poi, []) == []
    mem.close()
