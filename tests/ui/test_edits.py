"""Edits through the browser with a writer key: If-Match updates, stale edits, delete, restore."""

from __future__ import annotations

import pytest

from dmf_hybrid._internal.errors import NotFound
from tests.ui.conftest import Browser, Server, key_label


@pytest.fixture
def place(server: Server) -> str:
    """A place of its own for one test (tests do not share edited entities)."""
    import uuid

    name = f"测试小馆 {uuid.uuid4().hex[:6]}"
    return server.memory.create("PointOfInterest", {
        "name": name, "city": "上海", "category": "restaurant", "estimated_cost": 30.0,
        "description": "a place the edit tests change"}, actor="fixture").id


def test_an_edit_is_an_audited_if_match_write_by_the_key(server: Server, browser: Browser,
                                                          place: str) -> None:
    browser.open(server.url, f"/entity/{place}", "ui-writer")
    browser.wait("#save-edit", 'If-Match: "1"')
    browser.fill("#edit-estimated_cost", "35.5")
    browser.fill("#edit-description", "价格上涨了")
    browser.fill("#edit-reason", "菜单换了 (new menu)")
    browser.click("#save-edit")
    browser.wait("#entity-version", "2")
    assert browser.wait('#entity-data tr[data-field="estimated_cost"] td').text == "35.5"

    entity = server.memory.get(place)
    assert entity.version == 2 and entity.data.estimated_cost == 35.5
    assert entity.data.description == "价格上涨了"
    update = server.memory.history(place)[-1]
    assert update.op == "update" and update.actor == key_label("ui-writer")
    assert update.reason == "菜单换了 (new menu)"
    assert update.before is not None and update.after is not None
    before, after = update.before["data"], update.after["data"]
    assert set(after) == set(before)  # the same fields, two of them changed
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {"estimated_cost", "description"}
    assert browser.wait("#timeline li.event").get_attribute("data-seq") == str(update.seq)


def test_a_stale_edit_is_refused_and_shows_the_current_version(
        server: Server, browser: Browser, place: str) -> None:
    browser.open(server.url, f"/entity/{place}", "ui-writer")
    browser.wait("#save-edit", 'If-Match: "1"')
    # someone else changes the entity after the page loaded it
    server.memory.update(place, {"estimated_cost": 90.0}, actor="someone-else")
    head = server.memory.last_seq()
    browser.fill("#edit-estimated_cost", "95")
    browser.click("#save-edit")
    conflict = browser.wait("#conflict")
    assert "You edited version 1; the current version is 2" in conflict.text
    assert "is at version 2, not 1" in conflict.text  # the API's own message
    assert ["estimated_cost", "95", "90"] == conflict.find_element(
        "css selector", "tbody tr").text.split()
    assert server.memory.get(place).data.estimated_cost == 90.0
    assert server.memory.last_seq() == head  # the refused edit wrote nothing

    browser.click("#reload-current")
    browser.wait("#save-edit", 'If-Match: "2"')
    assert browser.wait("#edit-estimated_cost").get_attribute("value") == "90"


def test_soft_delete_and_restore(server: Server, browser: Browser, place: str) -> None:
    browser.open(server.url, f"/entity/{place}", "ui-writer")
    browser.click("#delete-entity")
    browser.click("#confirm-delete")
    browser.wait(".notice.warn", "Deleted at seq")
    with pytest.raises(NotFound):
        server.memory.get(place)
    browser.click("#restore-entity")
    browser.wait("#edit-form")
    assert browser.wait("#entity-version").text == "3"
    assert server.memory.get(place).version == 3
    ops = [(e.op, e.actor) for e in server.memory.history(place)]
    assert ops[-2:] == [("delete", key_label("ui-writer")), ("restore", key_label("ui-writer"))]


def test_an_identity_field_is_not_editable(server: Server, browser: Browser,
                                           place: str) -> None:
    browser.open(server.url, f"/entity/{place}", "ui-writer")
    browser.wait("#edit-form")
    assert not browser.all("#edit-name") and not browser.all("#edit-city")
    assert browser.all("#edit-category")
