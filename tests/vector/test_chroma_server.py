"""The VectorIndex suite through ChromaIndex.http against a real ``chroma run`` server (the
test session's, on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmf_hybrid._internal.errors import ServiceUnavailable
from dmf_hybrid._internal.vector import ChromaIndex, VectorIndex
from evaluation.chromaserver import ChromaServer
from evaluation.ports import free_port

from .test_vector_indexes import IndexContract

pytestmark = pytest.mark.slow


class TestChromaServer(IndexContract):
    @pytest.fixture
    def index(self, chroma_server: ChromaServer) -> Iterator[VectorIndex]:
        index = ChromaIndex.http("127.0.0.1", chroma_server.port, batch_size=50)
        yield index
        index.close()

    def test_heartbeat(self, chroma_server: ChromaServer) -> None:
        index = ChromaIndex.http("127.0.0.1", chroma_server.port)
        assert index.heartbeat()
        index.close()


def test_unreachable_server_is_service_unavailable() -> None:
    with pytest.raises(ServiceUnavailable):
        ChromaIndex.http("127.0.0.1", free_port())
