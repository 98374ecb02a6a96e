"""A type definition that makes no sense is refused, naming what is wrong, through both doors:
a relation to a type that does not exist (types that target each other are defined in one
transaction: a file's types are), an enum listing a value twice or more than 1,000 values."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from dmf_hybrid import MemoryAPI, SchemaError
from dmf_hybrid._internal.checks import MAX_ENUM_VALUES
from tests.store import assert_unchanged, both_doors

mem = both_doors()


def _type(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "fields": {"title": {"type": "str"}}, **extra}


def test_a_relation_to_a_type_that_does_not_exist_is_refused(mem: MemoryAPI) -> None:
    bad = _type("Shelf", relations={"holds": {"target": "Book"}})
    info = assert_unchanged(mem, partial(mem.define_type, bad), SchemaError)
    assert info.value.field == "relations.holds.target"  # type: ignore[attr-defined]
    assert "'Book'" in info.value.message  # type: ignore[attr-defined]
    # to itself, to any type, or to a type that exists: fine
    mem.define_type(_type("Book", relations={"sequel": {"target": "Book"},
                                             "about": {"target": "*"}}))
    assert mem.define_type(bad).name == "Shelf"


def test_types_that_target_each_other_come_from_one_file(mem: MemoryAPI,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "library.toml"
    path.write_text('''
[types.Author]
fields = { name = { type = "str" } }
[types.Author.relations]
wrote = { target = "Novel" }

[types.Novel]
fields = { title = { type = "str" } }
[types.Novel.relations]
written_by = { target = "Author", cardinality = "one" }
''', encoding="utf-8")
    assert [t.name for t in mem.load_definitions(path)] == ["Author", "Novel"]
    broken = tmp_path / "broken.toml"
    broken.write_text('''
[types.Reader]
fields = { name = { type = "str" } }
[types.Reader.relations]
borrowed = { target = "Magazine" }

[types.Poem]
fields = { title = { type = "str" } }
''', encoding="utf-8")
    info = assert_unchanged(mem, partial(mem.load_definitions, broken), SchemaError)
    assert "Magazine" in info.value.message  # type: ignore[attr-defined]
    assert {"Reader", "Poem"}.isdisjoint(t.name for t in mem.types())  # all or none


def test_enum_values_are_unique_and_bounded(mem: MemoryAPI) -> None:
    twice = {"name": "Ticket", "fields": {"state": {"type": "enum",
                                                    "values": ["open", "closed", "open"]}}}
    info = assert_unchanged(mem, partial(mem.define_type, twice), SchemaError)
    assert info.value.field == "fields.state.values"  # type: ignore[attr-defined]
    assert "'open'" in info.value.message  # type: ignore[attr-defined]
    many = {"name": "Ticket", "fields": {"state": {
        "type": "enum", "values": [f"v{i}" for i in range(MAX_ENUM_VALUES + 1)]}}}
    info = assert_unchanged(mem, partial(mem.define_type, many), SchemaError)
    assert info.value.field == "fields.state.values"  # type: ignore[attr-defined]
    most = {"name": "Ticket", "fields": {"state": {
        "type": "enum", "values": [f"v{i}" for i in range(MAX_ENUM_VALUES)]}}}
    assert mem.define_type(most).name == "Ticket"
