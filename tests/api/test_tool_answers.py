"""``GET /tools`` answers are built once per state of the schema and bounded in size: a second
reader gets the kept answer, a type defined or migrated makes a new one, and an answer over
``max_tools_bytes`` is refused with a hint instead of being sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from dmf_hybrid import Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from tests.doors import START_TIMEOUT, open_memory

NOTE = {"name": "Note", "fields": {"title": {"type": "str"}}, "embed": "{title}"}


def test_answers_are_kept_per_schema_state_and_bounded(
        settings_for: Callable[..., Settings]) -> None:
    mem = open_memory(None)
    try:
        app = create_app(settings_for(max_tools_bytes=60_000), mem)
        kept = app.state.dmf.tool_answers
        with serve_in_thread(app, timeout=START_TIMEOUT) as url, httpx.Client(
                base_url=url, headers={"Authorization": "Bearer key-admin"}) as http:
            def tools(**params: Any) -> httpx.Response:
                return http.get("/tools", params=params)

            first = tools()
            assert first.status_code == 200 and kept.built == 1
            again = tools()
            assert again.content == first.content and kept.built == 1  # the kept answer
            assert again.headers["cache-control"] == "no-store"
            other = http.get("/tools", headers={"Authorization": "Bearer key-other"})
            assert other.status_code == 200 and kept.built == 2  # another tenant's own
            assert http.post("/types", json=NOTE).status_code == 201
            grown = tools()
            assert kept.built == 3 and b"Note" in grown.content  # a new schema, a new answer
            assert tools().content == grown.content and kept.built == 3
            migrated = http.post("/types", json={**NOTE, "fields": {
                "title": {"type": "str"}, "body": {"type": "str"}}})
            assert migrated.status_code == 201
            assert b"body" in tools().content and kept.built == 4
            for i in range(12):  # a schema whose per-type tools pass the bound
                http.post("/types", json={"name": f"Big{i}", "embed": "{f0}", "fields": {
                    f"f{j}": {"type": "str", "description": "x" * 200} for j in range(20)}})
            big = tools(profile="per_type")
            assert big.status_code == 422
            assert big.json()["error"] == "limit_exceeded"
            assert big.json()["details"]["field"] == "profile"
            assert "profile=compact" in big.json()["message"]
    finally:
        mem.close()
