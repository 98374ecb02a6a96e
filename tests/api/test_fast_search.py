"""``POST /search`` answered by the fast path gives what FastAPI's route gives, byte for byte.

Two apps serve the same memory over real uvicorn servers on 127.0.0.1: the product's, and one
without the fast-path middleware (the route alone). Every request goes to both; status,
headers and body must be equal (but for the date, the length and the receipt's stage
timings), and the product's app must have answered exactly the well-formed, permitted searches
itself (the rest went the normal way).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmf_hybrid import Memory
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.fast_search import SearchFastPath
from tests.conftest import tenant_like
from tests.doors import START_TIMEOUT, open_memory, serve, service_settings

#: (headers, body or raw bytes) of requests that succeed through the fast path
GOOD: list[tuple[dict[str, str], Any]] = [
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "soup dumplings"}),
    ({"authorization": "bearer key-admin"}, {"type": "Poi", "text": "外滩 night view",
                                              "mode": "keyword", "k": 2}),
    ({"X-API-Key": "key-writer"}, {"type": "Poi", "text": "museum", "mode": "vector", "k": 1,
                                   "where": {"city": "Shanghai"}}),
    ({"X-API-Key": "key-other"}, {"type": "Poi", "text": "museum"}),  # another tenant
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "小笼包", "as_of": 1}),
    ({"Authorization": "Bearer key-reader",
      "Content-Type": "application/json; charset=utf-8"},
     {"type": "Trip", "text": "shanghai trip", "where": {"budget": {"$lte": 5000}}}),
]

#: requests the normal path answers, each with an error
OTHER: list[tuple[dict[str, str], Any]] = [
    ({}, {"type": "Poi", "text": "museum"}),  # no key
    ({"Authorization": "Bearer nope"}, {"type": "Poi", "text": "museum"}),
    ({"Authorization": "Basic a2V5LXJlYWRlcg=="}, {"type": "Poi", "text": "museum"}),
    ({"Authorization": "Bearer"}, {"type": "Poi", "text": "museum"}),
    ({"Authorization": "Bearer key-reader", "Content-Type": "text/plain"},
     b'{"type": "Poi", "text": "museum"}'),
    ({"Authorization": "Bearer key-reader"}, b'{"type": "Poi", "text": '),  # not JSON
    ({"Authorization": "Bearer key-reader"}, b""),
    ({"Authorization": "Bearer key-reader"}, ["Poi"]),
    ({"Authorization": "Bearer key-reader"}, {"text": "museum"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x", "colour": "red"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x", "k": -1}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x", "mode": "fuzzy"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": 3}),
    ({"Authorization": "Bearer key-reader"}, b'{"type": "Poi", "text": "\\ud800"}'),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x" * 70_000}),
]

#: requests that pass the fast path's checks but whose search fails (answered by the handler
#: the app registers for the error)
FAILING: list[tuple[dict[str, str], Any]] = [
    ({"Authorization": "Bearer key-reader"}, {"type": "Nope", "text": "museum"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x",
                                              "where": {"colour": "red"}}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x", "k": 10**6}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x", "as_of": "soon"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": None, "mode": "keyword"}),
    ({"Authorization": "Bearer key-reader"}, {"type": "Poi", "text": "x",
                                              "related_to": {"relation": "includes"}}),
]


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memory, str, str, Any]]:
    """The memory, the product's URL, the route-only app's URL and the product's app (one
    for the module: searches change nothing, which every test checks)."""
    tmp_path = tmp_path_factory.mktemp("fast-search")
    mem = open_memory(tmp_path / "mem")
    mem.create("Poi", {"name": "Din Tai Fung", "city": "Shanghai", "cost": 120})
    mem.create("Poi", {"name": "外滩 night view", "city": "Shanghai"})
    mem.create("Poi", {"name": "小笼包 stall", "city": "Shanghai", "rating": 5})
    mem.create("Trip", {"destination": "Shanghai", "budget": 5000, "tags": ["food"]})
    tenant_like(mem, "other").create("Poi", {"name": "Louvre museum", "city": "Paris"})
    settings = service_settings(tmp_path, max_body_bytes=64 * 1024)  # with the test keys
    fast = create_app(settings, mem)
    plain = create_app(settings, mem)
    plain.user_middleware = [m for m in plain.user_middleware if m.cls is not SearchFastPath]
    assert len(plain.user_middleware) == len(fast.user_middleware) - 1
    with serve(fast) as fast_url, serve(plain) as plain_url:
        yield mem, fast_url, plain_url, fast
    mem.close()


def _post(url: str, headers: dict[str, str], body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else None
    with httpx.Client(base_url=url, timeout=START_TIMEOUT) as client:
        if content is not None:
            return client.post("/search", content=content, headers=headers)
        return client.post("/search", json=body, headers=headers)


def _same(fast_url: str, plain_url: str, headers: dict[str, str], body: Any) -> httpx.Response:
    got, want = _post(fast_url, headers, body), _post(plain_url, headers, body)
    assert got.status_code == want.status_code, (headers, body, got.text, want.text)
    assert _headers(got) == _headers(want), (headers, body)
    assert _untimed(got.content) == _untimed(want.content), (headers, body)
    return got


def _headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The response's headers, but its date and length (the timings change the length)."""
    return sorted((k, v) for k, v in response.headers.items()
                  if k not in ("date", "content-length"))


def _untimed(content: bytes) -> bytes:
    """The bytes with the receipt's stage timings (which differ run to run) blanked."""
    return re.sub(rb'"timings_ms":\{[^}]*\}', b'"timings_ms":{}', content)


def test_fast_path_answers_searches_as_the_route_does(
        doors: tuple[Memory, str, str, Any]) -> None:
    mem, fast_url, plain_url, fast = doors
    state = fast.state.dmf
    before = mem.last_seq()
    for headers, body in GOOD:
        served = state.fast_searches
        got = _same(fast_url, plain_url, headers, body)
        assert got.status_code == 200, got.text
        assert state.fast_searches == served + 1, body
    hits = _post(fast_url, {"X-API-Key": "key-other"}, {"type": "Poi", "text": "museum"})
    assert [h["entity"]["data"]["name"] for h in hits.json()["hits"]] == ["Louvre museum"]
    shanghai = _post(fast_url, {"X-API-Key": "key-reader"},
                     {"type": "Poi", "text": "museum", "mode": "vector", "k": 5,
                      "where": {"city": "Shanghai"}}).json()["hits"]
    assert {h["entity"]["data"]["city"] for h in shanghai} == {"Shanghai"}
    assert mem.last_seq() == before  # searching changes nothing


@pytest.mark.parametrize(("headers", "body"), OTHER + FAILING)
def test_bad_requests_and_failing_searches_get_the_routes_answer(
        doors: tuple[Memory, str, str, Any], headers: dict[str, str], body: Any) -> None:
    mem, fast_url, plain_url, fast = doors
    before, served = mem.last_seq(), fast.state.dmf.fast_searches
    got = _same(fast_url, plain_url, headers, body)
    assert got.status_code in (401, 404, 413, 422), got.text
    assert got.json()["error"] in ("unauthorized", "not_found", "limit_exceeded", "filter_error",
                                   "validation_error")
    assert fast.state.dmf.fast_searches == served
    assert mem.last_seq() == before


def test_other_routes_and_methods_are_untouched(doors: tuple[Memory, str, str, Any]) -> None:
    _mem, fast_url, plain_url, fast = doors
    served = fast.state.dmf.fast_searches
    for method, path in (("GET", "/search"), ("POST", "/search/"), ("GET", "/types")):
        with httpx.Client(timeout=START_TIMEOUT, headers={"X-API-Key": "key-reader"}) as c:
            got = c.request(method, fast_url + path)
            want = c.request(method, plain_url + path)
        assert (got.status_code, got.content) == (want.status_code, want.content), path
    assert fast.state.dmf.fast_searches == served


def test_one_function_resolves_the_caller_and_one_checks_the_role() -> None:
    """The fast path and every route reach the key ring and the role check through
    ``deps.resolve_principal`` and ``deps.tenant_memory`` only, so they cannot drift apart."""
    api = Path(create_app.__code__.co_filename).parent
    calls = {".authenticate(": [], ".require(": [], ".for_tenant(": []}
    for path in sorted(api.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for call in calls:
                if call in line and "def " not in line:
                    calls[call].append(f"{path.relative_to(api)}:{number}")
    assert {call: [where.split(":")[0] for where in found] for call, found in calls.items()} == {
        ".authenticate(": ["deps.py"], ".require(": ["deps.py"], ".for_tenant(": ["deps.py"]}
