"""Search profiles of a type: validation, storage with the type, precedence of explicit
arguments, query term handling and ordered-neighbour support (deterministic across
processes)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, SchemaError, ValidationError
from dmf_hybrid._internal.search.profiles import strip_query
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.store import both_doors

ROOT = Path(__file__).resolve().parents[2]

mem = both_doors()


def turn_type(search: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A small turn type as data, with a search profile."""
    return {"name": "Turn", "identity": ["chat", "n"], "embed": "{who}: {text}",
            "fields": {"chat": {"type": "str", "required": True},
                       "session": {"type": "int", "default": 0},
                       "n": {"type": "int", "required": True},
                       "who": {"type": "str"}, "text": {"type": "str"},
                       "note": {"type": "float"}},
            **({"search": search} if search is not None else {}), **extra}


BAD_PROFILES = [
    ({"weights": {"dense": 1.0}}, "search.weights.dense"),
    ({"weights": {"vector": -0.5}}, "search.weights.vector"),
    ({"fusion": "borda"}, "search.fusion"),
    ({"rrf_k": 0}, "search.rrf_k"),
    ({"neighbours": {"group": ["chat", "room"], "order": "n"}}, "search.neighbours.group"),
    ({"neighbours": {"group": ["chat"], "order": "position"}}, "search.neighbours.order"),
    ({"neighbours": {"group": ["chat"], "order": "note"}}, "search.neighbours.order"),
    ({"neighbours": {"group": ["chat"], "order": "n", "weight": -1}},
     "search.neighbours.weight"),
]


def test_a_bad_profile_is_a_schema_error_naming_its_field(mem: MemoryAPI) -> None:
    before = [t.name for t in mem.types()]
    for profile, field in BAD_PROFILES:
        with pytest.raises(SchemaError) as info:
            mem.define_type(turn_type(profile))
        assert info.value.field == field, profile
    assert [t.name for t in mem.types()] == before


def test_a_bad_context_is_a_schema_error(mem: MemoryAPI) -> None:
    base = turn_type()
    for context, field in [
            ({"field": "text", "group": ["chat"], "order": "n", "turns": 0}, "context.turns"),
            ({"field": "note", "group": ["chat"], "order": "n"}, "context.field"),
            ({"field": "missing", "group": ["chat"], "order": "n"}, "context.field"),
            ({"field": "who", "group": ["who"], "order": "n"}, "context.field")]:
        with pytest.raises(SchemaError) as info:
            mem.define_type({**base, "context": context})
        assert info.value.field == field
    fields = {**base["fields"], "extra": {"type": "str"}}
    with pytest.raises(SchemaError) as info:  # not in the embed template
        mem.define_type({**base, "fields": fields,
                         "context": {"field": "extra", "group": ["chat"], "order": "n"}})
    assert info.value.field == "context.field"


def test_define_from_a_model_takes_a_profile(mem: MemoryAPI) -> None:
    from pydantic import BaseModel

    class Line(BaseModel):
        doc: str
        n: int
        text: str = ""

    etype = mem.define(Line, identity=["doc", "n"], embed="{text}",
                       search={"rrf_k": 5, "neighbours": {"group": ["doc"], "order": "n"}})
    assert etype.typedef.search is not None and etype.typedef.search.rrf_k == 5
    with pytest.raises(SchemaError) as info:
        mem.define(Line, name="Line2", identity=["doc", "n"], embed="{text}",
                   search={"weights": {"vector": "heavy"}})
    assert info.value.field == "search.weights.vector"


def test_the_profile_is_stored_versioned_and_shown(mem: MemoryAPI) -> None:
    first = mem.define_type(turn_type({"rrf_k": 7}))
    assert first.typedef.search is not None and first.typedef.search.rrf_k == 7
    second = mem.define_type(turn_type({"rrf_k": 9, "query_terms": "drop_stopwords"}))
    assert second.version == first.version + 1
    shown = mem.get_type("Turn").typedef.search
    assert shown is not None and (shown.rrf_k, shown.query_terms) == (9, "drop_stopwords")


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Memory]:
    m = Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex())
    yield m
    m.close()


def fill_chat(m: MemoryAPI) -> None:
    texts = ["hello there", "shall we talk about the weather", "it rains in Paris today",
             "umbrella needed", "see you", "bye now", "new session starts", "Paris again"]
    m.create_many("Turn", [{"chat": "c1", "session": 0 if i < 6 else 1, "n": i,
                            "who": "ann" if i % 2 else "bob", "text": t}
                           for i, t in enumerate(texts)])
    m.create_many("Turn", [{"chat": "c2", "n": 0, "who": "cy", "text": "Paris in spring"}])


def ranked(result: Any) -> list[tuple[int, str, float]]:
    return [(h.entity.data.n, h.entity.data.chat, h.score) for h in result.hits]


def test_explicit_arguments_override_the_profile(embedded: Memory) -> None:
    embedded.define_type(turn_type({"fusion": "rrf", "rrf_k": 7,
                                    "weights": {"vector": 0.0, "exact": 0.0}}))
    fill_chat(embedded)
    by_profile = embedded.search("Turn", "umbrella", k=3)
    assert (by_profile.receipt.fusion, by_profile.receipt.rrf_k) == ("rrf", 7)
    # vector weighs 0: the top hit's score is its keyword rank's alone
    assert by_profile.hits[0].entity.data.n == 3
    assert by_profile.hits[0].score == pytest.approx(1 / (7 + 1), abs=1e-6)
    engine = embedded.engine
    explicit = engine.search(embedded.tenant, "Turn", "umbrella", k=3, rrf_k=30,
                             weights={"vector": 1.0, "exact": 0.0})
    assert explicit.receipt.rrf_k == 30
    assert explicit.hits[0].score > 1 / (30 + 1)  # the vector leg counts again
    other = engine.search(embedded.tenant, "Turn", "umbrella", k=3, fusion="bm25max")
    assert other.receipt.fusion == "bm25max"
    plain = engine.search(embedded.tenant, "Turn", "umbrella", k=3, profile=False)
    assert (plain.receipt.fusion, plain.receipt.rrf_k) == (
        embedded.settings.fusion, embedded.settings.rrf_k)
    with pytest.raises(ValidationError) as info:
        engine.search(embedded.tenant, "Turn", "umbrella", weights={"dense": 1.0})
    assert info.value.field == "weights"
    with pytest.raises(ValidationError) as info:
        engine.search(embedded.tenant, "Turn", "umbrella", neighbour_weight=0.5)
    assert info.value.field == "neighbour_weight"  # the profile declares no neighbours


def test_query_terms_drop_stopwords(embedded: Memory) -> None:
    embedded.define_type(turn_type({"query_terms": "drop_stopwords"}))
    fill_chat(embedded)
    asked = embedded.search("Turn", "What is the weather?", k=5, mode="vector")
    assert ranked(asked) == ranked(embedded.search("Turn", "weather", k=5, mode="vector"))
    kept = embedded.engine.search(embedded.tenant, "Turn", "What is the weather?", k=5,
                                  mode="vector", query_terms="all")
    assert ranked(kept) != ranked(asked)  # the query vector holds the other words too
    assert strip_query("When did Caroline go to the LGBTQ support group?") == (
        "Caroline go LGBTQ support group")
    assert strip_query("What's Melanie's kids' name, didn't she?") == "Melanie's kids' name"
    assert strip_query("How many times in 2023?") == "many times 2023"
    assert strip_query("What is it?") == "What is it?"  # nothing left: unchanged
    assert strip_query("what about 北京烤鸭") == "北京烤鸭"


NEAR = {"fusion": "rrf", "rrf_k": 10, "weights": {"vector": 0.0, "exact": 0.0},
        "neighbours": {"group": ["chat", "session"], "order": "n", "weight": 0.5}}


def test_neighbours_lend_their_score_within_the_group(embedded: Memory) -> None:
    embedded.define_type(turn_type(NEAR))
    fill_chat(embedded)
    result = embedded.search("Turn", "umbrella", k=5, where={"chat": "c1"}, mode="keyword")
    # turn 3 alone matches; its neighbours 2 and 4 (same session) gain half its score
    (n, _, top), *rest = ranked(result)
    assert n == 3 and top > 0
    assert sorted(rest) == [(2, "c1", pytest.approx(top / 2, abs=1e-5)),
                            (4, "c1", pytest.approx(top / 2, abs=1e-5))]
    ids = [h.entity.id for h in result.hits[1:]]
    assert ids == sorted(ids)  # a tie is ordered by entity ID
    # "Paris" is in turns 2 and 7; 7 lends to 6 (session 1) but 6 never to 5 (session 0)
    paris = embedded.search("Turn", "Paris", k=8, where={"chat": "c1"}, mode="keyword")
    assert sorted(n for n, _, _ in ranked(paris)) == [1, 2, 3, 6, 7]
    # the filter holds for neighbours too: c2's turn never lends to or joins c1's
    assert all(chat == "c1" for _, chat, _ in ranked(paris))
    off = embedded.engine.search(embedded.tenant, "Turn", "umbrella", k=5, mode="keyword",
                                 where={"chat": "c1"}, neighbour_weight=0)
    assert [n for n, _, _ in ranked(off)] == [3]
    hybrid = embedded.search("Turn", "umbrella", k=3, where={"chat": "c1"})
    assert [h.entity.data.n for h in hybrid.hits][0] == 3


@pytest.fixture
def crowded(tmp_path: Path, store_url: str | None) -> Iterator[Memory]:
    """On each engine: turns with what the neighbour lookup must get right: two rows at one
    place, rows without a session (no place), gaps in the order, two chats, a deleted row."""
    m = Memory.open(store_url or tmp_path / "m", embedder=HashEmbedder(),
                    vector_index=ExactIndex())
    m.define_type({**turn_type(NEAR), "identity": ["chat", "n", "who"],
                   "fields": {**turn_type()["fields"], "session": {"type": "int"}}})
    rows = [{"chat": c, "session": s, "n": n, "who": w, "text": f"{c} {n} {w} talk"}
            for c in ("c1", "c2") for s, n, w in (
                (0, 0, "ann"), (0, 1, "bob"), (0, 1, "cy"), (0, 2, "ann"), (0, 4, "bob"),
                (1, 5, "ann"), (1, 6, "bob"), (None, 7, "ann"), (None, 8, "bob"))]
    created = m.create_many("Turn", rows)
    m.delete(created[3].id)  # c1, turn 2: not a candidate any more
    yield m
    m.close()


def test_the_kept_places_answer_as_the_database_join(crowded: Memory) -> None:
    from dmf_hybrid._internal.filters import parse_filter
    from dmf_hybrid._internal.search.places import PlaceIndex
    from dmf_hybrid._internal.store.candidates import Candidates

    embedded = crowded
    store, etype = embedded._store, embedded.get_type("Turn")
    # a turn that expires (with no event) between the places' read and their use
    brief = embedded.create("Turn", {"chat": "c1", "session": 1, "n": 7, "who": "dee",
                                     "text": "brief"}, ttl=1.5)

    def candidates(where: dict[str, Any] | None) -> Candidates:
        return Candidates(store.db.reader(), store, etype, embedded.tenant, None,
                          None if where is None else parse_filter(etype, where), None)

    wheres = ({"chat": "c1"}, None)
    kept = {str(w): PlaceIndex(candidates(w).places(["chat", "session"], "n")) for w in wheres}
    assert [len(k.place) for k in kept.values()] == [7, 14]  # no session: no place
    for expired in (False, True):
        if expired:
            time.sleep(max(0.0, (brief.expires_at - dt.datetime.now(dt.UTC)).total_seconds())
                       + 0.1)
        for where in wheres:
            query = candidates(where)
            ids = [e.id for e in embedded.query("Turn", where, limit=100).items] + [brief.id]
            for some in ([], ids[:1], ids[1:3], ids[::3], ids, [*ids, "Turn_gone"]):
                joined = query.neighbours(some, ["chat", "session"], "n")
                assert kept[str(where)].neighbours(some) == joined, (expired, some)
                assert (brief.id in joined) is (not expired and brief.id in some)


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times searches join for neighbours and read every place."""
    from dmf_hybrid._internal.store.candidates import Candidates

    calls = {"neighbours": 0, "places": 0}
    for name in calls:
        def counted(self: Candidates, *args: Any, _name: str = name,
                    _real: Any = getattr(Candidates, name)) -> Any:
            calls[_name] += 1
            return _real(self, *args)
        monkeypatch.setattr(Candidates, name, counted)
    return calls


def _hits(result: Any) -> list[tuple[str, float]]:
    return [(h.entity.id, h.score) for h in result.hits]


def test_searches_of_one_filter_look_their_neighbours_up(
        crowded: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first search of a state joins, the second reads every place of the filter's
    candidates, the next ones look up; a write starts over. Every answer is the join's."""
    def search() -> list[tuple[str, float]]:
        return _hits(crowded.search("Turn", "c1 bob talk", k=9, where={"chat": "c1"}))

    def joined() -> list[tuple[str, float]]:
        with crowded.transaction():  # no cache inside a transaction: the join
            return search()

    calls = _count_reads(monkeypatch)
    want = joined()
    seen = []
    for _ in range(3):
        assert search() == want
        seen.append(dict(calls))
    assert [(c["neighbours"], c["places"]) for c in seen] == [(2, 0), (2, 1), (2, 1)]
    crowded.create("Turn", {"chat": "c1", "session": 1, "n": 9, "who": "bob", "text": "c1"})
    want = joined()
    for _ in range(3):
        assert search() == want
    assert (calls["neighbours"], calls["places"]) == (4, 2) and len(want) == 9


def test_searches_with_no_filter_keep_the_whole_types_places(
        crowded: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a search of the whole type, whose kept places stay while the events say
    that no Turn changed (a write to another type keeps them)."""
    crowded.define_type({"name": "Note", "fields": {"text": {"type": "str"}}})

    def search() -> list[tuple[str, float]]:
        return _hits(crowded.search("Turn", "bob talk", k=12))

    def joined() -> list[tuple[str, float]]:
        with crowded.transaction():
            return search()

    calls = _count_reads(monkeypatch)
    want = joined()
    for _ in range(3):
        assert search() == want
    assert (calls["neighbours"], calls["places"]) == (2, 1)
    crowded.create("Note", {"text": "another type"})
    assert search() == want and (calls["neighbours"], calls["places"]) == (2, 1)
    crowded.create("Turn", {"chat": "c2", "session": 1, "n": 7, "who": "bob", "text": "bob"})
    want = joined()
    for _ in range(3):
        assert search() == want
    assert (calls["neighbours"], calls["places"]) == (4, 2)


def test_rows_at_one_place_lend_the_best_of_their_scores(crowded: Memory) -> None:
    """Two turns share a place (bob and cy at turn 1): their neighbour gets the better of
    their scores, not whichever of them the engine happened to list last."""
    def turn(chat: str, n: int, who: str) -> str:
        found = crowded.query("Turn", {"chat": chat, "n": n, "who": who}).items
        return found[0].id

    # a chat where the row that does not match sorts after the one that does (by ID), so
    # that "the last one listed" would lend nothing
    chats = [c for c in ("c1", "c2") if turn(c, 1, "bob") > turn(c, 1, "cy")]
    assert chats, "the fixture's IDs no longer exercise the order"
    chat = chats[0]
    result = crowded.search("Turn", "cy", k=5, where={"chat": chat}, mode="keyword")
    scores = {h.entity.data.n: h.score for h in result.hits if h.entity.data.who != "bob"}
    assert scores[0] == pytest.approx(scores[1] * 0.5, abs=1e-5)  # ann, at turn 0


def run_neighbour_queries(m: Memory) -> dict[str, Any]:
    out = {}
    for mode in ("hybrid", "keyword", "vector"):
        for text in ("Paris", "the weather umbrella", "bye"):
            result = m.search("Turn", text, k=6, mode=mode)
            out[f"{mode}|{text}"] = [(h.entity.id, h.score) for h in result.hits]
    return out


def open_neighbour_memory(path: Path) -> Memory:
    return Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())


def test_neighbour_support_is_deterministic_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "m"
    m = open_neighbour_memory(path)
    m.define_type(turn_type({**NEAR, "fusion": "bm25max", "weights": None}))
    fill_chat(m)
    first = run_neighbour_queries(m)
    assert run_neighbour_queries(m) == first
    m.close()
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from tests.search.test_profiles import open_neighbour_memory, run_neighbour_queries
        m = open_neighbour_memory(Path({str(path)!r}))
        print(json.dumps(run_neighbour_queries(m)))
        m.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True, env={"PYTHONHASHSEED": "7"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == json.loads(json.dumps(first))


def test_the_bundled_conversation_type_loads() -> None:
    from dmf_hybrid._internal.bundled import bundled_type

    message = bundled_type("Message")
    assert message is not None and message.name == "Message" and message.search is not None
    assert message.search.neighbours is not None and message.context is not None
