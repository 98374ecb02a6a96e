"""The README's pictures of the inspector, taken by the test run (docs/*.png).

The story's times come from a ticking clock and the search is pinned with ``as_of``, so the
pictures show the same content on every run.
"""

from __future__ import annotations

import struct

from tests.ui.conftest import DOCS_DIR, WINDOW, Browser, Server

TIMELINE_PNG = DOCS_DIR / "ui-entity-timeline.png"
SEARCH_PNG = DOCS_DIR / "ui-search-playground.png"


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_screenshot_of_an_entity_timeline(server: Server, browser: Browser) -> None:
    browser.open(server.url, f"/entity/{server.story.yu_garden}", "ui-reader")
    browser.wait("#timeline li.event")
    browser.wait("#relations a", "linwei")
    png = browser.screenshot(TIMELINE_PNG)
    assert _size(png) == WINDOW and len(png) > 20_000


def test_screenshot_of_the_search_playground(server: Server, browser: Browser) -> None:
    browser.open(server.url, "/search?type=PointOfInterest&text=soup+dumplings&mode=hybrid&k=6"
                             f"&as_of={server.story.head}", "ui-reader")
    browser.wait("#hits")
    browser.click("#replay")
    browser.wait("#replay-verdict", "Identical")
    png = browser.screenshot(SEARCH_PNG)
    assert _size(png) == WINDOW and len(png) > 20_000
