"""The inspector adds no way around the API's keys, roles and tenants, and never runs data.

- every route either authenticates the caller or serves a packaged static file;
- the static routes serve exactly the packaged files, nothing else, under a strict CSP;
- a key of another tenant sees nothing of this tenant through the UI;
- data is rendered as text, never parsed as HTML;
- with no keys configured (open, loopback only) the UI works without a key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.api.app import ROUTERS
from dmf_hybrid._internal.api.deps import get_principal
from dmf_hybrid._internal.api.routes import docs, ui
from dmf_hybrid._internal.examples import seed_examples
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.ui.conftest import WAIT, Browser, Server, serving

UI_DIR = Path(str(files("dmf_hybrid._internal.api").joinpath("ui")))
#: The routes anyone may call: health checks, the OpenAPI document and static pages.
PUBLIC = {"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
          "/docs/assets/{name}", "/ui", "/ui/", "/ui/{name:path}"}
STATIC = {"/docs/assets/{name}", "/ui", "/ui/", "/ui/{name:path}"}


def _authenticates(dependant: Any) -> bool:
    return any(d.call is get_principal or _authenticates(d) for d in dependant.dependencies)


def _routes() -> list[APIRoute]:
    return [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]


def test_every_route_authenticates_or_is_public_and_static() -> None:
    public = {r.path for r in _routes() if not _authenticates(r.dependant)}
    assert public == PUBLIC - {"/openapi.json"}
    static = {r.path for r in _routes() if r.endpoint.__module__ in (ui.__name__, docs.__name__)}
    assert static == PUBLIC - {"/healthz", "/readyz", "/openapi.json"}
    whoami = next(r for r in _routes() if r.path == "/whoami")
    assert _authenticates(whoami.dependant)


def test_without_a_key_only_the_public_routes_answer(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=WAIT) as http:
        for route in _routes():
            path = re.sub(r"\{[^}]+\}", "x", route.path)
            for method in sorted(route.methods or ()):
                status = http.request(method, path, json={}).status_code
                if route.path in PUBLIC:
                    assert status != 401, (method, route.path)
                else:
                    assert status == 401, (method, route.path, status)
        assert http.get("/openapi.json").status_code == 200


def test_ui_routes_serve_exactly_the_packaged_files(server: Server) -> None:
    on_disk = sorted(str(p.relative_to(UI_DIR)) for p in UI_DIR.rglob("*")
                     if p.is_file() and p.suffix in (".html", ".js", ".css", ".svg"))
    assert ui.ASSETS.names == on_disk and "index.html" in on_disk
    with httpx.Client(base_url=server.url, timeout=WAIT) as http:  # no key
        assert http.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        index = http.get("/ui/")
        assert index.content == (UI_DIR / "index.html").read_bytes()
        for name in on_disk:
            response = http.get(f"/ui/{name}")
            assert response.status_code == 200 and response.content == (UI_DIR / name).read_bytes()
            csp = response.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "connect-src 'self'" in csp
            assert "script-src 'self';" in csp and response.headers["x-content-type-options"] == \
                "nosniff"
        assert http.get("/ui/js/app.js", headers={"If-None-Match": http.get(
            "/ui/js/app.js").headers["etag"]}).status_code == 304
        for path in ("/ui/../pyproject.toml", "/ui/%2e%2e/app.py", "/ui/..%2fapp.py",
                     "/ui/js/../../routes/ui.py", "/ui/__init__.py", "/ui/missing.js",
                     "/ui/js", "/ui/%2fetc%2fpasswd", "/ui//etc/passwd", "/ui/index.html/x"):
            response = http.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"] == "not_found"
        assert http.post("/ui/index.html").status_code == 405
        # the data the pages show needs a key
        assert http.get("/whoami").status_code == 401
        assert http.get("/types").status_code == 401


def test_the_ui_code_never_parses_data_as_html() -> None:
    forbidden = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|"
                           r"\beval\(|new Function|DOMParser|createContextualFragment")
    for path in UI_DIR.rglob("*.js"):
        assert not forbidden.search(path.read_text(encoding="utf-8")), path
    assert "<script>" not in (UI_DIR / "index.html").read_text(encoding="utf-8")  # no inline JS


def test_another_tenants_key_sees_nothing(server: Server, browser: Browser) -> None:
    browser.open(server.url, "/types", "ui-other")
    browser.wait("#session", "tenant other")
    # each tenant owns its types: the other tenant has defined none
    browser.wait("p.muted", "0 types in tenant other")
    assert browser.texts("#types-table td.count") == []

    browser.open(server.url, f"/entity/{server.story.yu_garden}", "ui-other")
    assert "No entity with this ID in tenant other" in browser.wait(".notice.error").text

    browser.open(server.url, f"/audit?entity={server.story.yu_garden}", "ui-other")
    assert f"no entity {server.story.yu_garden}" in browser.wait("#audit-list .notice.error").text
    browser.open(server.url, "/audit", "ui-other")
    browser.wait("#audit-summary")
    seen = " ".join(browser.texts("#audit-list"))
    assert server.story.yu_garden not in seen and server.story.trip not in seen

    browser.open(server.url, "/search?type=PointOfInterest&text=garden", "ui-other")
    browser.wait("#search-results", "unknown entity type 'PointOfInterest' (known: none")
    browser.open(server.url, "/constraints", "ui-other")
    browser.wait("#constraint-list .empty", "No open constraint")


def test_an_unknown_key_is_refused_with_the_api_message(server: Server,
                                                        browser: Browser) -> None:
    browser.open(server.url, "/types", "not-a-key")
    assert "unknown API key" in browser.wait("#key-form .notice.error").text
    browser.fill("#api-key", "ui-reader")
    browser.click("#key-form button")
    browser.wait("#session", "reader key")
    assert browser.driver.execute_script("return sessionStorage.getItem('dmf.apiKey')") == \
        "ui-reader"


def test_data_is_rendered_as_text(server: Server, browser: Browser) -> None:
    hostile = server.memory.create("PointOfInterest", {
        "name": '<img src=x onerror="window.__pwned=1">', "city": "<b>Nowhere</b>",
        "description": "<script>window.__pwned=2</script>"}, actor="test")
    browser.open(server.url, f"/entity/{hostile.id}", "ui-reader")
    assert browser.wait("#entity-title").text == '<img src=x onerror="window.__pwned=1">'
    assert "<script>window.__pwned=2</script>" in browser.wait("#entity-data").text
    browser.open(server.url, "/types/PointOfInterest?f.city=%3Cb%3ENowhere%3C%2Fb%3E",
                 "ui-reader")
    browser.wait(f'#entity-list tr[data-id="{hostile.id}"]', "<b>Nowhere</b>")
    assert browser.driver.execute_script("return window.__pwned") is None
    assert not browser.all("main img") and not browser.all("main b") \
        and not browser.all("main script")


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service with no keys (open, single tenant, loopback) and the example data."""
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        seed_examples(mem)
        with serving(mem, tmp_path_factory.mktemp("open"), api_keys=None) as url:
            yield url
    finally:
        mem.close()


def test_an_open_service_needs_no_key(open_server: str, browser: Browser) -> None:
    browser.open(open_server, "/types", None)
    browser.wait("#session", "open service")
    browser.wait("#types-table td.count")
    counts = {el.find_element("css selector", "a").text:
              int(el.find_element("css selector", "td.count").text)
              for el in browser.all("#types-table tbody tr")}
    assert counts["PointOfInterest"] > 0
    assert not browser.all("#sign-out") and not browser.all("#key-form")
