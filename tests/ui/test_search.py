"""The search playground: hits with each leg's rank and score, the receipt, an as_of replay."""

from __future__ import annotations

from urllib.parse import quote

from tests.ui.conftest import Browser, Server


def _hit_ids(browser: Browser) -> list[str]:
    return [el.get_attribute("data-id") for el in browser.all("#hits tr[data-id]")]


def test_search_shows_legs_and_receipt_and_replays_identically(server: Server,
                                                               browser: Browser) -> None:
    mem = server.memory
    expected = mem.search("PointOfInterest", "soup dumplings", k=5, mode="hybrid")
    browser.open(server.url, "/search", "ui-reader")
    browser.choose("#search-type", "PointOfInterest")
    browser.fill("#search-text", "soup dumplings")
    browser.fill("#search-k", "5")
    browser.click("#run-search")
    browser.wait("#hits")
    assert _hit_ids(browser) == [h.entity.id for h in expected.hits]
    for hit in expected.hits:
        row = browser.wait(f'#hits tr[data-id="{hit.entity.id}"]')
        for leg, score in hit.legs.items():
            assert f"{leg} #{score.rank}" in row.text
    receipt = browser.wait("#receipt")
    assert f"resolved at seq\n{expected.receipt.resolved_at_seq}" in receipt.text
    assert f"candidates\n{expected.receipt.candidates}" in receipt.text
    assert f"plan\n{expected.receipt.plan}" in receipt.text

    # the memory moves on: a new place that matches the query better
    new = mem.create("PointOfInterest", {
        "name": "Din Tai Fung 鼎泰豐", "city": "Taipei", "category": "restaurant",
        "description": "soup dumplings, soup dumplings and more soup dumplings"}, actor="test")
    assert new.id in [h.entity.id for h in mem.search("PointOfInterest", "soup dumplings",
                                                       k=5).hits]
    browser.click("#replay")
    verdict = browser.wait("#replay-status .notice")
    assert "Identical" in verdict.text and "5 hits in the same order" in verdict.text
    assert f"head seq {mem.last_seq()}" in verdict.text
    assert new.id not in _hit_ids(browser)

    browser.click("#run-search")  # the same search now, live
    browser.wait(f'#hits tr[data-id="{new.id}"]')


def test_search_as_of_a_seq_and_its_link(server: Server, browser: Browser) -> None:
    seq = server.story.head
    expected = server.memory.search("PointOfInterest", "garden", k=3, mode="keyword",
                                    as_of=seq)
    browser.open(server.url, f"/search?type=PointOfInterest&text=garden&mode=keyword&k=3"
                             f"&as_of={seq}", "ui-reader")
    browser.wait("#hits")
    assert _hit_ids(browser) == [h.entity.id for h in expected.hits]
    assert all(set(h.legs) == {"keyword"} for h in expected.hits)
    browser.click("#replay")
    browser.wait("#replay-verdict", "Identical")


def test_a_bad_search_shows_the_api_message(server: Server, browser: Browser) -> None:
    where = quote('{"altitude": 3}')
    browser.open(server.url, f"/search?type=PointOfInterest&text=x&where={where}", "ui-reader")
    error = browser.wait("#search-results .notice.error")
    assert "altitude" in error.text and "422" in error.text and "Traceback" not in error.text
    browser.open(server.url, "/search?type=PointOfInterest&text=x&k=100000", "ui-reader")
    error = browser.wait("#search-results .notice.error")
    assert "k" in error.text and "422" in error.text
