"""HTTP-only behaviour: keys and roles, status codes, headers, limits, health, error bodies."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from dmf_hybrid import (
    Conflict,
    Forbidden,
    HashEmbedder,
    LimitExceeded,
    Memory,
    ServiceUnavailable,
    Settings,
    Unauthorized,
    ValidationError,
)
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.client import MemoryClient
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel
from tests.doors import Front, SyncASGITransport, open_memory

POI = {"name": "The Bund", "city": "Shanghai"}


def test_no_key_or_unknown_key_is_401(http_api: Front) -> None:
    assert http_api.with_key is not None
    for key in (None, "wrong", ""):
        with pytest.raises(Unauthorized):
            http_api.with_key(key).types()
    with http_api.raw(api_key=None) as raw:
        response = raw.get("/types")
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"] == "unauthorized"
        assert raw.get("/types", headers={"X-API-Key": "key-reader"}).status_code == 200
        assert raw.get("/healthz").status_code == 200
        assert raw.get("/readyz").status_code == 200


def test_roles_are_403(http_api: Front) -> None:
    assert http_api.as_role is not None
    reader, writer = http_api.as_role("reader"), http_api.as_role("writer")
    bund = writer.create("Poi", POI)
    assert reader.get(bund.id).id == bund.id
    assert reader.search("Poi", "Bund").hits[0].entity.id == bund.id
    assert reader.history(bund.id) and reader.verify_audit().ok
    for forbidden in (lambda: reader.create("Poi", POI), lambda: reader.delete(bund.id),
                      lambda: reader.update(bund.id, {"cost": 1}),
                      lambda: writer.define_type({"name": "X", "fields": {"a": {}}}),
                      writer.reconcile, writer.reindex, writer.flush,
                      lambda: writer.snapshot("s1"), lambda: writer.export("b1")):
        with pytest.raises(Forbidden):
            forbidden()
    assert writer.update(bund.id, {"cost": 1}).version == 2
    assert http_api.mem.reconcile().checked >= 1
    assert http_api.mem.reindex().entities >= 1
    assert http_api.mem.flush() == 0


def test_actor_defaults_to_key_label(http_api: Front) -> None:
    assert http_api.as_role is not None
    bund = http_api.as_role("writer").create("Poi", POI)
    actor = http_api.mem.history(bund.id)[0].actor
    assert actor is not None and actor.startswith("key:") and "key-writer" not in actor


def test_etag_and_if_match_headers(http_api: Front) -> None:
    with http_api.raw() as raw:
        created = raw.post("/entities/Poi", json={"data": POI})
        assert created.status_code == 201 and created.headers["etag"] == '"1"'
        eid = created.json()["id"]
        assert created.headers["location"] == f"/entities/{eid}"
        assert raw.post("/entities/Poi", json={"data": POI}).status_code == 200
        assert raw.get(f"/entities/{eid}").headers["etag"] == '"1"'
        stale = raw.patch(f"/entities/{eid}", json={"data": {"cost": 2}},
                          headers={"If-Match": '"9"'})
        assert stale.status_code == 412 and stale.json()["error"] == "version_conflict"
        weak = raw.patch(f"/entities/{eid}", json={"data": {"cost": 2}},
                         headers={"If-Match": 'W/"1"'})
        assert weak.status_code == 200 and weak.headers["etag"] == '"2"'
        assert raw.patch(f"/entities/{eid}", json={"data": {"cost": 3}},
                         headers={"If-Match": "*"}).status_code == 200
        bad = raw.patch(f"/entities/{eid}", json={"data": {"cost": 4}},
                        headers={"If-Match": "abc"})
        assert bad.status_code == 422 and bad.json()["details"]["field"] == "If-Match"


def test_request_validation_names_the_field(http_api: Front) -> None:
    with http_api.raw() as raw:
        wrong_type = raw.post("/search", json={"type": "Poi", "text": "x", "k": "many"})
        body = wrong_type.json()
        assert wrong_type.status_code == 422
        assert body["error"] == "validation_error" and body["details"]["field"] == "k"
        assert body["message"] == "k must be an integer of at least 1"  # as Memory says it
        unknown = raw.post("/entities/Poi/query", json={"wher": {}})
        assert unknown.status_code == 422 and unknown.json()["details"]["field"] == "wher"
        missing = raw.post("/entities/Poi", json={})
        assert missing.status_code == 422 and missing.json()["details"]["field"] == "data"
        broken = raw.post("/search", content=b"{not json",
                          headers={"Content-Type": "application/json"})
        assert broken.status_code == 422 and broken.json()["details"]["field"] == "body"
        deep = raw.post("/search", content=b"[" * 20_000 + b"]" * 20_000,
                        headers={"Content-Type": "application/json"})
        assert deep.status_code == 422 and deep.json()["details"]["field"] == "body"
        as_of = raw.get("/entities/Poi_0123456789abcdef0123", params={"as_of": "yesterday"})
        assert as_of.status_code == 422 and as_of.json()["details"]["field"] == "as_of"
        events = raw.get("/audit/events", params={"limit": 10**6})
        assert events.status_code == 422 and events.json()["error"] == "limit_exceeded"
        huge_seq = raw.get("/audit/events", params={"since_seq": 10**30})
        assert huge_seq.status_code == 422 and huge_seq.json()["details"]["field"] == "since_seq"
        assert raw.get("/no/such/route").json()["error"] == "not_found"


def test_body_too_large_is_413(http_api: Front) -> None:
    big = {"name": "x" * (100 * 1024), "city": "Shanghai"}
    with pytest.raises(LimitExceeded) as err:
        http_api.mem.create("Poi", big)
    assert err.value.details["field"] == "body"
    with http_api.raw() as raw:
        response = raw.post("/entities/Poi", json={"data": big})
        assert response.status_code == 413 and response.json()["error"] == "limit_exceeded"

        def chunks():  # no Content-Length: the limit applies while the body streams in
            for _ in range(100):
                yield b" " * 1024

        streamed = raw.post("/entities/Poi", content=chunks(),
                            headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
    assert http_api.mem.count("Poi") == 0


def test_snapshot_names(http_api: Front, tmp_path: Path) -> None:
    http_api.mem.create("Poi", POI)
    for bad in ("../escape", "a/b", "..", ".hidden", "", "x" * 65):
        with pytest.raises(ValidationError) as err:
            http_api.mem.snapshot(bad)
        assert err.value.details["field"] == "name"
    manifest = http_api.mem.snapshot("first.v1")  # on either engine: a bundle inside
    assert manifest.name == "first.v1" and manifest.last_seq >= 1
    assert manifest.format == 2 and manifest.counts["entity"] >= 1
    assert (tmp_path / "data" / "snapshots" / "first.v1" / "dmf-snapshot.json").is_file()
    assert (tmp_path / "data" / "snapshots" / "first.v1" / manifest.bundle).is_file()
    assert not (tmp_path / "escape").exists()
    with pytest.raises(Conflict):
        http_api.mem.snapshot("first.v1")


def test_export_writes_a_bundle_under_the_data_directory(http_api: Front,
                                                         tmp_path: Path) -> None:
    bund = http_api.mem.create("Poi", POI)
    for bad in ("../escape", "a/b", "..", ".hidden", "", "x" * 65):
        with pytest.raises(ValidationError) as err:
            http_api.mem.export(bad)
        assert err.value.details["field"] == "name"
    manifest = http_api.mem.export("all.jsonl.gz")
    assert manifest.name == "all.jsonl.gz" and manifest.path == "exports/all.jsonl.gz"
    # the whole store's log: its last position over every tenant's chain
    assert manifest.last_seq == manifest.counts["event"] >= http_api.mem.last_seq()
    assert manifest.counts["entity"] == 1
    with pytest.raises(Conflict):
        http_api.mem.export("all.jsonl.gz")
    bundle = tmp_path / "data" / "exports" / "all.jsonl.gz"
    imported = Memory.import_bundle(bundle, tmp_path / "imported", embedder=HashEmbedder())
    try:
        assert imported.get(bund.id).data.name == POI["name"]
        assert imported.verify_audit().last_hash == http_api.mem.verify_audit().last_hash
    finally:
        imported.close()


def test_openapi_documents_every_route(tmp_path: Path) -> None:
    mem = open_memory(None)
    try:
        app = create_app(Settings(data_dir=tmp_path), mem)
        with httpx.Client(base_url="http://testserver",
                          transport=SyncASGITransport(app)) as client:
            spec = client.get("/openapi.json").json()
            assert client.get("/docs").status_code == 200
    finally:
        mem.close()
    paths = spec["paths"]
    expected = {("/types", "get"), ("/types", "post"), ("/types/{name}", "get"),
                ("/entities/{type_name}", "post"), ("/entities/{entity_id}", "get"),
                ("/entities/{type_name}/query", "post"), ("/entities/{entity_id}", "patch"),
                ("/entities/{entity_id}/append", "post"), ("/entities/{entity_id}", "delete"),
                ("/entities/{entity_id}/restore", "post"), ("/entities/{entity_id}/erase", "post"),
                ("/relations", "post"), ("/relations", "delete"),
                ("/entities/{entity_id}/related", "get"), ("/search", "post"),
                ("/entities/{entity_id}/history", "get"), ("/audit/events", "get"),
                ("/audit/verify", "get"), ("/admin/reconcile", "post"),
                ("/admin/reindex", "post"), ("/admin/snapshot", "post"),
                ("/admin/export", "post"), ("/healthz", "get"),
                ("/readyz", "get")}
    present = {(p, m) for p, ops in paths.items() for m in ops}
    assert expected <= present
    for path, method in present:
        description = paths[path][method].get("description", "")
        assert description and "\n" not in description.strip(), (path, method)
    schemes = spec["components"]["securitySchemes"]
    assert {"HTTPBearer", "APIKeyHeader"} <= set(schemes)


class _NotLoadedYet(HashEmbedder):
    """The hash embedder pretending its model is still loading (readiness only)."""

    loaded = False


class _FailingIndex(ExactIndex):
    """An exact index that refuses writes while ``failing`` (an index outage)."""

    failing = True

    def upsert(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.failing:
            raise RuntimeError("index down")
        return super().upsert(*args, **kwargs)


def _raw_app(app: FastAPI) -> MemoryClient:
    return MemoryClient("http://testserver", transport=SyncASGITransport(app))


def test_readyz_reports_what_is_missing(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedder="hash")
    index = _FailingIndex()
    mem = open_memory(None, vector_index=index)
    embedder = mem.engine.embedder
    try:
        mem.engine.embedder = _NotLoadedYet()
        client = _raw_app(create_app(settings, mem))
        report = client.readiness()
        assert report["ready"] is False and report["model_loaded"] is False
        assert any("model" in p for p in report["problems"])
        assert client.health() == {"status": "ok"}
        mem.engine.embedder = embedder
        client.create("Poi", POI)  # committed in DuckDB; indexing fails and stays pending
        report = client.readiness()
        assert report["ready"] is False and report["outbox_pending"] >= 1
        with pytest.raises(ServiceUnavailable) as err:
            client._call("GET", "/readyz")
        assert "outbox" in err.value.message
        index.failing = False
        assert client.flush() >= 1
        assert client.readiness()["ready"] is True
        client.close()
    finally:
        mem.engine.embedder = embedder
        mem.close()


def test_the_service_builds_the_search_mirrors_before_it_is_ready(tmp_path: Path) -> None:
    mem = open_memory(tmp_path / "m")
    try:
        mem.create("Poi", POI)
        mem.engine.indexer.forget_local()  # as after a restart: nothing loaded yet
        assert mem.engine.indexer.local("Poi") is None
        settings = Settings(data_dir=tmp_path / "server", embedder="hash", load_examples=False)
        with serve_in_thread(create_app(settings, mem), timeout=30) as url, \
                MemoryClient(url, timeout=30) as client:
            deadline = time.monotonic() + 30
            while not client.readiness()["ready"]:
                assert time.monotonic() < deadline, client.readiness()
                time.sleep(0.05)
            local = mem.engine.indexer.local("Poi")
            assert local is not None and len(local) == 1
            assert mem.engine.indexer.keyword_index("Poi", "default") is not None
            assert [h.entity.data.name for h in client.search("Poi", "Bund").hits] == [
                "The Bund"]
    finally:
        mem.close()


def test_bugs_are_500_json(tmp_path: Path) -> None:
    mem = open_memory(None)
    try:
        app = create_app(Settings(data_dir=tmp_path), mem)

        @app.get("/boom")
        def boom() -> None:
            raise RuntimeError("a real bug")

        with httpx.Client(base_url="http://testserver",
                          transport=SyncASGITransport(app)) as client:
            response = client.get("/boom")
        assert response.status_code == 500
        assert response.json() == {"error": "internal_error",
                                   "message": "internal server error (logged)", "details": {}}
    finally:
        mem.close()


def test_open_mode_uses_the_default_tenant(tmp_path: Path) -> None:
    mem = open_memory(None)
    try:
        define_travel(mem.for_tenant("solo"))  # each tenant owns its types
        app = create_app(Settings(data_dir=tmp_path, tenant="solo"), mem)
        with MemoryClient("http://testserver", transport=SyncASGITransport(app)) as client:
            poi = client.create("Poi", POI)
            assert poi.tenant == "solo"
            assert client.define_type({"name": "Memo", "fields": {"text": {}}}).version == 1
        assert mem.for_tenant("solo").get(poi.id).id == poi.id
    finally:
        mem.close()


def test_unreachable_server_is_service_unavailable() -> None:
    from evaluation.ports import free_port

    with MemoryClient(f"http://127.0.0.1:{free_port()}", timeout=2) as client, \
            pytest.raises(ServiceUnavailable):
        client.types()


def test_search_answers_the_bytes_fastapis_own_serialisation_gives(tmp_path: Path) -> None:
    """/search skips FastAPI's dump-validate-serialise of its result (model_response): the
    same result through FastAPI's own path, on a route added here, gives the same bytes."""
    from dmf_hybrid._internal.api.deps import model_response
    from dmf_hybrid._internal.models import SearchResult

    mem = open_memory(tmp_path / "mem")
    try:
        mem.create("Trip", {"destination": "上海 Shanghai", "budget": 5000,
                            "tags": ["外滩", "food"], "start": "2026-05-01"})
        mem.create("Trip", {"destination": "Hangzhou"})
        mem.create("Poi", {"name": "The Bund \"外滩\"", "city": "Shanghai", "rating": None})
        kept: dict[str, SearchResult] = {}
        app = create_app(Settings(data_dir=tmp_path), mem)

        @app.get("/test/default-serialisation", response_model=SearchResult)
        def default_path() -> SearchResult:
            return kept["result"]

        with serve_in_thread(app, timeout=10.0) as url, httpx.Client(base_url=url) as client:
            for type_name, text in (("Trip", "上海 budget"), ("Poi", "Bund"), ("Trip", "nothing")):
                served = client.post("/search", json={"type": type_name, "text": text})
                assert served.status_code == 200
                assert served.headers["content-type"] == "application/json"
                result = SearchResult.model_validate_json(served.content)
                assert result.hits or text == "nothing"
                kept["result"] = mem.search(type_name, text)
                default = client.get("/test/default-serialisation")
                assert default.content == bytes(model_response(kept["result"]).body)
            schema = client.get("/openapi.json").json()["paths"]["/search"]["post"]
        assert schema["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/SearchResult"}
    finally:
        mem.close()


def test_appending_messages_answers_201_only_when_a_message_was_stored(http_api: Front) -> None:
    url = "/conversations/li-chat/messages"
    chat = [{"role": "user", "content": "我的蓝色衬衫到哪了？"},
            {"role": "assistant", "content": "Order A1001 has shipped."}]
    with http_api.raw() as raw:
        first = raw.post(url, json={"messages": chat})
        assert first.status_code == 201 and [m["created"] for m in first.json()] == [True, True]
        resend = raw.post(url, json={"messages": [{**chat[0], "turn": 0}]})
        assert resend.status_code == 200 and resend.json()[0]["created"] is False
        clash = raw.post(url, json={"messages": [{"role": "user", "content": "other",
                                                  "turn": 1}]})
        assert clash.status_code == 409 and clash.json()["error"] == "conflict"
        twice = raw.post(url, json={"messages": [{"role": "user", "content": "a", "turn": 7},
                                                 {"role": "user", "content": "b", "turn": 7}]})
        assert twice.status_code == 409
        turns = raw.post("/entities/Message/query", json={"where": {"conversation": "li-chat"}})
        assert sorted(m["data"]["turn"] for m in turns.json()["items"]) == [0, 1]
