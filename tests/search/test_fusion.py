"""Fusion: every method is deterministic, and the default keeps an exact match first."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.errors import ValidationError
from dmf_hybrid._internal.search.fusion import DEFAULT_FUSION, FUSIONS, check_fusion, fuse, rrf
from dmf_hybrid._internal.vector.exact import ExactIndex

# the keyword leg finds "named" far ahead of the rest; the dense leg does not see it at all,
# and ranks "both" (a weak keyword match) first: the case of a query that names an entity
NAMED = {
    "keyword": [("named", 12.0), ("both", 3.0), ("other", 2.9)],
    "vector": [("both", 0.41), ("other", 0.40), ("x", 0.39)],
}


def test_rrf_buries_the_named_entity_and_the_default_does_not() -> None:
    assert rrf(NAMED)[0][0] == "both"
    assert fuse(NAMED, "rrf")[0][0] == "both"
    assert fuse(NAMED, "bm25max", depth=3)[0][0] == "named"
    # a hybrid search also has the exact leg: the query names "named" (a field value, whole)
    with_exact = {**NAMED, "exact": [("named", 12.0)]}
    for method in FUSIONS:
        assert fuse(with_exact, method, depth=3)[0][0] == "named", method
    assert fuse(with_exact, DEFAULT_FUSION, depth=3)[0][0] == "named"


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
    scores = dict(fuse(NAMED, "bm25max", depth=3))  # the cosine counts twice by default
    assert scores["named"] == pytest.approx(1.0 + 2 * 0.39)
    assert scores["x"] == pytest.approx(2.9 / 12.0 + 2 * 0.39)
    # from a list that is not full: 0 for BM25
    assert dict(fuse(NAMED, "bm25max", depth=100))["x"] == pytest.approx(2 * 0.39)
    # a search's own weights replace the default
    equal = dict(fuse(NAMED, "bm25max", weights={"vector": 1.0}, depth=3))
    assert equal["named"] == pytest.approx(1.0 + 0.39)


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


class Restaurant(BaseModel):
    name: str
    dishes: list[str] = []
    address: str = ""


def test_the_exact_leg_lifts_documents_the_query_names() -> None:
    """A long request that names one dish: the restaurants that list it come first."""
    rows = [{"name": "好一家餐馆", "dishes": ["纸包排骨", "杨枝甘露"], "address": "推荐用餐"},
            {"name": "讲礼驴肉馆", "dishes": ["驴杂汤", "驴肉火烧", "凉拌驴皮", "驴肉汤面",
                                          "小米粥", "拍黄瓜"], "address": "西城区"}]
    rows += [{"name": f"老北京面馆{i}", "dishes": ["炸酱面", "卤煮"], "address": "东城区"}
             for i in range(20)]
    text = "你好，我想找一家餐馆吃驴杂汤这道菜，请给我推荐一家餐馆用餐吧"
    with Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex()) as mem:
        mem.define(Restaurant, identity=["name"], embed="{name}，推荐菜：{dishes}，{address}")
        ids = {r["name"]: mem.create("Restaurant", r).id for r in rows}
        keyword = mem.search("Restaurant", text, k=4, mode="keyword").hits
        # BM25 alone: the request's own words ("一家", "餐馆", twice each) outweigh the dish
        assert keyword[0].entity.id == ids["好一家餐馆"]
        hybrid = mem.search("Restaurant", text, k=4).hits
        assert hybrid[0].entity.id == ids["讲礼驴肉馆"]
        assert set(hybrid[0].legs) == {"exact", "keyword", "vector"}
        assert all("exact" not in h.legs for h in hybrid[1:])
        # replayed at its seq, the same answer
        seq = mem.last_seq()
        assert [h.entity.id for h in mem.search("Restaurant", text, k=4, as_of=seq).hits] == [
            h.entity.id for h in hybrid]
        kw = mem.engine.indexer.keyword_index("Restaurant", mem.tenant)
        assert kw is not None
        assert kw.exact("驴肉火烧", [(ids["讲礼驴肉馆"], 1.0), (ids["好一家餐馆"], 1.0)]) == [
            (ids["讲礼驴肉馆"], 1.0)]
        assert kw.exact("驴肉", [(ids["讲礼驴肉馆"], 1.0)]) == []  # a part names nothing
