"""The CrossWOZ runner end to end on a tiny fixture directory (hash embedder, real stores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation import datasets as ds
from evaluation.__main__ import main
from evaluation.crosswoz import lookup_scores, matches, run_crosswoz
from evaluation.runner import RunOptions

ENTITIES = [
    {"type": "Restaurant", "name": "讲礼驴肉馆", "attributes": {
        "name": "讲礼驴肉馆", "address": "北京市西城区", "rating": 4.5,
        "dishes": ["驴杂汤", "驴肉火烧"], "price_per_person": 60}},
    {"type": "Restaurant", "name": "全聚德烤鸭店", "attributes": {
        "name": "全聚德烤鸭店", "address": "北京市东城区前门大街", "rating": 4.6,
        "dishes": ["烤鸭", "驴杂汤"], "price_per_person": 200}},
    {"type": "Restaurant", "name": "庆丰包子铺", "attributes": {
        "name": "庆丰包子铺", "address": "北京市东城区", "rating": None,
        "dishes": ["包子"], "price_per_person": 20}},
    {"type": "Hotel", "name": "北京饭店", "attributes": {
        "name": "北京饭店", "address": "东长安街", "hotel_type": "豪华", "rating": 4.7,
        "facilities": ["早餐服务", "游泳池"], "price": 900}},
    {"type": "Attraction", "name": "故宫", "attributes": {
        "name": "故宫", "address": "景山前街4号", "ticket": 60, "rating": 4.7,
        "nearby_attractions": ["天安门广场"]}},
]
QUERIES = [
    # lookups: a dish held by two restaurants, a name, a facility
    {"dialog": "1", "turn": 1, "type": "Restaurant", "text": "我想吃驴杂汤，推荐一家吧",
     "slots": {"dishes": "驴杂汤"}, "where": {"dishes": {"$contains": "驴杂汤"}},
     "gold": ["讲礼驴肉馆"]},
    {"dialog": "1", "turn": 3, "type": "Attraction", "text": "故宫的门票多少钱？",
     "slots": {"name": "故宫"}, "where": {"name": "故宫"}, "gold": ["故宫"]},
    {"dialog": "2", "turn": 1, "type": "Hotel", "text": "有游泳池的酒店",
     "slots": {"facilities": "游泳池"}, "where": {"facilities": {"$contains": "游泳池"}},
     "gold": ["北京饭店"]},
    # not a lookup (two lookup slots; a dish nobody serves); filtered only
    {"dialog": "2", "turn": 3, "type": "Restaurant", "text": "人均100元以上，评分4.5以上",
     "slots": {"price_per_person": "100元以上", "rating": "4.5分以上"},
     "where": {"$and": [{"price_per_person": {"$gte": 100}}, {"rating": {"$gte": 4.5}}]},
     "gold": ["全聚德烤鸭店"]},
    {"dialog": "3", "turn": 1, "type": "Restaurant", "text": "有没有卖披萨的",
     "slots": {"dishes": "披萨"}, "where": {"dishes": {"$contains": "披萨"}}, "gold": []},
    {"dialog": "3", "turn": 3, "type": "Hotel", "text": "随便", "slots": {"x": "?"},
     "where": None, "gold": []},
]


@pytest.fixture
def crosswoz_dir(tmp_path: Path) -> Path:
    root = tmp_path / "crosswoz"
    root.mkdir()
    (root / "entities.jsonl").write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in ENTITIES), encoding="utf-8")
    (root / "queries-val.jsonl").write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUERIES), encoding="utf-8")
    return root


def test_lookups_take_their_gold_from_the_database(crosswoz_dir: Path) -> None:
    dataset = ds.load_crosswoz(crosswoz_dir)
    lookups = {q.text: (kind, gold) for q, kind, gold in dataset.lookups()}
    assert lookups == {"我想吃驴杂汤，推荐一家吧": ("dishes", ["全聚德烤鸭店", "讲礼驴肉馆"]),
                       "故宫的门票多少钱？": ("name", ["故宫"]),
                       "有游泳池的酒店": ("facilities", ["北京饭店"])}
    assert dataset.faults["queries_where_unparsed"] == 1


def test_filters_match_as_sql_does() -> None:
    row = {"rating": None, "dishes": ["烤鸭"], "price": 90, "name": "全聚德"}
    assert not matches({"rating": {"$gte": 4}}, row)  # null satisfies no comparison
    assert matches({"dishes": {"$contains": "烤鸭"}, "price": {"$lte": 90}}, row)
    assert matches({"$or": [{"price": 1}, {"name": {"$contains": "聚"}}]}, row)
    assert not matches({"$and": [{"price": 90}, {"name": "x"}]}, row)


def test_lookup_scores_by_hand() -> None:
    scores = lookup_scores([("name", 1), ("name", None), ("dishes", 3)])
    assert scores["metrics"] == {"success@1": round(1 / 3, 6), "success@5": round(2 / 3, 6),
                                 "mrr@5": round((1 + 1 / 3) / 3, 6)}
    assert scores["per_category"]["name"]["queries"] == 2
    assert scores["recall_curve"]["2"] == round(1 / 3, 6)


def test_run_crosswoz_end_to_end(crosswoz_dir: Path, tmp_path: Path) -> None:
    options = RunOptions(embedder="hash", workdir=tmp_path / "work", progress=False)
    results = run_crosswoz(crosswoz_dir, "val", options)
    assert results["benchmark"] == "crosswoz" and results["dataset"]["lookups"] == 3
    for mode in ("keyword", "vector", "hybrid"):
        figures = results["modes"][mode]
        assert figures["filtered"]["queries"] == 5
        assert figures["filtered"]["with_violating_hit"] == 0
    # every filtered query has at most 50 matches: hybrid and vector return all of them
    assert results["modes"]["hybrid"]["filtered"]["all_exact"]
    assert results["modes"]["vector"]["filtered"]["all_exact"]
    # the keyword leg finds the named entity, the dish and the facility
    assert results["modes"]["keyword"]["metrics"]["success@1"] == 1.0
    assert results["metrics"] == results["modes"]["hybrid"]["metrics"]
    assert results["metrics"]["success@5"] == 1.0
    # a second run finds the data there and ingests nothing
    again = run_crosswoz(crosswoz_dir, "val", RunOptions(
        modes=("keyword",), embedder="hash", workdir=tmp_path / "work", progress=False,
        analyzer="english-unigram"))
    assert again["timings"]["skipped"] and again["config"]["analyzer"] == "english-unigram"


def test_the_command_writes_the_report(crosswoz_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r" / "crosswoz.json"
    code = main(["crosswoz", "--data", str(crosswoz_dir), "--embedder", "hash", "--mode",
                 "hybrid", "--workdir", str(tmp_path / "w"), "--out", str(out),
                 "--no-progress", "--fusion", "rrf"])
    assert code == 0
    document = json.loads(out.read_text())
    assert document["config"]["fusion"] == "rrf"
    text = out.with_suffix(".md").read_text()
    assert "Lookups per slot kind" in text and "Filtered search" in text
    assert out.with_name("crosswoz-recall.png").is_file()
