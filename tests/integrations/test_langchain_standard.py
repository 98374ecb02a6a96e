"""LangChain's own standard suites (langchain_tests), unmodified, over both front doors:
``VectorStoreIntegrationTests`` (sync and async) for DMFVectorStore and
``RetrieversIntegrationTests`` for DMFRetriever, each against an embedded Memory and a
MemoryClient on a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

from dmf_hybrid import HashEmbedder, MemoryAPI
from dmf_hybrid.integrations.embedder import CallerEmbedder
from dmf_hybrid.integrations.langchain import DMFRetriever, DMFVectorStore
from tests.integrations import door

PLACES = [("West Lake", "Hangzhou"), ("The Bund", "Shanghai"), ("Forbidden City", "Beijing"),
          ("Li River", "Guilin"), ("Terracotta Army", "Xi'an")]


class _VectorStoreSuite(VectorStoreIntegrationTests):
    kind = "memory"

    @pytest.fixture(scope="class")
    def front(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryAPI]:
        embedder = CallerEmbedder(self.get_embeddings())
        with door(self.kind, tmp_path_factory.mktemp("lc") / "mem", embedder) as (mem, _):
            yield mem

    @pytest.fixture
    def vectorstore(self, front: MemoryAPI) -> Iterator[VectorStore]:  # type: ignore[override]
        store = DMFVectorStore(self.get_embeddings(), memory=front)
        try:
            yield store
        finally:
            store.delete()  # every document: the next test starts empty


class TestVectorStoreEmbedded(_VectorStoreSuite):
    kind = "memory"


class TestVectorStoreHTTP(_VectorStoreSuite):
    kind = "http"


class _RetrieverSuite(RetrieversIntegrationTests):
    kind = "memory"
    front: Any = None

    @pytest.fixture(scope="class", autouse=True)
    def places(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        with door(self.kind, tmp_path_factory.mktemp("rt") / "mem", HashEmbedder()) as (
                mem, _):
            mem.define_type({"name": "Place", "embed": "{name} in {city}", "fields": {
                "name": {"type": "str"}, "city": {"type": "str"}}})
            mem.create_many("Place", [{"name": n, "city": c} for n, c in PLACES])
            mem.flush()
            type(self).front = mem
            try:
                yield
            finally:
                type(self).front = None

    @property
    def retriever_constructor(self) -> type[DMFRetriever]:
        return DMFRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": type(self).front, "type_name": "Place"}

    @property
    def retriever_query_example(self) -> str:
        return "a lake in Hangzhou"


class TestRetrieverEmbedded(_RetrieverSuite):
    kind = "memory"


class TestRetrieverHTTP(_RetrieverSuite):
    kind = "http"
