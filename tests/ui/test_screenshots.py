"""The pictures of the inspector in docs/http.md, taken by the test run (docs/*.png).

The story's times come from a ticking clock and the search is pinned with ``as_of``, so the
pictures show the same content on every run (but the receipt's timings). Every run takes them;
``make screenshots`` (``DMF_UPDATE_SCREENSHOTS=1``) writes them over the ones in ``docs/``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from tests.ui.conftest import DOCS_DIR, WINDOW, Browser, Server

TIMELINE_PNG = "ui-entity-timeline.png"
SEARCH_PNG = "ui-search-playground.png"


def _target(name: str, tmp_path: Path) -> Path:
    """Where a picture goes: ``docs/`` when asked to update them, else the test's own dir."""
    return (DOCS_DIR if os.environ.get("DMF_UPDATE_SCREENSHOTS") == "1" else tmp_path) / name


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_screenshot_of_an_entity_timeline(server: Server, browser: Browser,
                                          tmp_path: Path) -> None:
    browser.open(server.url, f"/entity/{server.story.yu_garden}", "ui-reader")
    browser.wait("#timeline li.event")
    browser.wait("#relations a", "linwei")
    png = browser.screenshot(_target(TIMELINE_PNG, tmp_path))
    assert _size(png) == WINDOW and len(png) > 20_000


def test_screenshot_of_the_search_playground(server: Server, browser: Browser,
                                             tmp_path: Path) -> None:
    browser.open(server.url, "/search?type=PointOfInterest&text=soup+dumplings&mode=hybrid&k=6"
                             f"&as_of={server.story.head}", "ui-reader")
    browser.wait("#hits")
    browser.click("#replay")
    browser.wait("#replay-verdict", "Identical")
    png = browser.screenshot(_target(SEARCH_PNG, tmp_path))
    assert _size(png) == WINDOW and len(png) > 20_000
