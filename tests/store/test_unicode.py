"""Unicode through both doors: an identity field is kept in NFC, so the composed and the
decomposed "Café Zürich" are one identity and a filter in either form finds it; invisible and
reordering characters are dropped from identity fields (one identity with the plain text); a
C0 control character (NUL and the like, but tab, line feed and carriage return) is refused in
any string, nested ones included; keyword search reads both forms as one term."""

from __future__ import annotations

import unicodedata
from functools import partial

import pytest

from dmf_hybrid import MemoryAPI, ValidationError
from tests.store import assert_unchanged, both_doors

mem = both_doors()

NFC = unicodedata.normalize("NFC", "Café Zürich")
NFD = unicodedata.normalize("NFD", "Café Zürich")


def test_composed_and_decomposed_forms_are_one_identity(mem: MemoryAPI) -> None:
    assert NFC != NFD
    first = mem.create("Poi", {"name": NFD, "city": "Zürich"})
    again = mem.create("Poi", {"name": NFC, "city": unicodedata.normalize("NFD", "Zürich")})
    assert again.id == first.id and again.created is False
    assert first.data.name == NFC  # stored composed
    for form in (NFC, NFD):
        assert [e.id for e in mem.query("Poi", {"name": form}).items] == [first.id]
        assert [e.id for e in mem.query("Poi", {"name": {"$in": [form]}}).items] == [first.id]
    hits = mem.search("Poi", unicodedata.normalize("NFD", "Zürich café"), mode="keyword")
    assert [h.entity.id for h in hits.hits] == [first.id]


@pytest.mark.parametrize("invisible", ["\u200b", "\u200d", "\u200e", "\u2060", "\ufeff",
                                       "\u202e", "\u2066"])
def test_invisible_characters_are_dropped_from_identity_fields(mem: MemoryAPI,
                                                               invisible: str) -> None:
    # a look-alike is the same identity: real data carries stray marks (CrossWOZ names end in
    # U+200E), and a name that looks the same must not become a second entity
    plain = mem.create("Poi", {"name": "Café Zürich", "city": "Zürich"})
    marked = mem.create("Poi", {"name": f"Café{invisible} Zürich{invisible}",
                                "city": "Zürich"})
    assert marked.id == plain.id and marked.created is False
    assert mem.get(plain.id).data.name == "Café Zürich"
    assert [e.id for e in mem.query("Poi", {"name": f"{invisible}Café Zürich"}).items] \
        == [plain.id]
    other = mem.create("Trip", {"destination": "Paris", "tags": [f"x{invisible}"]})
    assert mem.get(other.id).data.tags == [f"x{invisible}"]  # other text as sent


@pytest.mark.parametrize("control", ["\x00", "\x01", "\x1b", "\x1f"])
def test_control_characters_are_refused_in_every_string(mem: MemoryAPI, control: str) -> None:
    poi = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"})
    cases = [
        (partial(mem.create, "Poi", {"name": f"Yu{control}Garden", "city": "Shanghai"}),
         "data.name"),
        (partial(mem.create, "Trip", {"destination": "Paris", "tags": ["ok", f"x{control}"]}),
         "data.tags"),
        (partial(mem.update, poi.id, {"city": f"Shang{control}hai"}), "changes.city"),
    ]
    for call, field in cases:
        info = assert_unchanged(mem, call, ValidationError)
        assert info.value.field == field  # type: ignore[attr-defined]
        assert "control character" in info.value.message  # type: ignore[attr-defined]


def test_tabs_and_line_breaks_stay_allowed_in_text(mem: MemoryAPI) -> None:
    poi = mem.create("Poi", {"name": "Line\tone\r\nline two", "city": "Shanghai"})
    assert mem.get(poi.id).data.name == "Line\tone\r\nline two"
