"""Fusion: every method is deterministic, and the default keeps an exact match first."""

from __future__ import annotations

import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid.errors import ValidationError
from dmf_hybrid.search.fusion import DEFAULT_FUSION, FUSIONS, check_fusion, fuse, rrf
from dmf_hybrid.vector.exact import ExactIndex

# the keyword leg finds "named" far ahead of the rest; the dense leg does not see it at all,
# and ranks "both" (a weak keyword match) first: the case of a query that names an entity
NAMED = {
    "keyword": [("named", 12.0), ("both", 3.0), ("other", 2.9)],
    "vector": [("both", 0.41), ("other", 0.40), ("x", 0.39)],
}


def test_rrf_buries_the_named_entity_and_the_default_does_not() -> None:
    assert rrf(NAMED)[0][0] == "both"
    assert fuse(NAMED, "rrf")[0][0] == "both"
    assert fuse(NAMED, DEFAULT_FUSION, depth=3)[0][0] == "named"


def test_bm25max_lets_the_dense_leg_decide_between_keyword_ties() -> None:
    tied = {"keyword": [("a", 5.0), ("b", 5.0)], "vector": [("b", 0.8), ("a", 0.2)]}
    assert [eid for eid, _ in fuse(tied, "bm25max")] == ["b", "a"]


@pytest.mark.parametrize("method", FUSIONS)
def test_every_method_is_ordered_by_score_then_id(method: str) -> None:
    fused = fuse(NAMED, method, depth=3)
    assert {eid for eid, _ in fused} == {"named", "both", "other", "x"}
    assert fused == sorted(fused, key=lambda item: (-item[1], item[0]))
    assert fuse({"keyword": [], "vector": []}, method) == []
    swapped = {"vector": NAMED["vector"], "keyword": NAMED["keyword"]}
    assert fuse(swapped, method, depth=3) == fused


def test_weights_and_missing_documents() -> None:
    # a zero-weight leg counts for nothing
    only_kw = fuse(NAMED, "bm25max", weights={"vector": 0.0}, depth=3)
    assert [eid for eid, _ in only_kw][:3] == ["named", "both", "other"]
    # a document missing from a full list gets that list's lowest score
    scores = dict(fuse(NAMED, "bm25max", depth=3))
    assert scores["named"] == pytest.approx(1.0 + 0.39)
    assert scores["x"] == pytest.approx(2.9 / 12.0 + 0.39)
    # from a list that is not full: 0 for BM25
    assert dict(fuse(NAMED, "bm25max", depth=100))["x"] == pytest.approx(0.39)


def test_unknown_fusion_names_the_choices() -> None:
    with pytest.raises(ValidationError) as info:
        check_fusion("borda")
    assert info.value.field == "fusion" and all(m in info.value.message for m in FUSIONS)
    with pytest.raises(ValueError):
        Settings(fusion="borda")


def test_hybrid_search_keeps_a_named_place_first() -> None:
    places = ["上海博物馆", "上海自然博物馆", "上海科技馆", "上海美术馆", "上海图书馆",
              "上海大剧院", "上海动物园", "上海植物园", "上海中心大厦", "上海环球金融中心"]
    text = "请帮我找一下上海科技馆的地址"
    with Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex()) as mem:
        mem.define_type({"name": "Place", "fields": {"name": {"type": "str"}},
                         "identity": ["name"], "embed": "{name}，上海市"})
        for name in places:
            mem.create("Place", {"name": name})
        hits = mem.search("Place", text, k=3).hits
        assert hits[0].entity.data.name == "上海科技馆"
        assert mem.search("Place", text, k=1, mode="keyword").hits[0].entity.data.name == (
            "上海科技馆")
        receipt = mem.search("Place", text, k=1).receipt
        assert receipt.fusion == DEFAULT_FUSION and receipt.mode == "hybrid"
