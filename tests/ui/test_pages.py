"""Each page of the inspector opens on the example data, in a real Chromium, with Chinese text."""

from __future__ import annotations

import pytest

from tests.ui.conftest import Browser, Server

PAGES = [
    ("/types", "h1", "Types & entities"),
    ("/types/PointOfInterest", "#match-summary", "PointOfInterest entities"),
    ("/audit", "#verify-status", "Hash chain verified"),
    ("/search", "#search-form", "Search"),
    ("/constraints", "#constraints", "trip_over_budget"),
]


@pytest.mark.parametrize(("fragment", "css", "text"), PAGES, ids=[p[0] for p in PAGES])
def test_each_page_opens(server: Server, browser: Browser, fragment: str, css: str,
                         text: str) -> None:
    browser.open(server.url, fragment, "ui-reader")
    browser.wait(css, text)
    assert not browser.all(".notice.error")
    assert "tenant default" in browser.wait("#session").text


def test_entity_page_opens_with_chinese_text(server: Server, browser: Browser) -> None:
    browser.open(server.url, f"/entity/{server.story.yu_garden}", "ui-reader")
    assert browser.wait("#entity-title").text == "豫园"
    data = browser.wait("#entity-data")
    assert "上海" in data.text and "九曲桥" in data.text
    assert "门票涨价" in browser.wait("#timeline").text
