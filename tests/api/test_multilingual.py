"""A Chinese search, and a bad analyzer, through every front door (Memory, MemoryClient)."""

from __future__ import annotations

import pytest

from dmf_hybrid._internal.errors import SchemaError
from tests.doors import Front

PLACES = [
    {"name": "上海博物馆", "city": "上海", "cost": 0},
    {"name": "上海自然博物馆", "city": "上海", "cost": 45},
    {"name": "东方明珠广播电视塔", "city": "上海", "cost": 199},
    {"name": "豫园", "city": "上海", "cost": 40},
    {"name": "故宫博物院", "city": "北京", "cost": 60},
]


def test_a_chinese_search_finds_part_of_a_name(api: Front) -> None:
    ids = {p["name"]: api.mem.create("Poi", p).id for p in PLACES}
    found = api.mem.search("Poi", "博物馆", where={"city": "上海"}, k=5, mode="keyword")
    # the shorter name matches more of its text: first
    assert [h.entity.id for h in found.hits] == [ids["上海博物馆"], ids["上海自然博物馆"]]
    hybrid = api.mem.search("Poi", "我想去东方明珠看看", k=3)
    assert hybrid.hits[0].entity.id == ids["东方明珠广播电视塔"]
    assert hybrid.hits[0].legs["keyword"].rank == 1
    mixed = api.mem.search("Poi", "the 豫园 garden", k=1)
    assert mixed.hits[0].entity.data.name == "豫园"
    assert api.embedded is not None  # the same answer as the embedded memory's
    again = api.embedded.search("Poi", "我想去东方明珠看看", k=3)
    assert [h.entity.id for h in again.hits] == [h.entity.id for h in hybrid.hits]


def test_an_unknown_analyzer_is_refused_with_the_choices(api: Front) -> None:
    body = {"name": "Place", "fields": {"name": {"type": "str"}}, "embed": "{name}",
            "analyzer": "chinese"}
    with pytest.raises(SchemaError) as info:
        api.mem.define_type(body)
    assert info.value.field == "analyzer" and "english" in info.value.message
    assert "Place" not in {t.name for t in api.mem.types()}
    if api.http:
        response = api.raw().post("/types", json=body)
        assert response.status_code == 422
        assert response.json()["details"]["field"] == "analyzer"
