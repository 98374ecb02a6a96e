"""The constraint queue: rule, observed value, threshold and linked suggestions."""

from __future__ import annotations

from tests.ui.conftest import Browser, Server


def test_open_constraints_with_rule_values_and_suggestions(server: Server,
                                                           browser: Browser) -> None:
    raised = server.memory.get(server.story.budget_constraint)
    assert raised.data.rule == "trip_over_budget" and raised.data.threshold == 150.0
    browser.open(server.url, "/constraints", "ui-reader")
    row = browser.wait(f'#constraints tr[data-id="{raised.id}"]')
    cells = row.find_elements("css selector", "td")
    assert cells[0].text == "budget"
    assert "trip_over_budget v1" in cells[1].text and "exceeds its budget" in cells[1].text
    assert "Trip: linwei · Shanghai" in cells[2].text and server.story.trip in cells[2].text
    assert cells[4].text == f"{raised.data.observed:g}" and cells[5].text == "150"
    assert "proposed" in cells[7].text and "去掉最贵的一站" in cells[7].text
    open_ids = [c.id for c in server.memory.open_constraints(limit=1000).items]
    shown = [el.get_attribute("data-id") for el in browser.all("#constraints tr[data-id]")]
    assert shown == open_ids


def test_filter_the_queue_by_kind(server: Server, browser: Browser) -> None:
    browser.open(server.url, "/constraints?kind=accessibility", "ui-reader")
    browser.wait("#constraint-list .summary")
    expected = [c.id for c in server.memory.open_constraints({"kind": "accessibility"}).items]
    assert expected
    shown = [el.get_attribute("data-id") for el in browser.all("#constraints tr[data-id]")]
    assert shown == expected
