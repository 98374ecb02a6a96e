"""Search: fresh content only, exact recall under filters, determinism, as_of replay, scoping.

Everything runs on real DuckDB with the hash embedder, against both vector indexes: the exact
in-memory one (``mem``) and embedded Chroma (``chroma_mem``). The ``slow`` tests use the real
sentence-transformers model.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from dmf_hybrid import (
    DMFError,
    FilterError,
    HashEmbedder,
    Memory,
    NotFound,
    SchemaError,
    ValidationError,
)
from dmf_hybrid._internal.config import Settings
from dmf_hybrid._internal.models import SearchResult
from dmf_hybrid._internal.vector.exact import ExactIndex, normalise_rows
from tests.conftest import define_travel, tenant_like
from tests.store import assert_unchanged, evaluate

ROOT = Path(__file__).resolve().parents[2]
MODES = ("vector", "keyword", "hybrid")
BACKENDS = ("exact", "chroma")


def open_mem(path: Path, backend: str, **settings: Any) -> Memory:
    """A memory with the hash embedder on the exact index or on embedded Chroma."""
    index = ExactIndex() if backend == "exact" else None
    return Memory.open(path, embedder=HashEmbedder(), vector_index=index,
                       settings=Settings(**settings))


@pytest.fixture(params=BACKENDS)
def any_mem(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    """A travel memory on each vector backend."""
    m = open_mem(tmp_path / "mem", request.param)
    define_travel(m)
    yield m
    m.close()


def summary(res: SearchResult) -> list[tuple[str, float, dict[str, tuple[int, float]], int]]:
    """(id, score, legs, version) of each hit: what determinism compares."""
    return [(h.entity.id, h.score, {leg: (s.rank, s.score) for leg, s in sorted(h.legs.items())},
             h.entity.version) for h in res.hits]


def assert_current(mem: Memory, res: SearchResult) -> None:
    """Every hit is a live entity whose content is exactly what DuckDB holds now."""
    for hit in res.hits:
        now = mem.get(hit.entity.id)
        assert hit.entity.version == now.version
        assert hit.entity.fields() == now.fields()


# ---------------------------------------------------------------- freshness


@pytest.mark.parametrize("mode", MODES)
def test_updated_deleted_and_erased_entities_never_show_old_content(any_mem: Memory,
                                                                    mode: str) -> None:
    mem = any_mem
    # a caller-chosen ID: the test renames it (an ID derived from the name could not change)
    louvre = mem.create("Poi", {"name": "Louvre museum", "city": "Paris"}, id="louvre")
    mem.create("Poi", {"name": "Orsay museum", "city": "Paris"})
    tower = mem.create("Poi", {"name": "Eiffel tower", "city": "Paris"})
    found = mem.search("Poi", "Louvre museum", mode=mode)
    assert found.hits[0].entity.id == louvre.id

    mem.update(louvre.id, {"name": "Pompidou centre"})
    res = mem.search("Poi", "Louvre museum", mode=mode)
    assert all(h.entity.fields()["name"] != "Louvre museum" for h in res.hits)
    assert_current(mem, res)
    res = mem.search("Poi", "Pompidou centre", mode=mode)
    assert res.hits[0].entity.id == louvre.id and res.hits[0].entity.version == 2

    mem.delete(tower.id)
    for text in ("Eiffel tower", "Paris"):
        res = mem.search("Poi", text, mode=mode)
        assert tower.id not in [h.entity.id for h in res.hits]
        assert_current(mem, res)
    mem.restore(tower.id)
    assert mem.search("Poi", "Eiffel tower", mode=mode).hits[0].entity.id == tower.id

    mem.erase(tower.id)
    res = mem.search("Poi", "Eiffel tower", mode=mode)
    assert tower.id not in [h.entity.id for h in res.hits]
    name = mem.engine.indexer.collection("Poi")
    assert tower.id not in mem.engine.vectors.records(name)
    assert not mem.engine.indexer.local("Poi").has(mem.tenant, tower.id)


def test_stale_or_orphan_vectors_in_the_index_never_reach_the_caller(tmp_path: Path) -> None:
    """Fail closed: whatever Chroma proposes, DuckDB decides (ANN path forced)."""
    mem = open_mem(tmp_path / "mem", "chroma", exact_threshold=0)
    define_travel(mem)
    pois = mem.create_many("Poi", [{"name": f"place {i}", "city": "Rome"} for i in range(30)])
    gone = pois[0]
    mem.delete(gone.id)
    name = mem.engine.indexer.collection("Poi")
    query = mem.engine.embed_query("Colosseum arena")
    meta = {"type": "Poi", "tenant": "default", "version": 1, "text_hash": "0" * 64}
    # the deleted entity and an unknown ID come back into Chroma as perfect matches
    mem.engine.vectors.upsert(name, [gone.id, "Poi_doesnotexist"], np.stack([query, query]),
                              [meta, meta])
    res = mem.search("Poi", "Colosseum arena", mode="vector")
    assert res.receipt.plan == "ann"
    ids = [h.entity.id for h in res.hits]
    assert gone.id not in ids and "Poi_doesnotexist" not in ids
    assert len(ids) == 10
    assert_current(mem, res)
    mem.close()


# ---------------------------------------------------------------- recall under filters


class Item(BaseModel):
    """A synthetic searchable item with a filterable bucket."""

    code: int
    title: str
    bucket: int
    colour: str


WORDS = [f"w{i}" for i in range(120)]
N_ITEMS = 3000
SELECTIVITY = {"0.1%": {"bucket": {"$lt": 1}}, "1%": {"bucket": {"$lt": 10}},
               "10%": {"bucket": {"$lt": 100}}, "50%": {"bucket": {"$lt": 500}},
               "100%": None}


def item_rows(n: int = N_ITEMS, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"code": i, "title": " ".join(rng.sample(WORDS, 5)), "bucket": i % 1000,
             "colour": rng.choice(["red", "green", "blue"])} for i in range(n)]


def brute_force(rows: list[dict[str, Any]], ids: list[str], text: str,
                where: dict[str, Any] | None, k: int = 10) -> list[str]:
    """Top-k IDs by numpy over the same HashEmbedder vectors with a Python filter."""
    return [eid for eid, _ in brute_force_scored(rows, ids, text, where, k)]


def brute_force_scored(rows: list[dict[str, Any]], ids: list[str], text: str,
                       where: dict[str, Any] | None, k: int = 10) -> list[tuple[str, float]]:
    """Top-k (ID, cosine) by numpy over the same HashEmbedder vectors with a Python filter."""
    emb = HashEmbedder()
    keep = [i for i, row in enumerate(rows) if evaluate(where, row)]
    matrix = normalise_rows(emb.embed([f"{rows[i]['title']} {rows[i]['colour']}" for i in keep]))
    query = emb.embed([text])[0].astype(np.float64)
    scores = (matrix.astype(np.float64) * (query / np.linalg.norm(query))).sum(axis=1)
    order = sorted(range(len(keep)), key=lambda j: (-scores[j], ids[keep[j]]))
    return [(ids[keep[j]], float(scores[j])) for j in order[:k]]


@pytest.fixture(scope="module", params=[("exact", None), ("exact", 5), ("chroma", 5)],
                ids=["exact-index", "exact-index-ann-path", "chroma-ann-path"])
def items(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[Memory, list[dict[str, Any]], list[str]]]:
    backend, threshold = request.param
    settings = {} if threshold is None else {"exact_threshold": threshold}
    mem = open_mem(tmp_path_factory.mktemp("items") / "mem", backend, **settings)
    mem.define(Item, identity=["code"], embed="{title} {colour}")
    rows = item_rows()
    ids = [e.id for e in mem.create_many("Item", rows)]
    yield mem, rows, ids
    mem.close()


@pytest.mark.parametrize("selectivity", list(SELECTIVITY))
def test_filtered_recall_is_exact_at_every_selectivity(
        items: tuple[Memory, list[dict[str, Any]], list[str]], selectivity: str) -> None:
    mem, rows, ids = items
    where = SELECTIVITY[selectivity]
    rng = random.Random(selectivity)
    plans = set()
    for _ in range(5):
        text = " ".join(rng.sample(WORDS, 3))
        res = mem.search("Item", text, where=where, k=10, mode="vector")
        truth = brute_force(rows, ids, text, where)
        got = [h.entity.id for h in res.hits]
        assert len(set(got) & set(truth)) / len(truth) == 1.0  # recall@10
        assert got == truth  # and the same order, ties broken by ID
        assert res.receipt.candidates == sum(evaluate(where, r) for r in rows)
        plans.add(res.receipt.plan)
    threshold = mem.settings.exact_threshold
    if res.receipt.candidates <= threshold:
        assert plans == {"exact"}
    elif mem.settings.exact_threshold == 5 and selectivity in ("50%", "100%"):
        assert "ann" in plans  # the ANN path really ran


@pytest.mark.parametrize("selectivity", list(SELECTIVITY))
def test_keyword_and_hybrid_are_exact_under_filters_on_every_plan(
        items: tuple[Memory, list[dict[str, Any]], list[str]], selectivity: str) -> None:
    """Candidates listed by hash (or by ID) restrict both legs exactly, on the exact plan and
    on the ANN plan (where the list confirms ANN proposals instead of per-ID lookups)."""
    from dmf_hybrid._internal.mirrors.keyword import KeywordIndex
    from dmf_hybrid._internal.mirrors.text import FieldedDocument, TypeAnalyzer
    from dmf_hybrid._internal.search.fusion import fuse

    mem, rows, ids = items
    where = SELECTIVITY[selectivity]
    # BM25 statistics of every document, as the tenant's index; field values for the exact leg
    truth_index = KeywordIndex(analyzer=TypeAnalyzer())
    truth_index.upsert([(eid, FieldedDocument(f"{row['title']} {row['colour']}", (
        ("english", row["title"]), ("english", row["colour"]))))
        for eid, row in zip(ids, rows, strict=True)])
    candidates = [eid for eid, row in zip(ids, rows, strict=True) if evaluate(where, row)]
    rng = random.Random(f"kw{selectivity}")
    for _ in range(4):
        text = " ".join(rng.sample(WORDS, 3))
        keyword = truth_index.search(text, 100, candidates=candidates)
        res = mem.search("Item", text, where=where, k=10, mode="keyword")
        assert [(h.entity.id, h.score) for h in res.hits] == [
            (eid, round(score, 6)) for eid, score in keyword[:10]]
        vector = brute_force_scored(rows, ids, text, where, k=100)
        legs = {"vector": vector, "keyword": keyword, "exact": truth_index.exact(text, keyword)}
        fused = fuse(legs, mem.settings.fusion, k=mem.settings.rrf_k, depth=100)
        res = mem.search("Item", text, where=where, k=10, mode="hybrid")
        assert [h.entity.id for h in res.hits] == [eid for eid, _ in fused[:10]]
        assert res.receipt.candidates == len(candidates)
        assert_current(mem, res)


# ---------------------------------------------------------------- determinism


class Note(BaseModel):
    """A note whose text may repeat: identical vectors must tie and be ordered by ID."""

    key: str
    text: str


def fill_notes(mem: Memory) -> None:
    mem.define(Note, identity=["key"], embed="{text}")
    texts = ["red apple pie", "green apple tart", "apple", "banana bread", "apple pie"]
    mem.create_many("Note", [{"key": f"k{i:03d}", "text": texts[i % len(texts)]}
                             for i in range(60)])


QUERIES = [("apple pie", None), ("bread", {"key": {"$gte": "k030"}}), ("apple", None)]


def run_queries(mem: Memory) -> dict[str, Any]:
    return {f"{mode}|{text}|{json.dumps(where)}": summary(
        mem.search("Note", text, where=where, k=12, mode=mode))
        for mode in MODES for text, where in QUERIES}


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_are_identical_across_calls_and_processes(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "mem"
    mem = open_mem(path, backend)
    fill_notes(mem)
    first = run_queries(mem)
    assert run_queries(mem) == first
    for key, hits in first.items():
        scores = [(-h[1], h[0]) for h in hits]
        assert scores == sorted(scores), f"{key}: not score desc, then ID"
    ties = [h for h in first["vector|apple|null"] if h[1] == first["vector|apple|null"][0][1]]
    assert len(ties) == 12 and [h[0] for h in ties] == sorted(h[0] for h in ties)
    mem.close()
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.search.test_search import open_mem, run_queries
        mem = open_mem(__import__("pathlib").Path({str(path)!r}), {backend!r})
        print(json.dumps(run_queries(mem)))
        mem.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True, env={"PYTHONHASHSEED": "123"})
    other = json.loads(out.stdout.strip().splitlines()[-1])
    assert other == json.loads(json.dumps(first))


# ---------------------------------------------------------------- as_of


def chosen_ids(mem: Any, rows: list[dict[str, Any]]) -> list[Any]:
    """Poi entities with caller-chosen IDs, so that a test may change their name or city
    (the identity an ID derived from it would name)."""
    with mem.transaction():
        return [mem.create("Poi", row, id=f"poi-{i}") for i, row in enumerate(rows)]


@pytest.mark.parametrize("mode", MODES)
def test_receipt_replays_with_as_of_after_later_writes(any_mem: Memory, mode: str) -> None:
    mem = any_mem
    pois = chosen_ids(mem, [{"name": f"{w} museum", "city": c} for w, c in
                            [("art", "Paris"), ("modern art", "Paris"), ("science", "Rome"),
                             ("war", "Rome"), ("art history", "Rome")]])
    where = {"city": {"$in": ["Paris", "Rome"]}}
    before = mem.search("Poi", "art museum", where=where, k=4, mode=mode)
    seq = before.receipt.resolved_at_seq
    assert seq == mem.last_seq()
    mem.update(before.hits[0].entity.id, {"name": "closed"})
    mem.delete(before.hits[1].entity.id)
    mem.create("Poi", {"name": "art museum", "city": "Rome"})
    mem.update(pois[3].id, {"city": "Paris"})
    # (an erase is the one write a replay cannot see past: erased content is gone from the log)
    now = mem.search("Poi", "art museum", where=where, k=4, mode=mode)
    assert summary(now) != summary(before)
    replay = mem.search("Poi", "art museum", where=where, k=4, mode=mode, as_of=seq)
    assert summary(replay) == summary(before)
    assert [h.entity.fields() for h in replay.hits] == [h.entity.fields() for h in before.hits]
    assert replay.receipt.resolved_at_seq == seq


# ---------------------------------------------------------------- scoping


def test_related_to_restricts_to_linked_entities(any_mem: Memory) -> None:
    mem = any_mem
    rome = mem.create("Trip", {"destination": "Rome"})
    paris = mem.create("Trip", {"destination": "Paris"})
    pois = mem.create_many("Poi", [{"name": f"museum {i}", "city": "Rome"} for i in range(8)])
    for p in pois[:3]:
        mem.link(rome.id, "includes", p.id)
    mem.link(paris.id, "includes", pois[3].id)
    for mode in MODES:
        res = mem.search("Poi", "museum", related_to={"relation": "includes", "from": rome.id},
                         mode=mode)
        assert sorted(h.entity.id for h in res.hits) == sorted(p.id for p in pois[:3])
        assert res.receipt.candidates == 3
    back = mem.search("Trip", "trip", mode="vector",
                      related_to={"relation": "includes", "from": pois[3].id, "direction": "in"})
    assert [h.entity.id for h in back.hits] == [paris.id]
    mem.unlink(rome.id, "includes", pois[0].id)
    res = mem.search("Poi", "museum", related_to={"relation": "includes", "from": rome.id})
    assert sorted(h.entity.id for h in res.hits) == sorted(p.id for p in pois[1:3])


def test_tenants_never_see_each_others_hits(any_mem: Memory) -> None:
    a, b = tenant_like(any_mem, "acme"), tenant_like(any_mem, "globex")
    a_ids = {a.create("Poi", {"name": f"secret lab {i}", "city": "Oslo"}).id for i in range(5)}
    alone = {mode: summary(a.search("Poi", "secret lab", mode=mode)) for mode in MODES}
    b_ids = {b.create("Poi", {"name": f"secret lab {i}", "city": "Bergen"}).id
             for i in range(40)}
    # another tenant's documents change neither the hits nor the scores (BM25 statistics too)
    assert {mode: summary(a.search("Poi", "secret lab", mode=mode)) for mode in MODES} == alone
    for mode in MODES:
        for where in (None, {"name": {"$ne": "x"}}):
            res_a = a.search("Poi", "secret lab", where=where, k=50, mode=mode)
            assert {h.entity.id for h in res_a.hits} == a_ids
            assert all(h.entity.tenant == "acme" for h in res_a.hits)
            res_b = b.search("Poi", "secret lab", where=where, k=50, mode=mode)
            assert {h.entity.id for h in res_b.hits} == b_ids
    trip = b.create("Trip", {"destination": "Bergen"})
    with pytest.raises(NotFound):
        a.search("Poi", "lab", related_to={"relation": "includes", "from": trip.id})


def test_tenants_are_isolated_on_the_ann_path(tmp_path: Path) -> None:
    mem = open_mem(tmp_path / "mem", "chroma", exact_threshold=0)
    define_travel(mem)
    a, b = tenant_like(mem, "acme"), tenant_like(mem, "globex")
    a.create_many("Poi", [{"name": f"lab {i}", "city": "Oslo"} for i in range(3)])
    b.create_many("Poi", [{"name": f"lab {i}", "city": "Bergen"} for i in range(60)])
    for where in (None, {"city": {"$ne": "x"}}):
        res = a.search("Poi", "lab", where=where, k=10, mode="vector")
        assert len(res.hits) == 3 and all(h.entity.tenant == "acme" for h in res.hits)
    mem.close()


# ---------------------------------------------------------------- bad input

BAD: list[tuple[str, dict[str, Any], type[DMFError], str]] = [
    ("unknown type", {"type_name": "Nope"}, NotFound, "type"),
    ("type not a string", {"type_name": 3}, ValidationError, "type"),
    ("unknown field", {"where": {"colour": "red"}}, FilterError, "where.colour"),
    ("field as SQL", {"where": {"name; DROP TABLE events": 1}}, FilterError,
     "where.name; DROP TABLE events"),
    ("wrong value type", {"where": {"cost": "cheap"}}, FilterError, "where.cost"),
    ("unknown operator", {"where": {"cost": {"$near": 3}}}, FilterError, "where.cost.$near"),
    ("empty text", {"text": "   "}, ValidationError, "text"),
    ("no text", {"text": None}, ValidationError, "text"),
    ("k zero", {"k": 0}, ValidationError, "k"),
    ("k too large", {"k": 1001}, ValidationError, "k"),
    ("k not int", {"k": "10"}, ValidationError, "k"),
    ("unknown mode", {"mode": "fuzzy"}, ValidationError, "mode"),
    ("related_to not a dict", {"related_to": "trip"}, FilterError, "related_to"),
    ("related_to missing from", {"related_to": {"relation": "includes"}}, FilterError,
     "related_to"),
    ("related_to extra key", {"related_to": {"relation": "includes", "from": "x", "depth": 2}},
     FilterError, "related_to"),
    ("related_to bad direction", {"related_to": {"relation": "includes", "from": "x",
                                                 "direction": "up"}},
     FilterError, "related_to.direction"),
    ("related_to unknown relation", {"related_to": {"relation": "visits", "from": "$trip"}},
     FilterError, "related_to.relation"),
    ("related_to unknown entity", {"related_to": {"relation": "includes",
                                                  "from": "Trip_000000000000000000"}},
     NotFound, "related_to.from"),
    ("as_of negative", {"as_of": -1}, ValidationError, "as_of"),
    ("non-searchable type", {"type_name": "Plain"}, SchemaError, "type"),
]


class Plain(BaseModel):
    """A type without an embed template."""

    label: str


@pytest.mark.parametrize(("case", "kwargs", "error", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_problem_and_changes_nothing(
        mem: Memory, case: str, kwargs: dict[str, Any], error: type[DMFError],
        field: str) -> None:
    mem.define(Plain)
    trip = mem.create("Trip", {"destination": "Rome"})
    mem.create("Poi", {"name": "Forum", "city": "Rome"})
    args: dict[str, Any] = {"type_name": "Poi", "text": "forum"}
    args.update(kwargs)
    if isinstance(args.get("related_to"), dict) and args["related_to"].get("from") == "$trip":
        args["related_to"] = {**args["related_to"], "from": trip.id}
    info = assert_unchanged(mem, lambda: mem.search(**args), error)
    assert type(info.value) is error
    assert info.value.details.get("field") == field  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the real model


@pytest.mark.slow
def test_semantic_search_with_the_real_model(tmp_path: Path) -> None:
    from dmf_hybrid import SentenceTransformerEmbedder

    model = SentenceTransformerEmbedder()
    mem = Memory.open(tmp_path / "mem", embedder=model)
    define_travel(mem)
    places = {"Trattoria da Enzo": "Rome", "Colosseum": "Rome", "Louvre": "Paris",
              "Pizzeria Da Michele": "Naples", "Sagrada Familia": "Barcelona"}
    ids = {n: mem.create("Poi", {"name": n, "city": c}).id for n, c in places.items()}
    res = mem.search("Poi", "ancient Roman amphitheatre", mode="vector", k=3)
    assert res.hits[0].entity.id == ids["Colosseum"]
    assert res.receipt.model_id == model.model_id
    food = mem.search("Poi", "somewhere to eat pizza", where={"city": "Naples"}, k=3)
    assert [h.entity.id for h in food.hits] == [ids["Pizzeria Da Michele"]]
    first = summary(mem.search("Poi", "famous museum in France", k=5))
    assert first[0][0] == ids["Louvre"]
    assert summary(mem.search("Poi", "famous museum in France", k=5)) == first
    mem.close()
    again = Memory.open(tmp_path / "mem", embedder=model)
    assert summary(again.search("Poi", "famous museum in France", k=5)) == first
    again.close()


# ---------------------------------------------------------------- concurrent writes


class WritingIndex(ExactIndex):
    """A real exact index that commits one more write to the memory on its first query.

    It stands for a concurrent writer that commits between the planner's count and its
    resolution, the moment an optimistic (transaction-free) search must notice.
    """

    def __init__(self) -> None:
        super().__init__()
        self.mem: Memory | None = None

    def query(self, name: str, vector: Any, n: int) -> list[tuple[str, float]]:
        if self.mem is not None:
            mem, self.mem = self.mem, None
            target = mem.query("Poi", {"name": "lab 3"}).items[0]
            mem.update(target.id, {"name": "lab 3 renamed"})
            mem.create("Poi", {"name": "lab 99", "city": "Oslo"})
        return super().query(name, vector, n)


@pytest.mark.parametrize("where", [None, {"city": "Oslo"}])
def test_a_write_between_two_reads_of_a_search_is_never_half_seen(
        tmp_path: Path, where: dict[str, Any] | None) -> None:
    index = WritingIndex()
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=index,
                      settings=Settings(exact_threshold=0))
    define_travel(mem)
    chosen_ids(mem, [{"name": f"lab {i}", "city": "Oslo"} for i in range(30)])
    mem.search("Poi", "lab", where=where, mode="vector")  # warm: counts cached, mirror loaded
    before = mem.last_seq()
    index.mem = mem
    res = mem.search("Poi", "lab 3", where=where, k=30, mode="vector")
    assert mem.last_seq() == before + 2
    assert res.receipt.resolved_at_seq == mem.last_seq()  # redone after the write
    assert res.receipt.candidates == 31
    assert "retry_ms" in res.receipt.timings_ms
    assert_current(mem, res)
    replay = mem.search("Poi", "lab 3", where=where, k=30, mode="vector",
                        as_of=res.receipt.resolved_at_seq)
    assert summary(replay) == summary(res)
    mem.close()


# ---------------------------------------------------------------- the filter cache


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_cached_candidate_lists_follow_every_committed_change(mem: Memory, mode: str) -> None:
    pois = chosen_ids(mem, [{"name": f"cafe {i}", "city": "Oslo"} for i in range(12)])
    where = {"city": "Oslo"}

    def found() -> set[str]:
        res = mem.search("Poi", "cafe", where=where, k=50, mode=mode)
        assert res.receipt.plan == "exact"
        return {h.entity.id for h in res.hits}

    assert found() == {p.id for p in pois}
    assert found() == {p.id for p in pois}  # served from the cache: same answer
    mem.update(pois[0].id, {"city": "Bergen"})
    assert found() == {p.id for p in pois[1:]}
    mem.delete(pois[1].id)
    assert found() == {p.id for p in pois[2:]}
    # a search inside a transaction sees its own writes, and what it read is not kept: the
    # rolled-back seq is taken again by a different write, whose state must be searched
    before = mem.last_seq()
    with pytest.raises(RuntimeError):
        with mem.transaction():
            mem.update(pois[3].id, {"city": "Bergen"})
            assert found() == {p.id for p in pois[2:]} - {pois[3].id}
            raise RuntimeError("roll back")
    assert mem.last_seq() == before
    mem.update(pois[2].id, {"city": "Bergen"})  # now holds the rolled-back seq
    assert mem.last_seq() == before + 1
    assert found() == {p.id for p in pois[3:]}
    mem.engine.forget_candidates()
    assert found() == {p.id for p in pois[3:]}
