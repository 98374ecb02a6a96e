"""Types and entities in the browser: typed filters, pagination, the timeline, time travel."""

from __future__ import annotations

from urllib.parse import unquote

from tests.ui.conftest import Browser, Server


def _row_ids(browser: Browser) -> list[str]:
    return [el.get_attribute("data-id") for el in browser.all("#entity-list tr[data-id]")]


def _wait_rows(browser: Browser, expected: list[str]) -> None:
    browser.wait("#match-summary", f"{len(expected)}")
    browser.wait(f'#entity-list tr[data-id="{expected[0]}"]' if expected
                 else "#entity-list .empty")
    assert _row_ids(browser) == expected


def test_filter_entities_with_typed_inputs(server: Server, browser: Browser) -> None:
    mem = server.memory
    browser.open(server.url, "/types/PointOfInterest", "ui-reader")
    browser.wait("#match-summary", "PointOfInterest entities")
    browser.fill('input[name="f.city"]', "上海")
    browser.click("#apply-filter")
    in_shanghai = [e.id for e in mem.query("PointOfInterest", where={"city": "上海"}).items]
    assert len(in_shanghai) >= 2
    _wait_rows(browser, in_shanghai)
    assert "f.city=上海" in unquote(browser.fragment())
    total = mem.count("PointOfInterest")
    assert f"{len(in_shanghai)} of {total} PointOfInterest entities match" in \
        browser.wait("#match-summary").text

    browser.fill('input[name="f.estimated_cost.max"]', "60")
    browser.choose('select[name="f.category"]', "park")
    browser.click("#apply-filter")
    cheap_parks = mem.query("PointOfInterest", where={
        "city": "上海", "category": "park", "estimated_cost": {"$lte": 60}}).items
    assert [e.data.name for e in cheap_parks] == ["豫园"]
    _wait_rows(browser, [e.id for e in cheap_parks])
    assert "豫园" in browser.wait("#entity-list").text


def test_json_filter_and_its_error(server: Server, browser: Browser) -> None:
    browser.open(server.url, "/types/PointOfInterest", "ui-reader")
    browser.fill('textarea[name="where"]', '{"$or": [{"city": "上海"}, {"rating": {"$gte": 4.8}}]}')
    browser.click("#apply-filter")
    expected = server.memory.query("PointOfInterest", where={
        "$or": [{"city": "上海"}, {"rating": {"$gte": 4.8}}]}).items
    _wait_rows(browser, [e.id for e in expected])

    browser.fill('textarea[name="where"]', '{"altitude": {"$gt": 3}}')
    browser.click("#apply-filter")
    error = browser.wait("#entity-list .notice.error")
    assert "altitude" in error.text and "422 filter_error" in error.text
    assert "Traceback" not in error.text


def test_pages_of_entities(server: Server, browser: Browser) -> None:
    mem = server.memory
    everything: list[str] = []
    cursor = None
    while True:
        page = mem.query("PointOfInterest", limit=10, cursor=cursor)
        everything += [e.id for e in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(everything) > 20
    browser.open(server.url, "/types/PointOfInterest?limit=10", "ui-reader")
    browser.wait(f'#entity-list tr[data-id="{everything[0]}"]')
    assert _row_ids(browser) == everything[:10]
    browser.click("#next-page")
    browser.wait(f'#entity-list tr[data-id="{everything[10]}"]')
    assert _row_ids(browser) == everything[10:20]
    assert "showing 11–20" in browser.wait("#match-summary").text
    browser.click("#prev-page")
    browser.wait(f'#entity-list tr[data-id="{everything[0]}"]')
    assert _row_ids(browser) == everything[:10]


def test_entity_timeline_shows_each_change(server: Server, browser: Browser) -> None:
    yu = server.story.yu_garden
    history = server.memory.history(yu)
    browser.open(server.url, f"/entity/{yu}", "ui-reader")
    browser.wait("#timeline li.event")
    events = browser.all("#timeline li.event")
    assert [int(e.get_attribute("data-seq")) for e in events] == [e.seq for e in
                                                                   reversed(history)]
    first_update = next(e for e in history if e.op == "update")
    item = browser.wait(f'#timeline li[data-seq="{first_update.seq}"]')
    assert "agent:planner" in item.text and "门票涨价 (ticket price rose)" in item.text
    assert "trace-0b2" in item.text and "v1 → v2" in item.text
    change = item.find_element("css selector", "table.diff tbody tr")
    assert change.text.split() == ["estimated_cost", "40", "50"]
    linked = browser.wait('#timeline li[data-op="link"]')
    assert "includes" in linked.text and server.story.trip in linked.text

    created = history[0]
    assert created.op == "create"
    browser.wait(f'#timeline li[data-seq="{created.seq}"] a.as-of').click()
    browser.wait(".notice.info", f"State as of audit seq {created.seq}")
    assert browser.wait('#entity-data tr[data-field="estimated_cost"] td').text == "40"
    assert browser.wait('#entity-data tr[data-field="rating"] td').text == "—"
    assert "current" in browser.wait(f'#timeline li[data-seq="{created.seq}"]')\
        .get_attribute("class")


def test_relations_click_through(server: Server, browser: Browser) -> None:
    story = server.story
    browser.open(server.url, f"/entity/{story.yu_garden}", "ui-reader")
    browser.click("#relations a", "linwei")
    browser.wait("#entity-id", story.trip)
    assert browser.fragment() == f"/entity/{story.trip}"
    browser.click("#relations a", "豫园")
    browser.wait("#entity-title", "豫园")


def test_a_reader_key_gets_no_edit_form(server: Server, browser: Browser) -> None:
    browser.open(server.url, f"/entity/{server.story.yu_garden}", "ui-reader")
    browser.wait("#timeline")
    assert not browser.all("#edit-form")
    assert "reader key" in browser.wait("#session").text


def test_an_unknown_entity_says_so(server: Server, browser: Browser) -> None:
    browser.open(server.url, "/entity/PointOfInterest_00000000000000000000", "ui-reader")
    assert "No entity with this ID in tenant default" in browser.wait(".notice.error").text


def test_a_long_timeline_comes_in_batches(server: Server, browser: Browser) -> None:
    mem = server.memory
    busy = mem.create("PointOfInterest", {"name": "人民广场", "city": "上海"}, actor="test").id
    for i in range(1, 120):
        mem.update(busy, {"estimated_cost": float(i)}, actor="test")
    events = mem.history(busy)
    assert len(events) == 120
    browser.open(server.url, f"/entity/{busy}", "ui-reader")
    browser.wait("#timeline li.event")

    def shown() -> list[int]:
        return [int(e.get_attribute("data-seq")) for e in browser.all("#timeline li.event")]

    newest_first = [e.seq for e in reversed(events)]
    assert shown() == newest_first[:50]
    browser.click("#timeline button.more", "Show 50 more (70 left)")
    browser.wait(f'#timeline li[data-seq="{newest_first[99]}"]')
    browser.click("#timeline button.more", "Show 20 more (20 left)")
    browser.wait(f'#timeline li[data-seq="{newest_first[119]}"]')
    assert shown() == newest_first
    assert not browser.wait("#timeline button.more").is_displayed()
