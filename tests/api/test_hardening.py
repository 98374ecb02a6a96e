"""What a hostile client found, over a real server with API keys: the audit principal apart
from the caller's actor label, a write that commits always answers, ``as_of`` numbers, reserved
field names, validation messages, opaque cursors, per-tenant audit head and verify."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from dmf_hybrid import FilterError, HashEmbedder, Memory, SchemaError, Settings, ValidationError
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.auth import hash_key
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.client import MemoryClient
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel
from tests.store import assert_unchanged

KEYS = ("w-acme:acme:writer,w-acme-2:acme:writer,r-acme:acme:reader,w-other:other:writer,"
        "root:acme:admin")


def label(key: str) -> str:
    return f"key:{hash_key(key)[:8]}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Memory]]:
    memory = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(memory.for_tenant("acme"))
    define_travel(memory.for_tenant("other"))
    settings = Settings(data_dir=tmp_path / "srv", embedder="hash", load_examples=False,
                        api_keys=KEYS)
    try:
        with serve_in_thread(create_app(settings, memory), timeout=10) as url:
            yield url, memory
    finally:
        memory.close()


def http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


# ---------------------------------------------------------------- 1. the response of a write


def test_a_create_with_an_id_ending_in_a_newline_is_refused_not_committed(
        served: tuple[str, Memory]) -> None:
    url, memory = served
    before = memory.last_seq()
    with http(url, "w-acme") as c:
        response = c.post("/entities/Poi", json={"id": "abc\n", "data": {"name": "a",
                                                                         "city": "b"}})
        assert response.status_code == 422
        assert response.json()["details"]["field"] == "id"
    assert memory.last_seq() == before


# ---------------------------------------------------------------- 2. the audit principal


def test_the_audit_event_records_the_authenticated_key_apart_from_x_actor(
        served: tuple[str, Memory]) -> None:
    url, memory = served
    with http(url, "w-acme") as c:
        own = c.post("/entities/Poi", json={"data": {"name": "a", "city": "b"}}).json()
        forged = c.post("/entities/Poi", json={"data": {"name": "c", "city": "d"}},
                        headers={"X-Actor": label("w-acme-2")}).json()
        named = c.post("/entities/Poi", json={"data": {"name": "e", "city": "f"}},
                       headers={"X-Actor": "planner%20%E5%8A%A9%E6%89%8B"}).json()
        bad = [c.post("/entities/Poi", json={"data": {"name": "g", "city": "h"}},
                      headers={"X-Actor": text}) for text in ("evil%0Aline", "bell%07",
                                                              "x" * 300)]
    events = {e.entity_id: e for e in memory.for_tenant("acme").events()}
    assert events[own["id"]].principal == label("w-acme")
    assert events[own["id"]].actor == label("w-acme")  # the default label: the key's
    assert events[forged["id"]].principal == label("w-acme")  # not the key it names
    assert events[forged["id"]].actor == label("w-acme-2")  # shown as the caller's label
    assert events[named["id"]].actor == "planner 助手"
    assert [r.status_code for r in bad] == [422, 422, 422]
    assert {r.json()["details"]["field"] for r in bad} == {"actor"}
    assert memory.verify_audit().ok


def test_the_principal_is_covered_by_the_hash_chain(served: tuple[str, Memory]) -> None:
    url, memory = served
    with http(url, "w-acme") as c:
        c.post("/entities/Poi", json={"data": {"name": "a", "city": "b"}})
    acme = memory.for_tenant("acme")
    seq = acme.last_seq()
    _tamper(acme, seq)
    report = memory.verify_audit()
    assert not report.ok and (report.first_bad_seq, report.tenant) == (seq, "acme")


def _tamper(memory: Memory, seq: int) -> None:
    """Edit the principal of the event ``seq`` of ``memory``'s tenant."""
    with memory._store.db.write() as con:
        con.execute("UPDATE events SET principal = 'key:00000000' WHERE tenant = ? AND seq = ?",
                    [memory.tenant, seq])


def test_an_old_store_without_the_principal_column_keeps_verifying(tmp_path: Path) -> None:
    path = tmp_path / "old"
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        define_travel(m)
        for i in range(5):
            m.create("Poi", {"name": f"p{i}", "city": "c"})
    con = duckdb.connect(str(path / "memory.duckdb"))  # the layout before the column
    con.execute("ALTER TABLE events DROP COLUMN principal")
    con.close()
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        assert m.verify_audit().ok
        m.for_tenant(m.tenant, principal="key:12345678").create("Poi", {"name": "new",
                                                                         "city": "c"})
        events = m.events()
        assert [e.principal for e in events][-2:] == [None, "key:12345678"]
        assert m.verify_audit().ok


def test_in_process_actor_labels_are_checked(tmp_path: Path) -> None:
    with Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        define_travel(m)
        for actor in ("a\nb", "tab\there", "\x00", "x" * 257):
            assert_unchanged(m, lambda a=actor: m.create("Poi", {"name": "a", "city": "b"},
                                                         actor=a), ValidationError)
        assert m.create("Poi", {"name": "a", "city": "b"}, actor="agent 小助手").version == 1


# ---------------------------------------------------------------- 5. as_of, names, messages


def test_as_of_numbers_are_seqs_iso_strings_are_times_anything_else_is_refused(
        served: tuple[str, Memory]) -> None:
    url, _ = served
    with http(url, "w-acme") as c:
        poi = c.post("/entities/Poi", json={"data": {"name": "a", "city": "b"}}).json()
        for bad in ("-1", "1e10", "1.5", "true", "abc", "-0.5"):
            response = c.get(f"/entities/{poi['id']}", params={"as_of": bad})
            assert response.status_code == 422, bad
        for bad_body in (-1, 1e10, 1.5, True, "abc", 1e308, [1]):
            response = c.post("/entities/Poi/query", json={"as_of": bad_body})
            assert response.status_code == 422, bad_body
            assert "as_of" in response.json()["message"]
        assert c.post("/entities/Poi/query", json={"as_of": 0}).json()["items"] == []
        assert c.post("/entities/Poi/query", json={"as_of": "2000-01-01T00:00:00Z"}
                      ).json()["items"] == []
        # a time still to come is not a pinned state: refused, naming as_of
        for future in ("2100-01-01T00:00:00Z", "2100-01-01"):
            response = c.post("/entities/Poi/query", json={"as_of": future})
            assert response.status_code == 422 and "as_of" in response.json()["message"]
            assert c.get(f"/entities/{poi['id']}", params={"as_of": future}
                         ).status_code == 422


@pytest.mark.parametrize("field", ["model_config", "model_fields", "json", "copy", "dict",
                                   "schema", "validate", "model_dump", "version", "tenant"])
def test_reserved_field_names_are_refused_with_the_reason(tmp_path: Path, field: str) -> None:
    with Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        info = assert_unchanged(m, lambda: m.define_type(
            {"name": "Shadow", "fields": {field: {"type": "str"}}}), SchemaError)
        assert "reserved:" in info.value.message and info.value.details["reason"]


def test_validation_messages_carry_no_internal_exception_text(
        served: tuple[str, Memory]) -> None:
    url, _ = served
    internal = ("unhashable", "Traceback", "object has no attribute", "NoneType", "TypeError",
                "KeyError")
    with http(url, "root") as c:
        bodies: list[tuple[str, Any]] = [
            ("/plans/validate", {"ops": [{"op": "query", "type": ["Poi"]}]}),
            ("/plans/validate", {"ops": [{"op": "get", "id": {"a": 1}}]}),
            ("/plans/validate", {"ops": [{"op": ["create"]}]}),
            ("/plans/execute", {"ops": [{"op": "link", "from_id": "a", "relation": ["x"],
                                         "to_id": "b"}]}),
            ("/types", {"name": "Bad", "fields": {"a": {"type": ["str"]}}}),
            ("/types", {"name": "Bad", "fields": {"a": {"type": "enum", "values": [[1]]}}}),
            ("/types", {"name": "Bad", "fields": ["a"]}),
            ("/entities/Poi/query", {"where": {"name": {"$in": [["x"]]}}}),
            ("/entities/Poi/query", {"order_by": [["name"]]}),
            ("/search", {"type": "Poi", "text": "x", "where": {"$or": [[1]]}}),
        ]
        for path, body in bodies:
            response = c.post(path, json=body)
            assert response.status_code < 500, (path, body, response.text)
            assert response.status_code >= 400 or response.json()["valid"] is False
            assert not any(word in response.text for word in internal), (path, response.text)


# ---------------------------------------------------------------- cursors


def test_cursors_are_opaque_sealed_and_deterministic(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "a", embedder=HashEmbedder(), vector_index=ExactIndex()) as m, \
            Memory.open(tmp_path / "b", embedder=HashEmbedder(), vector_index=ExactIndex()) as o:
        for store in (m, o):
            define_travel(store)
            store.create_many("Poi", [{"name": f"secret-{i}", "city": "Paris"}
                                      for i in range(6)])
        cursor = m.query("Poi", order_by="name", limit=2).next_cursor
        assert cursor is not None
        assert cursor == m.query("Poi", order_by="name", limit=2).next_cursor  # deterministic
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        assert b"secret" not in raw and b"Poi_" not in raw  # no row values readable
        page = m.query("Poi", order_by="name", limit=2, cursor=cursor)
        assert [e.data.name for e in page.items] == ["secret-2", "secret-3"]
        flipped = bytearray(raw)
        flipped[-1] ^= 1
        forged = base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("=")
        plain = base64.urlsafe_b64encode(b'["f",["secret-4"],"x"]').decode().rstrip("=")
        for bad in (forged, plain, "not-base64!!"):
            assert_unchanged(m, lambda b=bad: m.query("Poi", order_by="name", cursor=b),
                             FilterError)
        # another store's cursor for the same query is refused too (its own secret)
        theirs = o.query("Poi", order_by="name", limit=2).next_cursor
        assert theirs is not None and theirs != cursor
        with pytest.raises(FilterError):
            m.query("Poi", order_by="name", cursor=theirs)


# ---------------------------------------------------------------- head / verify per tenant


def test_head_and_verify_are_per_tenant_for_keys_below_admin(
        served: tuple[str, Memory]) -> None:
    url, memory = served
    with http(url, "w-other") as other:
        for i in range(4):
            other.post("/entities/Poi", json={"data": {"name": f"o{i}", "city": "x"}})
    with http(url, "w-acme") as c:
        c.post("/entities/Poi", json={"data": {"name": "mine", "city": "x"}})
    acme_seq = memory.for_tenant("acme").last_seq()
    with http(url, "w-other") as other:
        other.post("/entities/Poi", json={"data": {"name": "later", "city": "x"}})
    acme_events = len(memory.for_tenant("acme").events())
    assert acme_events == acme_seq  # each tenant numbers its own events
    with http(url, "r-acme") as reader, http(url, "root") as admin:
        head = reader.get("/audit/head").json()
        assert head == {"last_seq": acme_seq, "scope": "tenant"}
        report = reader.get("/audit/verify").json()
        assert report["ok"] and report["scope"] == "tenant"
        assert report["events_checked"] == acme_events and report["last_seq"] == acme_seq
        full = admin.get("/audit/verify").json()
        assert full["scope"] == "store" and full["chains"] >= 2
        assert full["last_seq"] == full["events_checked"] > acme_events
        assert admin.get("/audit/head").json() == head  # root is acme's admin: acme's seqs
        assert admin.get("/whoami").json()["scope"] == "store"
        assert reader.get("/whoami").json()["scope"] == "tenant"
    with MemoryClient(url, api_key="r-acme") as client:
        assert client.last_seq() == acme_seq
        entity = client.query("Poi", where={"name": "mine"}, as_of=client.last_seq()).items
        assert len(entity) == 1
    other_memory = memory.for_tenant("other")
    _tamper(other_memory, other_memory.last_seq())  # the other tenant's newest event
    with http(url, "r-acme") as reader, http(url, "root") as admin:
        assert reader.get("/audit/verify").json()["ok"]  # acme's own chain holds
        report = admin.get("/audit/verify").json()
        assert not report["ok"] and report["tenant"] == "other"
        assert report["first_bad_seq"] == other_memory.last_seq()
