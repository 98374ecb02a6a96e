"""Analyzers through Memory: named per type and field, stored, audited, re-analysed on change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.errors import SchemaError, ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import tenant_like


class Note(BaseModel):
    title: str
    body: str = ""


class Review(BaseModel):
    place: str
    text_en: str = Field("", json_schema_extra={"analyzer": "english"})


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    m = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    yield m
    m.close()


def keyword_ids(mem: Memory, type_name: str, text: str, **kwargs: object) -> list[str]:
    return [h.entity.id for h in mem.search(type_name, text, mode="keyword", **kwargs).hits]


def test_the_default_analyzer_is_stored_and_handles_chinese(memory: Memory) -> None:
    etype = memory.define(Note, identity=["title"], embed="{title} {body}")
    assert etype.typedef.analyzer == "english"
    museum = memory.create("Note", {"title": "上海博物馆", "body": "Chinese bronzes"})
    memory.create("Note", {"title": "东方明珠", "body": "a TV tower"})
    assert keyword_ids(memory, "Note", "博物馆") == [museum.id]
    assert keyword_ids(memory, "Note", "bronze") == [museum.id]
    hit = memory.search("Note", "我想去博物馆", k=1).hits[0]  # hybrid, the default mode
    assert hit.entity.id == museum.id and "keyword" in hit.legs


def test_changing_the_analyzer_is_a_new_audited_version_that_reanalyses(
        memory: Memory) -> None:
    memory.define(Note, identity=["title"], embed="{title} {body}")
    other = tenant_like(memory, "other")
    mine = memory.create("Note", {"title": "Club", "body": "running every day"})
    theirs = other.create("Note", {"title": "Club", "body": "running on Sundays"})
    assert keyword_ids(memory, "Note", "runs") == [mine.id]  # stemmed: runs ~ running
    assert keyword_ids(other, "Note", "runs") == [theirs.id]
    seq = memory.last_seq()

    changed = memory.define(Note, identity=["title"], embed="{title} {body}",
                            analyzer="simple", actor="ops", reason="no stemming")
    assert (changed.version, changed.typedef.analyzer) == (2, "simple")
    event = memory.events(since_seq=seq)[-1]
    assert (event.op, event.actor, event.reason) == ("define", "ops", "no stemming")
    assert event.before is not None and event.after is not None
    assert (event.before["analyzer"], event.after["analyzer"]) == ("english", "simple")
    assert memory.verify_audit().ok
    # the type's index was analysed again, with the new analyzer only; the other tenant's
    # Note is a type of its own, its analyzer unchanged
    assert keyword_ids(memory, "Note", "runs") == []
    assert keyword_ids(other, "Note", "runs") == [theirs.id]
    assert keyword_ids(memory, "Note", "running") == [mine.id]
    assert keyword_ids(other, "Note", "running") == [theirs.id]
    # a replay at the old seq uses the type's analyzer of now, like the rest of the type
    assert keyword_ids(memory, "Note", "running", as_of=seq) == [mine.id]
    # the same definition again is no new version
    assert memory.define(Note, identity=["title"], embed="{title} {body}",
                         analyzer="simple").version == 2


def test_a_store_reopened_keeps_its_analyzer(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "m", embedder=HashEmbedder()) as mem:
        mem.define(Note, identity=["title"], embed="{title} {body}", analyzer="simple")
        note = mem.create("Note", {"title": "Club", "body": "running"})
    with Memory.open(tmp_path / "m", embedder=HashEmbedder()) as mem:
        assert mem.get_type("Note").typedef.analyzer == "simple"
        assert keyword_ids(mem, "Note", "run") == []
        assert keyword_ids(mem, "Note", "running") == [note.id]


def test_a_field_names_its_own_analyzer(memory: Memory) -> None:
    etype = memory.define(Review, identity=["place"], embed="{place}: {text_en}",
                          analyzer="simple")
    assert etype.fields["text_en"].analyzer == "english"
    stemmed = memory.create("Review", {"place": "Gallery", "text_en": "stunning paintings"})
    plain = memory.create("Review", {"place": "paintings", "text_en": "quiet"})
    # "painting" matches the stemmed field of one and not the place name of the other
    assert keyword_ids(memory, "Review", "painting") == [stemmed.id]
    assert set(keyword_ids(memory, "Review", "paintings")) == {stemmed.id, plain.id}


def test_toml_names_type_and_field_analyzers(memory: Memory, tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text(
        '[types.Place]\nidentity = ["name"]\nembed = "{name} {note}"\nanalyzer = "simple"\n'
        '[types.Place.fields]\nname = { type = "str", required = true }\n'
        'note = { type = "str", analyzer = "english" }\n', encoding="utf-8")
    (etype,) = memory.load_definitions(path)
    assert etype.typedef.analyzer == "simple"
    assert etype.fields["note"].analyzer == "english"


@pytest.mark.parametrize("definition, field", [
    ({"analyzer": "klingon"}, "analyzer"),
    ({"fields": {"name": {"type": "str"}, "n": {"type": "int", "analyzer": "english"}},
      "embed": "{name} {n}"}, "fields.n.analyzer"),
    ({"fields": {"name": {"type": "str"}, "n": {"type": "str", "analyzer": "english"}}},
     "fields.n.analyzer"),
    ({"fields": {"name": {"type": "str", "analyzer": "nope"}}}, "fields.name.analyzer"),
])
def test_bad_analyzers_are_refused_and_change_nothing(memory: Memory, definition: dict,
                                                      field: str) -> None:
    body = {"name": "Place", "fields": {"name": {"type": "str"}}, "embed": "{name}",
            **definition}
    seq = memory.last_seq()
    with pytest.raises(SchemaError) as info:
        memory.define_type(body)
    assert info.value.field == field
    if definition.get("analyzer") == "klingon":
        assert "english" in info.value.message and "simple" in info.value.message
    assert memory.last_seq() == seq and [t.name for t in memory.types()] == []


def test_unknown_embedder_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        Memory.open(tmp_path / "m", settings=Settings(embedder="minilmx"))
    assert info.value.field == "embedder"
    for name in ("minilm", "m3e-small", "e5-small", "hash"):
        assert name in info.value.message
    assert not (tmp_path / "m" / "memory.duckdb.wal").exists()
