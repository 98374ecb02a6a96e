"""Hostile values over HTTP: each must get a clean 4xx and change nothing.

SQL-ish field names and operators, huge strings and bodies (streamed or not), deep nesting,
NaN / Infinity, invalid UTF-8 and lone surrogates, path traversal in snapshot names and IDs.
"Nothing" is checked per request (audit seq, row and vector counts, files) and for the whole
run (a dump of every table, every vector record and every file name).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evaluation.reliability_service import dump_state, quick_state, seed_travel, service


@dataclass
class Hostile:
    """One hostile request."""

    name: str
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False


def _nest(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"$and": [value]}
    return value


def hostile_requests(poi_id: str, trip_id: str) -> list[Hostile]:
    """The hostile requests (each must be refused with a 4xx and change nothing)."""
    sqlish = ["name; DROP TABLE events; --", 'name" = name OR "1', "1=1", "name)--",
              "tenant", "id' OR '1'='1"]
    out: list[Hostile] = []
    for f in sqlish:
        out += [Hostile(f"where field {f!r}", "POST", "/entities/Poi/query",
                        {"where": {f: "x"}}),
                Hostile(f"order_by {f!r}", "POST", "/entities/Poi/query", {"order_by": f}),
                Hostile(f"search where {f!r}", "POST", "/search",
                        {"type": "Poi", "text": "museum", "where": {f: 1}}),
                Hostile(f"count where {f!r}", "POST", "/entities/Poi/count",
                        {"where": {"$or": [{"name": "x"}, {f: "x"}]}})]
    for op in ["$eq'; DROP TABLE events; --", "$like", "$regex", "$where", "$gt)--", "eq"]:
        out.append(Hostile(f"operator {op!r}", "POST", "/entities/Poi/query",
                           {"where": {"name": {op: "x"}}}))
    out += [
        Hostile("$in not a list", "POST", "/entities/Poi/query",
                {"where": {"name": {"$in": "'; DROP TABLE events; --"}}}),
        Hostile("$or not a list", "POST", "/entities/Poi/query", {"where": {"$or": "x"}}),
        Hostile("cursor injection", "POST", "/entities/Poi/query", {"cursor": "' OR 1=1 --"}),
        Hostile("as_of injection", "GET", f"/entities/{poi_id}?as_of=1;DROP%20TABLE%20events"),
        Hostile("type path injection", "POST", "/entities/Poi%3B%20DROP%20TABLE%20events/query",
                {}),
        Hostile("related relation injection", "GET",
                f"/entities/{poi_id}/related?relation=x%27%20OR%201%3D1&direction=sideways"),
        Hostile("search mode injection", "POST", "/search",
                {"type": "Poi", "text": "x", "mode": "hybrid; DROP TABLE events"}),
        Hostile("related_to injection", "POST", "/search",
                {"type": "Poi", "text": "x", "related_to": {"relation": "x' OR 1=1 --",
                                                            "from": trip_id}}),
        Hostile("type definition SQL field", "POST", "/types",
                {"name": "Evil", "fields": {"a; DROP TABLE events; --": {"type": "str"}}}),
        Hostile("type definition SQL name", "POST", "/types",
                {"name": "Evil; DROP TABLE events", "fields": {"a": {"type": "str"}}}),
        Hostile("embed template attribute", "POST", "/types",
                {"name": "Evil", "fields": {"a": {"type": "str"}}, "embed": "{a.__class__}"}),
        Hostile("embed template index", "POST", "/types",
                {"name": "Evil", "fields": {"a": {"type": "str"}}, "embed": "{a[0]}"}),
        # huge strings and bodies
        # over the body limit (one field value has its own, smaller limit: see below)
        Hostile("huge string field", "POST", "/entities/Poi",
                {"data": {"name": "x" * 3_000_000, "city": "y"}}),
        Hostile("huge string update", "PATCH", f"/entities/{poi_id}",
                {"data": {"city": "y" * 2_500_000}}),
        Hostile("huge list item, chunked", "POST", f"/entities/{poi_id}/append",
                {"field": "tags", "values": ["z" * 2_200_000]}, chunked=True),
        Hostile("huge filter value", "POST", "/entities/Poi/query",
                {"where": {"name": {"$in": ["v" * 1000] * 3000}}}),
        Hostile("huge context query", "POST", "/context", {"query": "q" * 50_000}),
        Hostile("body over the limit", "POST", "/entities/Poi/batch",
                {"rows": [{"name": "n" * 1000, "city": "c"}] * 3000}),
        Hostile("huge search text", "POST", "/search", {"type": "Poi", "text": "q" * 200_000}),
        Hostile("huge plan", "POST", "/plans/execute",
                {"ops": [{"op": "get", "id": poi_id}] * 5000}),
        Hostile("huge k", "POST", "/search", {"type": "Poi", "text": "x", "k": 10**12}),
        Hostile("huge depth", "GET", f"/entities/{poi_id}/related?depth=1000000000000000000000"),
        Hostile("huge as_of", "GET", f"/entities/{poi_id}?as_of={'9' * 40}"),
        Hostile("huge actor header", "POST", "/entities/Poi",
                {"data": {"name": "hdr", "city": "c"}}, headers={"X-Actor": "a" * 20_000}),
        Hostile("huge integer", "POST", "/entities/Poi",
                {"data": {"name": "big", "city": "c", "cost": 10**400}}),
        # deep nesting
        Hostile("deeply nested body", "POST", "/entities/Poi",
                raw=b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        Hostile("deeply nested filter", "POST", "/entities/Poi/query",
                {"where": _nest(60, {"name": "x"})}),
        Hostile("deeply nested value", "POST", "/entities/Poi",
                {"data": {"name": _nest(300, 1), "city": "c"}}),
        Hostile("deeply nested plan data", "POST", "/plans/execute",
                {"ops": [{"op": "create", "type": "Poi",
                          "data": {"name": "n", "city": _nest(300, 1)}}]}),
        Hostile("long reference path", "POST", "/plans/execute",
                {"ops": [{"op": "get", "id": "$0" + ".x" * 5000}]}),
        # NaN and Infinity (Python's JSON parser accepts them)
        Hostile("NaN on create", "POST", "/entities/Poi",
                raw=b'{"data": {"name": "nan", "city": "c", "cost": NaN}}'),
        Hostile("Infinity on update", "PATCH", f"/entities/{poi_id}",
                raw=b'{"data": {"cost": Infinity}}'),
        Hostile("-Infinity on update", "PATCH", f"/entities/{trip_id}",
                raw=b'{"data": {"budget": -Infinity}}'),
        Hostile("NaN in a filter", "POST", "/entities/Poi/query",
                raw=b'{"where": {"cost": {"$gt": NaN}}}'),
        Hostile("NaN in a search filter", "POST", "/search",
                raw=b'{"type": "Poi", "text": "x", "where": {"cost": NaN}}'),
        Hostile("NaN in a plan", "POST", "/plans/execute",
                raw=b'{"ops": [{"op": "update", "id": "' + poi_id.encode()
                + b'", "data": {"cost": NaN}}]}'),
        Hostile("NaN as k", "POST", "/search", raw=b'{"type": "Poi", "text": "x", "k": NaN}'),
        # invalid UTF-8
        Hostile("invalid UTF-8 in a value", "POST", "/entities/Poi",
                raw=b'{"data": {"name": "\xff\xfe", "city": "x"}}'),
        Hostile("invalid UTF-8 body", "POST", "/entities/Poi/query", raw=b"\xff\xfe\x00\x01"),
        Hostile("invalid UTF-8 in a plan", "POST", "/plans/execute",
                raw=b'{"ops": [{"op": "create", "type": "Poi", "data": {"name": "\xc3\x28", '
                b'"city": "c"}}]}'),
        Hostile("invalid percent-encoded actor", "POST", "/entities/Poi",
                {"data": {"name": "pct", "city": "c"}}, headers={"X-Actor": "%FF%FE"}),
        Hostile("lone surrogate escape", "POST", "/entities/Poi",
                raw=b'{"data": {"name": "\\ud800", "city": "c"}}'),
        Hostile("not JSON", "POST", "/entities/Poi", raw=b"name=x&city=y"),
    ]
    # names ending in a newline ("$" matches before it): each must be refused, none committed
    nl_rule = {"name": "over\n", "condition": "budget > 1", "trigger": {"type": "Trip"},
               "action": {"kind": "budget", "message": "m"}}
    out += [
        Hostile("create id ending in a newline", "POST", "/entities/Poi",
                {"id": "abc\n", "data": {"name": "nl", "city": "c"}}),
        Hostile("batch type name ending in a newline", "POST", "/entities/Poi%0A/batch",
                {"rows": [{"name": "nl", "city": "c"}]}),
        Hostile("type name ending in a newline", "POST", "/types",
                {"name": "Evilnl\n", "fields": {"a": {"type": "str"}}}),
        Hostile("field name ending in a newline", "POST", "/types",
                {"name": "Evil", "fields": {"a\n": {"type": "str"}}}),
        Hostile("relation name ending in a newline", "POST", "/types",
                {"name": "Evil", "fields": {"a": {}}, "relations": {"r\n": {"target": "Poi"}}}),
        Hostile("rule name ending in a newline", "POST", "/rules", nl_rule),
        Hostile("snapshot name ending in a newline", "POST", "/admin/snapshot", {"name": "x\n"}),
        Hostile("archive dest ending in a newline", "POST", "/admin/archive",
                {"before_seq": 2, "dest": "x\n"}),
        Hostile("plan id ending in a newline", "POST", "/plans/execute",
                {"ops": [{"op": "create", "type": "Poi", "id": "abc\n",
                          "data": {"name": "nl", "city": "c"}}]}),
        Hostile("link id ending in a newline", "POST", "/relations",
                {"from_id": trip_id + "\n", "relation": "includes", "to_id": poi_id}),
        Hostile("update id ending in a newline", "PATCH", f"/entities/{poi_id}%0A",
                {"data": {"cost": 1}}),
        # the audit actor is a printable label, never a control sequence
        Hostile("actor with a line break", "POST", "/entities/Poi",
                {"data": {"name": "ctl", "city": "c"}}, headers={"X-Actor": "a%0Ab"}),
        Hostile("actor with a control character", "POST", "/entities/Poi",
                {"data": {"name": "ctl", "city": "c"}}, headers={"X-Actor": "bell%07"}),
        # size limits before any write
        Hostile("field value over the limit", "POST", "/entities/Poi",
                {"data": {"name": "v" * 100_000, "city": "c"}}),
        Hostile("update value over the limit", "PATCH", f"/entities/{poi_id}",
                {"data": {"city": "v" * 70_000}}),
        Hostile("batch value over the limit", "POST", "/entities/Poi/batch",
                {"rows": [{"name": "ok", "city": "c"}, {"name": "中" * 30_000, "city": "c"}]}),
        Hostile("too many fields", "POST", "/types",
                {"name": "Wide", "fields": {f"f{i}": {"type": "str"} for i in range(300)}}),
        Hostile("type definition too large", "POST", "/types",
                {"name": "Wide", "fields": {f"f{i}": {"description": "d" * 2000}
                                            for i in range(40)}}),
        Hostile("default too large", "POST", "/types",
                {"name": "Wide", "fields": {"a": {"type": "str", "default": "d" * 5000}}}),
        # reserved names, as_of numbers, cursors
        Hostile("field shadowing model_config", "POST", "/types",
                {"name": "Shadow", "fields": {"model_config": {"type": "str"}}}),
        Hostile("field shadowing json", "POST", "/types",
                {"name": "Shadow", "fields": {"json": {"type": "str"}}}),
        Hostile("negative as_of", "GET", f"/entities/{poi_id}?as_of=-1"),
        Hostile("as_of as a Unix time", "POST", "/entities/Poi/query", {"as_of": 1e10}),
        Hostile("fractional as_of", "POST", "/entities/Poi/count", {"as_of": 1.5}),
        Hostile("boolean as_of", "POST", "/search", {"type": "Poi", "text": "x", "as_of": True}),
        Hostile("forged readable cursor", "POST", "/entities/Poi/query",
                {"order_by": "name", "cursor": "WyJmIixbInYiXSwiUG9pXzEiXQ"}),
    ]
    # path traversal in snapshot names and IDs
    for name in ["../evil", "..", ".", "a/../../evil", "/tmp/evil", "..\\evil", "snap\x00x",
                 "%2e%2e%2fevil", "x" * 200, "", ".hidden", "a/b", "C:\\evil", "~/evil",
                 "snap\nname"]:
        out.append(Hostile(f"snapshot name {name[:20]!r}", "POST", "/admin/snapshot",
                           {"name": name}))
    for path in ["/entities/..%2F..%2Fetc%2Fpasswd", "/entities/%2e%2e/history",
                 "/types/..%2F..%2Fevil", "/entities/" + "a" * 5000,
                 "/tools/..%2F..%2Fevil"]:
        out.append(Hostile(f"path {path[:40]}", "GET" if "tools" not in path else "POST", path,
                           {} if "tools" in path else None))
    return out


@dataclass
class HostileFigures:
    """What the hostile-input run measured."""

    requests: int = 0
    refused: int = 0
    server_errors: int = 0
    accepted: list[str] = field(default_factory=list)
    state_changed: list[str] = field(default_factory=list)


def run_hostile(workdir: Path) -> HostileFigures:
    """Send every hostile request; each must be a clean 4xx that changes nothing."""
    key = "hostile-admin-key"
    figures = HostileFigures()
    ids: dict[str, str] = {}

    def seed(mem: Any) -> None:
        seed_travel(mem)
        ids["poi"] = mem.query("Poi", order_by="name").items[0].id
        ids["trip"] = mem.query("Trip").items[0].id

    with service(workdir, f"{key}:default:admin", seed=seed) as (base, mem):
        client = httpx.Client(base_url=base, timeout=60,
                              headers={"Authorization": f"Bearer {key}"})
        data_dir = workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        start = dump_state(mem, workdir)
        for probe in hostile_requests(ids["poi"], ids["trip"]):
            before = quick_state(mem, workdir)
            headers = {"content-type": "application/json", **probe.headers}
            raw = probe.raw if probe.raw is not None else (
                None if probe.body is None else json.dumps(probe.body).encode())
            content: bytes | Iterator[bytes] | None = raw
            if probe.chunked and raw is not None:  # no Content-Length: streamed
                content = iter([raw[i:i + 65536] for i in range(0, len(raw), 65536)])
            figures.requests += 1
            try:
                response = client.request(probe.method, probe.path, content=content,
                                          headers=headers)
            except httpx.TransportError as exc:  # e.g. a header that failed after the commit
                figures.accepted.append(f"{probe.name}: no response ({exc})")
                if quick_state(mem, workdir) != before:
                    figures.state_changed.append(probe.name)
                continue
            status = response.status_code
            if status >= 500:
                figures.server_errors += 1
            if 400 <= status < 500 and _is_error_body(response):
                figures.refused += 1
            else:
                figures.accepted.append(f"{probe.name}: {status} {response.text[:200]}")
            if quick_state(mem, workdir) != before:
                figures.state_changed.append(probe.name)
        client.close()
        if dump_state(mem, workdir) != start and not figures.state_changed:
            figures.state_changed.append("some request changed a row (the full dump differs)")
        for outside in (Path("/tmp/evil"), workdir / "evil", data_dir / "evil"):
            if outside.exists():
                figures.state_changed.append(f"{outside} was created")
    return figures


def _is_error_body(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and {"error", "message", "details"} <= set(body)

