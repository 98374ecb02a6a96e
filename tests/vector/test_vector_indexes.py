"""One behavioural suite for every VectorIndex (ExactIndex and embedded ChromaIndex).

``IndexContract`` holds the suite; a test class inherits it and provides an ``index``
fixture. ``tests/vector/test_chroma_server.py`` runs the same suite over HTTP.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmf_hybrid._internal.errors import NotFound, SchemaError, ValidationError
from dmf_hybrid._internal.vector import (
    ChromaIndex,
    ExactIndex,
    VectorIndex,
    check_collection_name,
    collection_name,
)

DIM = 8


def unit(*values: float) -> np.ndarray:
    vec = np.zeros(DIM, dtype=np.float32)
    vec[: len(values)] = values
    return vec / np.linalg.norm(vec)


def random_unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    mat = rng.standard_normal((n, dim)).astype(np.float32)
    return mat / np.linalg.norm(mat, axis=1, keepdims=True)


class IndexContract:
    """The behaviour every VectorIndex must show; subclasses provide ``index``."""

    @pytest.fixture
    def name(self) -> str:
        """A collection name no other test uses (servers and ephemeral clients are shared)."""
        return collection_name("test", uuid.uuid4().hex[:12])

    def test_is_a_vector_index(self, index: VectorIndex) -> None:
        assert isinstance(index, VectorIndex)

    def test_ensure_collection_is_idempotent(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.ensure_collection(name, DIM)
        assert name in index.collections()
        assert index.count(name) == 0

    def test_dim_mismatch_is_a_schema_error(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        with pytest.raises(SchemaError, match="dimension"):
            index.ensure_collection(name, DIM + 1)

    def test_invalid_names_and_dims_are_rejected(self, index: VectorIndex) -> None:
        for bad in ["ab", "_abc", "a..b", "with space", "1.2.3.4"]:
            with pytest.raises(ValidationError):
                index.ensure_collection(bad, DIM)
        with pytest.raises(ValidationError):
            index.ensure_collection(collection_name("ok", uuid.uuid4().hex), 0)

    def test_upsert_replaces_vector_and_whole_metadata(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(
            name,
            ["a", "b"],
            np.stack([unit(1), unit(0, 1)]),
            [{"version": 1, "tenant": "t1", "hash": "x", "live": True}, {"version": 1}],
        )
        index.upsert(name, ["a"], unit(0, 0, 1)[None, :], [{"version": 2, "score": 0.5}])
        assert index.records(name) == {
            "a": {"version": 2, "score": 0.5},
            "b": {"version": 1},
        }
        assert index.count(name) == 2
        top = index.query(name, unit(0, 0, 1), 1)
        assert top[0][0] == "a"
        assert top[0][1] == pytest.approx(1.0, abs=1e-5)
        assert index.query(name, unit(1), 2)[0][1] < 0.5  # the old vector is gone

    def test_keep_newer_never_replaces_a_greater_version(self, index: VectorIndex,
                                                         name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(name, ["a", "b"], np.stack([unit(1), unit(0, 1)]),
                     [{"version": 3}, {"version": 1}])
        # a late writer with older versions of "a", a newer one of "b", and a new "c"
        index.upsert(name, ["a", "b", "c"], np.stack([unit(0, 0, 1), unit(0, 0, 1), unit(1)]),
                     [{"version": 2}, {"version": 2}, {"version": 1}], keep_newer="version")
        assert index.records(name) == {"a": {"version": 3}, "b": {"version": 2},
                                       "c": {"version": 1}}
        assert index.query(name, unit(1), 1)[0][0] in ("a", "c")  # a kept its own vector
        assert index.query(name, unit(0, 0, 1), 1)[0][0] == "b"
        # the same version again is written (a repair of a stale vector at that version)
        index.upsert(name, ["a"], unit(0, 1)[None, :], [{"version": 3, "x": 1}],
                     keep_newer="version")
        assert index.records(name)["a"] == {"version": 3, "x": 1}
        # without keep_newer an upsert replaces whatever is stored
        index.upsert(name, ["a"], unit(1)[None, :], [{"version": 1}])
        assert index.records(name)["a"] == {"version": 1}

    def test_says_whether_it_is_shared(self, index: VectorIndex) -> None:
        # only a server is written by other processes too
        assert index.shared is (type(self).__name__ == "TestChromaServer")

    def test_upsert_with_empty_metadata_clears_it(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(name, ["a"], unit(1)[None, :], [{"k": "v"}])
        index.upsert(name, ["a"], unit(1)[None, :], [{}])
        assert index.records(name) == {"a": {}}
        index.upsert(name, ["a"], unit(1)[None, :], [{"k2": 3, "k3": "x"}])
        assert index.records(name) == {"a": {"k2": 3, "k3": "x"}}
        index.upsert(name, ["a"], unit(1)[None, :], [{"k2": 3, "k3": None}])  # None = absent
        assert index.records(name) == {"a": {"k2": 3}}

    def test_mixed_batch_of_new_changed_and_unchanged(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(
            name,
            ["same", "meta", "moved"],
            np.stack([unit(1), unit(0, 1), unit(0, 0, 1)]),
            [{"v": 1}, {"v": 1, "gone": "x"}, {"v": 1}],
        )
        index.upsert(
            name,
            ["new", "same", "meta", "moved"],
            np.stack([unit(0, 0, 0, 1), unit(1), unit(0, 1), unit(1, 0, 0, 0, 1)]),
            [{"v": 9}, {"v": 1}, {"v": 2}, {"v": 2}],
        )
        assert index.records(name) == {
            "meta": {"v": 2},
            "moved": {"v": 2},
            "new": {"v": 9},
            "same": {"v": 1},
        }
        for probe, expected in [
            (unit(0, 0, 0, 1), "new"),
            (unit(1), "same"),
            (unit(0, 1), "meta"),
            (unit(0, 0, 0, 0, 1), "moved"),
        ]:
            assert index.query(name, probe, 1)[0][0] == expected
        assert index.query(name, unit(0, 0, 1), 1)[0][1] < 0.5

    def test_bad_batches_change_nothing(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(name, ["a"], unit(1)[None, :], [{"k": 1}])
        bad_batches: list[tuple[list[str], Any, list[dict[str, Any]]]] = [
            (["b", "c"], np.ones((2, DIM + 1)), [{}, {}]),  # wrong dimension
            (["b", "b"], np.ones((2, DIM)), [{}, {}]),  # duplicate ids
            (["b", "c"], np.ones((2, DIM)), [{}]),  # metadata count
            (["b", "c"], np.ones((2, DIM)), [{}, {"k": [1, 2]}]),  # list value
            (["b", "c"], np.ones((2, DIM)), [{}, {"#k": 1}]),  # reserved key
            (["b", ""], np.ones((2, DIM)), [{}, {}]),  # empty id
            (["b"], np.full((1, DIM), np.nan), [{}]),  # NaN
        ]
        for ids, vectors, metadatas in bad_batches:
            with pytest.raises(ValidationError):
                index.upsert(name, ids, vectors, metadatas)
        assert index.records(name) == {"a": {"k": 1}}

    def test_delete_ignores_missing_ids_and_collections(
        self, index: VectorIndex, name: str
    ) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(
            name,
            ["a", "b", "c"],
            np.stack([unit(1), unit(1, 1), unit(0, 1)]),
            [{"i": 0}, {"i": 1}, {"i": 2}],
        )
        index.delete(name, ["b", "missing"])
        index.delete(name, [])
        assert index.records(name) == {"a": {"i": 0}, "c": {"i": 2}}
        assert [id_ for id_, _ in index.query(name, unit(1, 1), 10)] == ["a", "c"]
        index.delete(collection_name("never", uuid.uuid4().hex), ["a"])

    def test_query_orders_by_similarity_then_id(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        ids = ["d", "b", "c", "a", "e"]
        vectors = np.stack([unit(1, 1), unit(1), unit(1), unit(1), unit(0, 1)])
        index.upsert(name, ids, vectors, [{} for _ in ids])
        hits = index.query(name, unit(1), 5)
        assert [id_ for id_, _ in hits] == ["a", "b", "c", "d", "e"]
        sims = [sim for _, sim in hits]
        assert sims[:3] == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
        assert sims[3] == pytest.approx(np.sqrt(0.5), abs=1e-5)
        assert sims[4] == pytest.approx(0.0, abs=1e-5)
        assert all(isinstance(sim, float) for sim in sims)
        assert [id_ for id_, _ in index.query(name, unit(1), 2)] == ["a", "b"]

    def test_ties_at_the_cut_are_decided_by_id(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        ids = [f"t{i:02d}" for i in range(30)]
        index.upsert(name, ids[::-1], np.tile(unit(1, 2), (30, 1)), [{} for _ in ids])
        index.upsert(name, ["far"], unit(0, 0, 1)[None, :], [{}])
        for n in (1, 3, 7, 29, 30):
            assert [id_ for id_, _ in index.query(name, unit(1, 2), n)] == ids[:n]
        assert [id_ for id_, _ in index.query(name, unit(1, 2), 31)] == [*ids, "far"]

    def test_query_more_than_count_and_zero(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        assert index.query(name, unit(1), 10) == []
        index.upsert(name, ["a", "b"], np.stack([unit(1), unit(0, 1)]), [{}, {}])
        assert [id_ for id_, _ in index.query(name, unit(1), 1000)] == ["a", "b"]
        assert index.query(name, unit(1), 0) == []
        with pytest.raises(ValidationError):
            index.query(name, unit(1), -1)
        with pytest.raises(ValidationError):
            index.query(name, np.ones(DIM + 1), 1)

    def test_unknown_collection_is_not_found(self, index: VectorIndex) -> None:
        missing = collection_name("missing", uuid.uuid4().hex)
        with pytest.raises(NotFound):
            index.query(missing, unit(1), 1)
        with pytest.raises(NotFound):
            index.count(missing)
        with pytest.raises(NotFound):
            index.records(missing)
        with pytest.raises(NotFound):
            index.upsert(missing, ["a"], unit(1)[None, :], [{}])

    def test_drop(self, index: VectorIndex, name: str) -> None:
        index.ensure_collection(name, DIM)
        index.upsert(name, ["a"], unit(1)[None, :], [{}])
        index.drop(name)
        index.drop(name)
        assert name not in index.collections()
        with pytest.raises(NotFound):
            index.count(name)
        index.ensure_collection(name, DIM * 2)  # re-created with another dimension
        assert index.count(name) == 0

    def test_many_records_in_batches(self, index: VectorIndex, name: str) -> None:
        rng = np.random.default_rng(1)
        index.ensure_collection(name, DIM)
        ids = [f"id{i:04d}" for i in range(230)]
        index.upsert(name, ids, random_unit(rng, 230, DIM), [{"n": i} for i in range(230)])
        index.delete(name, ids[::3])
        records = index.records(name)
        kept = [id_ for i, id_ in enumerate(ids) if i % 3]
        assert list(records) == kept
        assert records["id0001"] == {"n": 1}
        assert index.count(name) == len(kept)

    def test_recall_against_exact(self, index: VectorIndex, name: str) -> None:
        rng = np.random.default_rng(7)
        dim, size, k = 64, 2000, 10
        data = random_unit(rng, size, dim)
        ids = [f"v{i:05d}" for i in range(size)]
        exact = ExactIndex()
        for target in (index, exact):
            target.ensure_collection(name, dim)
            target.upsert(name, ids, data, [{} for _ in ids])
        queries = random_unit(rng, 40, dim)
        found = 0
        for q in queries:
            truth = {id_ for id_, _ in exact.query(name, q, k)}
            found += len(truth & {id_ for id_, _ in index.query(name, q, k)})
        recall = found / (k * len(queries))
        assert recall >= 0.95, recall


@pytest.fixture
def exact_index() -> ExactIndex:
    return ExactIndex()


@pytest.fixture
def chroma_index(tmp_path: Path) -> Iterator[ChromaIndex]:
    index = ChromaIndex.persistent(str(tmp_path / "chroma"), batch_size=50)
    yield index
    index.close()


class TestIndexes(IndexContract):
    @pytest.fixture(params=["exact", "chroma"])
    def index(self, request: pytest.FixtureRequest) -> VectorIndex:
        fixture: VectorIndex = request.getfixturevalue(f"{request.param}_index")
        return fixture


def test_chroma_persists_across_clients(tmp_path: Path) -> None:
    path = str(tmp_path / "chroma")
    with ChromaIndex.persistent(path) as first:
        first.ensure_collection("notes", DIM)
        first.upsert("notes", ["a"], unit(1)[None, :], [{"version": 3}])
    with ChromaIndex.persistent(path) as second:
        assert second.collections() == ["notes"]
        assert second.records("notes") == {"a": {"version": 3}}
        with pytest.raises(SchemaError):
            second.ensure_collection("notes", DIM + 1)


def test_chroma_rejects_a_collection_in_another_space(tmp_path: Path) -> None:
    with ChromaIndex.persistent(str(tmp_path / "chroma")) as index:
        client: Any = index._client
        client.create_collection("l2space", embedding_function=None)
        with pytest.raises(SchemaError, match="cosine"):
            index.ensure_collection("l2space", DIM)


def test_chroma_ephemeral_works() -> None:
    index = ChromaIndex.ephemeral()
    name = collection_name("eph", uuid.uuid4().hex[:12])
    index.ensure_collection(name, DIM)
    index.upsert(name, ["a"], unit(1)[None, :], [{"x": "y"}])
    assert index.query(name, unit(1), 3)[0][0] == "a"
    index.drop(name)


# -- ExactIndex extras -----------------------------------------------------------------------


def brute_force(data: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[str]:
    scores = data @ (q / np.linalg.norm(q))
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))
    return [ids[i] for i in order[:k]]


def test_score_ids_is_exact_among_given_ids() -> None:
    rng = np.random.default_rng(3)
    data = random_unit(rng, 500, 32)
    ids = [f"e{i:03d}" for i in range(500)]
    index = ExactIndex()
    index.ensure_collection("c_1", 32)
    index.upsert("c_1", ids, data, [{} for _ in ids])
    subset = [ids[i] for i in rng.choice(500, 120, replace=False)]
    q = rng.standard_normal(32).astype(np.float32)
    hits = index.score_ids("c_1", q, [*subset, "missing", subset[0]], 15)
    chosen = [ids.index(s) for s in subset]
    assert [id_ for id_, _ in hits] == brute_force(data[chosen], subset, q, 15)
    assert index.score_ids("c_1", q, subset, 1000)[-1][0] in subset
    assert len(index.score_ids("c_1", q, subset, 1000)) == 120
    assert index.score_ids("c_1", q, ["missing"], 5) == []
    assert index.score_ids("c_1", q, subset, 0) == []


def test_score_ids_breaks_ties_at_the_cut_by_id() -> None:
    index = ExactIndex()
    index.ensure_collection("c_1", DIM)
    ids = [f"t{i:02d}" for i in range(40)]
    index.upsert("c_1", ids[::-1], np.tile(unit(1), (40, 1)), [{} for _ in ids])
    assert [id_ for id_, _ in index.score_ids("c_1", unit(1), ids[::-1], 5)] == ids[:5]
    assert [id_ for id_, _ in index.query("c_1", unit(1), 5)] == ids[:5]


def test_exact_swap_remove_keeps_rows_consistent() -> None:
    rng = np.random.default_rng(5)
    index = ExactIndex()
    index.ensure_collection("c_1", 16)
    live: dict[str, np.ndarray] = {}
    for step in range(30):
        new_ids = [f"s{step}-{i}" for i in range(int(rng.integers(1, 60)))]
        vecs = random_unit(rng, len(new_ids), 16)
        index.upsert("c_1", new_ids, vecs, [{"step": step} for _ in new_ids])
        live.update(zip(new_ids, vecs, strict=True))
        doomed = [id_ for id_ in sorted(live) if rng.random() < 0.4]
        index.delete("c_1", doomed)
        for id_ in doomed:
            del live[id_]
    assert index.count("c_1") == len(live)
    assert set(index.records("c_1")) == set(live)
    for id_, vec in live.items():
        assert index.has("c_1", id_)
        stored = index.vector("c_1", id_)
        assert stored is not None
        np.testing.assert_allclose(stored, vec, atol=1e-6)
    ids = sorted(live)
    q = rng.standard_normal(16).astype(np.float32)
    data = np.stack([live[i] for i in ids])
    assert [id_ for id_, _ in index.query("c_1", q, 20)] == brute_force(data, ids, q, 20)
    index.delete("c_1", ids)
    assert index.count("c_1") == 0
    assert not index.has("c_1", ids[0])
    assert not index.has("nope", "x")


def test_exact_readers_see_whole_operations_while_a_writer_works() -> None:
    index = ExactIndex()
    index.ensure_collection("c_1", DIM)
    pair = np.stack([unit(1), unit(1)])
    index.upsert("c_1", ["a", "b"], pair, [{"gen": 0}, {"gen": 0}])
    errors: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for gen in range(1, 300):
            index.upsert("c_1", ["a", "b"], pair, [{"gen": gen}, {"gen": gen}])
            index.upsert("c_1", ["x"], unit(0, 1)[None, :], [{}])
            index.delete("c_1", ["x"])
        stop.set()

    def reader() -> None:
        while not stop.is_set():
            records = index.records("c_1")
            gens = {records["a"]["gen"], records["b"]["gen"]}
            if len(gens) != 1:
                errors.append(f"torn upsert {gens}")
            hits = index.score_ids("c_1", unit(1), ["a", "b", "x"], 2)
            if [id_ for id_, _ in hits] != ["a", "b"]:
                errors.append(f"bad hits {hits}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


# -- collection names ------------------------------------------------------------------------


def test_collection_name_joins_clean_parts() -> None:
    assert collection_name("acme", "note", "text") == "acme__note__text"
    assert collection_name("user_profile", "v1.2") == "user_profile__v1.2"


@pytest.mark.parametrize(
    "parts",
    [
        ("a",),
        ("",),
        ("Acme Corp", "note"),
        ("a__b", "c"),
        ("a", "b__c"),
        ("x" * 600,),
        ("1.2.3.4",),
        ("é", "ü"),
        ("-lead", "trail-"),
        ("a..b", "c"),
    ],
)
def test_collection_name_sanitises_into_valid_names(parts: tuple[str, ...]) -> None:
    name = collection_name(*parts)
    assert check_collection_name(name) == name
    assert collection_name(*parts) == name


def test_collection_name_distinguishes_inputs() -> None:
    inputs = [
        ("a__b", "c"),
        ("a", "b__c"),
        ("a", "b", "c"),
        ("Acme Corp", "note"),
        ("Acme_Corp", "note"),
        ("acme corp", "note"),
        ("t1", "note"),
        ("t1", "notes"),
        ("t1", "note", ""),
    ]
    names = [collection_name(*parts) for parts in inputs]
    assert len(set(names)) == len(names)


def test_sanitised_names_are_accepted_by_chroma(tmp_path: Path) -> None:
    with ChromaIndex.persistent(str(tmp_path / "chroma")) as index:
        for parts in [("Acme Corp", "note"), ("x" * 600,), ("1.2.3.4",), ("é",)]:
            index.ensure_collection(collection_name(*parts), DIM)
        assert len(index.collections()) == 4
