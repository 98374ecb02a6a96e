"""/docs (Swagger UI) and /redoc render with the network unplugged: every asset is served here.

Over HTTP: the pages and every file they reference (and every ``url(...)`` inside a
stylesheet) come from this origin, and the pages name no other host. In Chromium, whose
resolver answers no host name: the operations render, and every request went to 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.ui.conftest import WAIT, Browser, Request, serving

CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)['\"]?\s*\)")
EXTERNAL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


class References(HTMLParser):
    """Every URL an HTML page loads: src, href, spec-url, and the Swagger init's ``url``."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.scripts.append(data)
            self.urls.extend(re.findall(r"url:\s*'([^']+)'", data))


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service with keys (the docs need none) on 127.0.0.1."""
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        with serving(mem, tmp_path_factory.mktemp("docs")) as url:
            yield url
    finally:
        mem.close()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_page_and_every_asset_come_from_this_service(docs_server: str, page: str) -> None:
    with httpx.Client(base_url=docs_server, timeout=WAIT) as http:
        html = http.get(page)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert not EXTERNAL.search(html.text), EXTERNAL.findall(html.text)
        refs = References()
        refs.feed(html.text)
        assert any(u.endswith(".js") for u in refs.urls) and "/openapi.json" in refs.urls
        seen: set[str] = set()
        queue = [urljoin(docs_server + page, u) for u in refs.urls]
        while queue:
            url = queue.pop()
            if url in seen or url.startswith("data:"):
                continue
            seen.add(url)
            assert urlsplit(url).netloc == urlsplit(docs_server).netloc, url
            response = http.get(url)
            assert response.status_code == 200, url
            if url.endswith(".css"):
                queue += [urljoin(url, u) for u in CSS_URL.findall(response.text)]
        assert len(seen) >= 3


def test_docs_assets_are_the_packaged_files(docs_server: str) -> None:
    static = Path(str(files("fastapi_offline").joinpath("static")))
    with httpx.Client(base_url=docs_server, timeout=WAIT) as http:
        for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js",
                     "favicon.png"):
            response = http.get(f"/docs/assets/{name}")
            assert response.status_code == 200 and response.content == (static / name).read_bytes()
        for name in ("core.py", "../core.py", "..%2fcore.py", "missing.js"):
            assert http.get(f"/docs/assets/{name}").status_code == 404


def _left_the_machine(requests: list[Request], base: str) -> list[str]:
    """Requests to anywhere but this service that the browser did not refuse to send."""
    return [r.url for r in requests
            if not r.url.startswith((base, "data:", "blob:", "chrome:", "about:"))
            and r.blocked != "csp"]


def test_swagger_ui_renders_offline(docs_server: str, browser: Browser) -> None:
    browser.driver.get(f"{docs_server}/docs")
    browser.wait(".swagger-ui .opblock-summary-path", "/search")
    assert len(browser.all(".swagger-ui .opblock")) >= 30
    assert "dmf-hybrid" in browser.wait(".swagger-ui .title").text
    requests = browser.requests()
    assert f"{docs_server}/docs/assets/swagger-ui-bundle.js" in [r.url for r in requests]
    assert not _left_the_machine(requests, docs_server)


def test_redoc_renders_offline(docs_server: str, browser: Browser) -> None:
    browser.driver.get(f"{docs_server}/redoc")
    browser.wait("h1", "dmf-hybrid")
    browser.wait("h2", "Search")
    requests = browser.requests()
    assert f"{docs_server}/docs/assets/redoc.standalone.js" in [r.url for r in requests]
    # ReDoc's menu shows a logo from its CDN: the page's CSP refuses it before it is sent
    assert not _left_the_machine(requests, docs_server)
    refused = browser.console_errors()
    assert all("cdn.redoc.ly" in e and "Content Security Policy" in e for e in refused), refused
