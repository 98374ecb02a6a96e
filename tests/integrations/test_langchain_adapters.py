"""DMFVectorStore and DMFRetriever beyond the standard suites: metadata filters (data or a
function), relevance thresholds, max marginal relevance and the retrievers a store makes,
audit, bad input (changes nothing, raises ValueError subclasses), the model check,
packaging."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from dmf_hybrid import FilterError, HashEmbedder, MemoryAPI, ValidationError
from dmf_hybrid.integrations.embedder import CallerEmbedder
from dmf_hybrid.integrations.langchain import DMFRetriever, DMFVectorStore, collection_type
from tests.integrations import door, import_error
from tests.store import dump

EMBED = DeterministicFakeEmbedding(size=8)


@pytest.fixture(params=["memory", "http"])
def front(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryAPI]:
    with door(request.param, tmp_path / "mem", CallerEmbedder(EMBED)) as (mem, _):
        yield mem


@pytest.fixture
def store(front: MemoryAPI) -> DMFVectorStore:
    store = DMFVectorStore(EMBED, memory=front, collection="travel-notes")
    store.add_documents([
        Document("West Lake at dawn", metadata={"city": "杭州", "year": 2021, "tags": ["lake"]}),
        Document("The Bund at night", metadata={"city": "上海", "year": 2023}),
        Document("Li River by raft", metadata={"city": "桂林", "year": 2019, "tags": ["river"]}),
    ], ids=["a", "b", "c"])
    return store


def test_metadata_filters(store: DMFVectorStore) -> None:
    def ids(flt: dict) -> list[str | None]:
        return sorted(d.id for d in store.similarity_search("x", k=10, filter=flt))

    assert ids({"city": "杭州"}) == ["a"]
    assert ids({"year": {"$gte": 2021}}) == ["a", "b"]
    assert ids({"tags": {"$contains": "river"}}) == ["c"]
    assert ids({"$or": [{"city": "上海"}, {"year": {"$lt": 2020}}]}) == ["b", "c"]
    scored = store.similarity_search_with_relevance_scores("West Lake at dawn", k=3)
    assert scored[0][0].id == "a" and scored[0][1] == pytest.approx(1.0)
    assert all(0.0 <= s <= 1.0 for _, s in scored)


def test_a_function_filter_and_relevance_thresholds(store: DMFVectorStore) -> None:
    recent = store.similarity_search("x", k=2, filter=lambda d: d.metadata["year"] >= 2021)
    assert sorted(d.id for d in recent) == ["a", "b"]
    assert store.similarity_search("x", k=5, filter=lambda d: False) == []
    exact = store.similarity_search_with_relevance_scores("West Lake at dawn", k=3,
                                                          score_threshold=0.99)
    assert [d.id for d, _ in exact] == ["a"]
    retriever = store.as_retriever(search_type="similarity_score_threshold",
                                   search_kwargs={"score_threshold": 0.99, "k": 3})
    assert [d.id for d in retriever.invoke("Li River by raft")] == ["c"]


def test_max_marginal_relevance_prefers_a_different_document(store: DMFVectorStore) -> None:
    store.add_texts(["West Lake at dawn"], [{"city": "杭州"}], ids=["a2"])  # a duplicate
    similar = store.similarity_search("West Lake at dawn", k=2)
    assert sorted(d.id for d in similar) == ["a", "a2"]
    diverse = store.max_marginal_relevance_search("West Lake at dawn", k=2, fetch_k=4,
                                                  lambda_mult=0.25)
    assert diverse[0].id in ("a", "a2") and diverse[1].id in ("b", "c")
    retriever = store.as_retriever(search_type="mmr", search_kwargs={
        "k": 2, "fetch_k": 4, "lambda_mult": 0.25, "filter": {"year": {"$lte": 2021}}})
    assert [d.id for d in retriever.invoke("West Lake at dawn")][1] == "c"
    assert [d.id for d in asyncio.run(retriever.ainvoke("West Lake at dawn"))][1] == "c"
    without = DMFVectorStore(None, memory=store.memory, collection="travel-notes")
    with pytest.raises(ValidationError, match="embedding"):
        without.max_marginal_relevance_search("West Lake", k=2)


def test_documents_are_audited_entities(store: DMFVectorStore) -> None:
    seq = store.memory.last_seq()
    store.add_texts(["West Lake in rain"], [{"city": "杭州"}], ids=["a"])
    store.delete(["a"])
    assert [e.op for e in store.memory.history("a")] == ["create", "update", "delete"]
    assert store.memory.get("a", as_of=seq).data.text == "West Lake at dawn"
    assert store.get_by_ids(["a"]) == []
    assert store.memory.verify_audit().ok


def test_bad_input_changes_nothing(store: DMFVectorStore) -> None:
    before = dump(store.memory)
    with pytest.raises(FilterError):
        store.similarity_search("x", filter={"city'; DROP TABLE events; --": 1})
    with pytest.raises(FilterError):
        store.similarity_search("x", filter={"year": {"$regex": "1"}})
    with pytest.raises(ValidationError):
        store.add_texts(["t"], ids=["not an id!"])
    with pytest.raises(ValidationError):
        store.add_texts(["t", "u"], ids=["x"])
    with pytest.raises(ValidationError):
        store.add_texts(["t"], [{"n": float("nan")}])
    assert dump(store.memory) == before
    assert issubclass(ValidationError, ValueError)


def test_a_memory_with_another_model_is_refused(tmp_path: Path) -> None:
    with door("memory", tmp_path / "m", HashEmbedder()) as (mem, _):
        with pytest.raises(ValueError, match="embeds with 'hash-64'"):
            DMFVectorStore(EMBED, memory=mem)
        own = DMFVectorStore(None, memory=mem)  # the memory's own model
        own.add_texts(["hello world"], ids=["h"])
        assert [d.id for d in own.similarity_search("hello", k=1)] == ["h"]
        assert own.embeddings is None


def test_from_texts_and_private_memory() -> None:
    store = DMFVectorStore.from_texts(["alpha", "beta"], EMBED, ids=["1", "2"])
    try:
        assert [d.page_content for d in store.similarity_search("beta", k=1)] == ["beta"]
    finally:
        store.close()


def test_collection_names() -> None:
    assert collection_type("langchain") == "Langchain"
    assert collection_type("my-docs_v2") == "MyDocsV2"
    for bad in ["", "-", "9lives", "中文"]:
        with pytest.raises(ValidationError):
            collection_type(bad)


def test_retriever_where_and_k(store: DMFVectorStore) -> None:
    retriever = DMFRetriever(memory=store.memory, type_name="TravelNotes", k=2,
                             where={"metadata.year": {"$gte": 2021}})
    docs = retriever.invoke("lake")
    assert sorted(d.id for d in docs) == ["a", "b"]
    assert {d.metadata["type"] for d in docs} == {"TravelNotes"}
    assert docs[0].page_content in ("West Lake at dawn", "The Bund at night")
    assert [d.id for d in retriever.invoke("lake", k=1, where={"metadata.city": "上海"})] == [
        "b"]


def test_import_without_the_extra_says_what_to_install() -> None:
    out = import_error("dmf_hybrid.integrations.langchain", 'langchain_core')
    assert "pip install 'dmf-hybrid[server,langchain]'" in out
