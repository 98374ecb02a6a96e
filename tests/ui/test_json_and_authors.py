"""The inspector keeps json fields as json and shows who really wrote a change.

Saving an entity after editing one plain field leaves its json fields exactly as they were
(objects, lists, numbers, booleans, nested values, Chinese text: only the edited field is
sent); a json field is edited as JSON text and a bad one is refused on the page before
anything is sent. The timeline shows the authenticated key as the author, and an ``X-Actor``
that differs from it as claimed.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.ui.conftest import Browser, Server, key_label

SETTING = {"name": "UiSetting", "identity": ["key"],
           "fields": {"key": {"type": "str"}, "note": {"type": "str"},
                      "value": {"type": "json"}, "extra": {"type": "json"}}}
VALUE: dict[str, Any] = {"budget": 5000, "currency": "CNY", "ratio": 0.25, "ok": True,
                         "none": None, "cities": ["上海", "杭州"],
                         "nested": {"deep": [1, {"x": False}]}}


@pytest.fixture
def setting(server: Server) -> str:
    server.memory.define_type(SETTING)
    return server.memory.create("UiSetting", {
        "key": f"trip-{uuid.uuid4().hex[:6]}", "note": "旅行预算", "value": VALUE,
        "extra": [1, 2.5, "三"]}, actor="fixture").id


def test_saving_another_field_leaves_json_fields_unchanged(
        server: Server, browser: Browser, setting: str) -> None:
    browser.open(server.url, f"/entity/{setting}", "ui-writer")
    browser.wait("#save-edit", 'If-Match: "1"')
    browser.fill("#edit-note", "预算改了 (new note)")
    browser.click("#save-edit")
    browser.wait("#entity-version", "2")
    entity = server.memory.get(setting)
    assert entity.data.note == "预算改了 (new note)"
    assert entity.data.value == VALUE and entity.data.extra == [1, 2.5, "三"]
    update = server.memory.history(setting)[-1]
    assert update.before is not None and update.after is not None
    changed = {k for k, v in update.after["data"].items() if update.before["data"][k] != v}
    assert changed == {"note"}


def test_a_json_field_is_edited_as_json_and_bad_json_is_refused_on_the_page(
        server: Server, browser: Browser, setting: str) -> None:
    browser.open(server.url, f"/entity/{setting}", "ui-writer")
    browser.wait("#save-edit", 'If-Match: "1"')
    head = server.memory.last_seq()
    browser.fill("#edit-extra", '{"not json": ')
    browser.click("#save-edit")
    assert "extra: not valid JSON" in browser.wait("#edit-invalid").text
    assert server.memory.last_seq() == head  # nothing was sent
    browser.fill("#edit-extra", '{"days": 3, "cities": ["上海"], "flexible": false}')
    browser.click("#save-edit")
    browser.wait("#entity-version", "2")
    entity = server.memory.get(setting)
    assert entity.data.extra == {"days": 3, "cities": ["上海"], "flexible": False}
    assert entity.data.value == VALUE


def test_the_timeline_shows_the_key_and_a_claimed_actor(
        server: Server, browser: Browser, setting: str) -> None:
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer ui-writer"}) as c:
        response = c.patch(f"/entities/{setting}", json={"data": {"note": "forged"}},
                           headers={"X-Actor": "admin:boss"})
        assert response.status_code == 200
    browser.open(server.url, f"/entity/{setting}", "ui-reader")
    newest = browser.wait("#timeline li.event .event-author")
    assert key_label("ui-writer") in newest.text
    assert "(claims admin:boss)" in newest.text
    claimed = newest.find_element("css selector", ".claimed")
    assert "not verified" in (claimed.get_attribute("title") or "")
