"""The audit log page: chain status, filters, paging, state as of an event, a tampered log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.examples import load_example_types
from dmf_hybrid._internal.memory import DB_FILE
from dmf_hybrid._internal.models import AuditEvent
from tests.ui.conftest import Browser, Server, serving


def _seqs(browser: Browser) -> list[int]:
    return [int(el.get_attribute("data-seq")) for el in browser.all("#audit-list tr[data-seq]")]


def _shown(browser: Browser, expected: list[AuditEvent]) -> None:
    browser.wait("#audit-summary", f"{len(expected)} matching")
    assert _seqs(browser) == [e.seq for e in expected]


def _all_events(mem: Memory) -> list[AuditEvent]:
    return mem.events(0, None, 100_000)


def test_filters_by_actor_entity_op_and_seq(server: Server, browser: Browser) -> None:
    events = [e for e in _all_events(server.memory) if e.seq <= server.story.head]
    browser.open(server.url, f"/audit?to_seq={server.story.head}", "ui-reader")
    browser.wait("#verify-status", "Hash chain verified")
    _shown(browser, events[:50])

    browser.fill('input[name="actor"]', "user:linwei")
    browser.click("#apply-audit")
    _shown(browser, [e for e in events if e.actor and "user:linwei" in e.actor])

    browser.open(server.url, f"/audit?entity={server.story.yu_garden}&op=update", "ui-reader")
    updates = [e for e in server.memory.history(server.story.yu_garden) if e.op == "update"]
    assert len(updates) >= 2
    _shown(browser, updates)
    assert "门票涨价" in browser.wait("#audit-list").text

    browser.open(server.url, "/audit?from_seq=5&to_seq=9&type=User", "ui-reader")
    _shown(browser, [e for e in events if 5 <= e.seq <= 9 and e.type == "User"])


def test_filters_by_time(server: Server, browser: Browser) -> None:
    events = [e for e in _all_events(server.memory) if e.seq <= server.story.head]
    since, until = events[20].ts, events[29].ts
    browser.open(server.url, f"/audit?since={since:%Y-%m-%dT%H:%M:%S}"
                             f"&until={until:%Y-%m-%dT%H:%M:%S}", "ui-reader")
    _shown(browser, [e for e in events if since.replace(microsecond=0) <= e.ts
                     and e.ts <= until.replace(microsecond=0)])


def test_pages_of_events_and_the_changes_of_one(server: Server, browser: Browser) -> None:
    events = _all_events(server.memory)
    assert len(events) > 100
    browser.open(server.url, "/audit", "ui-reader")
    _shown(browser, events[:50])
    browser.click("#next-page")
    browser.wait(f'#audit-list tr[data-seq="{events[50].seq}"]')
    assert _seqs(browser) == [e.seq for e in events[50:100]]
    browser.click("#prev-page")
    browser.wait(f'#audit-list tr[data-seq="{events[0].seq}"]')

    created = next(e for e in events[:50] if e.op == "create")
    assert created.after is not None
    row = browser.wait(f'#audit-list tr[data-seq="{created.seq}"]')
    row.find_element("css selector", "button.toggle").click()
    detail = browser.wait("#audit-list tr.detail:not([hidden])")
    for name, value in created.after["data"].items():
        if isinstance(value, str):
            assert name in detail.text and value in detail.text


def test_state_as_of_an_event(server: Server, browser: Browser) -> None:
    first_update = next(e for e in server.memory.history(server.story.yu_garden)
                        if e.op == "update")
    browser.open(server.url, f"/audit?from_seq={first_update.seq}&to_seq={first_update.seq}",
                 "ui-reader")
    browser.wait(f'#audit-list tr[data-seq="{first_update.seq}"] a.as-of').click()
    browser.wait(".notice.info", f"State as of audit seq {first_update.seq}")
    assert browser.wait('#entity-data tr[data-field="estimated_cost"] td').text == "50"
    assert browser.wait('#entity-data tr[data-field="rating"] td').text == "—"


@pytest.fixture
def tampered(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A store of its own whose audit log was edited behind the service's back."""
    directory = tmp_path / "tampered"
    mem = Memory.open(directory, embedder=HashEmbedder())
    load_example_types(mem)
    poi = mem.create("PointOfInterest", {"name": "外滩", "city": "上海", "category": "landmark"})
    for cost in (10.0, 20.0, 30.0):
        mem.update(poi.id, {"estimated_cost": cost}, actor="agent")
    bad = mem.history(poi.id)[2].seq
    mem.close()
    con = duckdb.connect(str(directory / DB_FILE))
    con.execute("UPDATE events SET actor = 'mallory' WHERE seq = ?", [bad])
    con.close()
    mem = Memory.open(directory, embedder=HashEmbedder())
    try:
        report = mem.verify_audit()
        assert not report.ok and report.first_bad_seq == bad
        with serving(mem, directory) as url:
            yield url, bad
    finally:
        mem.close()


def test_a_tampered_log_is_reported(tampered: tuple[str, int], browser: Browser) -> None:
    url, bad = tampered
    browser.open(url, "/audit", "ui-reader")
    banner = browser.wait("#verify-status .notice.error")
    assert f"Hash chain broken at seq {bad}" in banner.text
    banner.find_element("css selector", "a").click()
    browser.wait(f'#audit-list tr[data-seq="{bad}"]', "mallory")
