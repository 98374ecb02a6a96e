"""Tenant isolation: two tenants with overlapping data probe every route with each other's IDs.

A probe leaks if its answer differs from the answer for an ID (or a value) that exists nowhere,
or if any answer contains the other tenant's IDs or content. Roles and keys are probed too.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evaluation.reliability_service import POI_TYPE, TRIP_TYPE, service


@dataclass
class IsolationFigures:
    """What the tenant isolation run measured."""

    probes: int = 0
    leaks: int = 0
    problems: list[str] = field(default_factory=list)


KEYS = {"alpha": "iso-alpha-admin", "beta": "iso-beta-admin"}
ROLE_KEYS = {"reader": "iso-alpha-reader", "writer": "iso-alpha-writer"}


def _tenant_data(mem: Any, tenant: str) -> dict[str, Any]:
    """Overlapping data for one tenant: the same facts as the other, plus a secret."""
    view = mem.for_tenant(tenant)
    with view.transaction():  # each tenant owns its types
        view.define_type(POI_TYPE)
        view.define_type(TRIP_TYPE)
    secret = f"SECRET-{tenant}-{secrets.token_hex(4)}"
    shared = [view.create("Poi", {"name": n, "city": "Shanghai", "cost": 10, "tags": ["x"]})
              for n in ("Shanghai Museum", "Yu Garden")]
    hidden = view.create("Poi", {"name": secret, "city": f"City-{secret}", "tags": [secret]})
    given = view.create("Poi", {"name": f"given {secret}", "city": "c"}, id=f"{tenant}-given-1")
    trip = view.create("Trip", {"destination": f"Trip {secret}", "tags": [secret]})
    view.link(trip.id, "includes", hidden.id)
    view.link(trip.id, "includes", shared[0].id)
    gone = view.create("Poi", {"name": f"deleted {secret}", "city": "c"})
    view.delete(gone.id)
    erased = view.create("Poi", {"name": f"erased {secret}", "city": "c"})
    view.erase(erased.id)
    return {"tenant": tenant, "secret": secret, "poi": hidden.id, "shared": shared[0].id,
            "trip": trip.id, "given": given.id, "deleted": gone.id, "erased": erased.id,
            "all_ids": [e.id for e in (*shared, hidden, given, trip, gone, erased)]}


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()
                if k not in ("timings_ms", "ts", "created_at", "updated_at")}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


#: Plan problems suggest the caller's own IDs that look like the one sent; the suggestions
#: depend on the text sent, so they are left out of the comparison (the content check still
#: sees them).
_SIMILAR = re.compile(r"similar IDs: (?:[A-Za-z0-9_.:\-]+ \([A-Za-z0-9]+\)(?:, )?)+")


def _answer(response: httpx.Response, placeholder: dict[str, str]) -> tuple[int, str]:
    text = response.text
    for real, fake in placeholder.items():
        text = text.replace(real, fake)
    text = _SIMILAR.sub("<similar>", text)
    try:
        body: Any = _normalise(json.loads(text))
        text = json.dumps(body, sort_keys=True)
    except ValueError:
        pass
    return response.status_code, text


def _probe_routes(own: dict[str, Any], x: str, secret_value: str) -> list[tuple[str, str, str,
                                                                              Any]]:
    """(name, method, path, body) of every route probed with the foreign ID ``x``."""
    return [
        ("get", "GET", f"/entities/{x}", None),
        ("get as_of", "GET", f"/entities/{x}?as_of=1000000", None),
        ("update", "PATCH", f"/entities/{x}", {"data": {"cost": 1}}),
        ("update If-Match", "PATCH", f"/entities/{x}", {"data": {"cost": 2}}),
        ("append", "POST", f"/entities/{x}/append", {"field": "tags", "values": ["y"]}),
        ("delete", "DELETE", f"/entities/{x}", None),
        ("restore", "POST", f"/entities/{x}/restore", None),
        ("erase", "POST", f"/entities/{x}/erase", None),
        ("history", "GET", f"/entities/{x}/history", None),
        ("related out", "GET", f"/entities/{x}/related", None),
        ("related in", "GET", f"/entities/{x}/related?direction=in", None),
        ("related both depth 3", "GET", f"/entities/{x}/related?direction=both&depth=3", None),
        ("link to", "POST", "/relations", {"from_id": own["trip"], "relation": "includes",
                                           "to_id": x}),
        ("link from", "POST", "/relations", {"from_id": x, "relation": "includes",
                                             "to_id": own["poi"]}),
        ("unlink", "DELETE", "/relations", {"from_id": own["trip"], "relation": "includes",
                                            "to_id": x}),
        ("unlink from", "DELETE", "/relations", {"from_id": x, "relation": "includes",
                                                 "to_id": own["poi"]}),
        *[(f"search {mode} related_to", "POST", "/search",
           {"type": "Poi", "text": "Shanghai Museum", "mode": mode,
            "related_to": {"relation": "includes", "from": x}}) for mode in
          ("hybrid", "vector", "keyword")],
        *[(f"search {mode} by secret text", "POST", "/search",
           {"type": "Poi", "text": secret_value, "mode": mode, "k": 50})
          for mode in ("hybrid", "vector", "keyword")],
        ("search where secret", "POST", "/search",
         {"type": "Poi", "text": "museum", "where": {"name": secret_value}}),
        ("search where $in", "POST", "/search",
         {"type": "Trip", "text": "trip", "where": {"tags": {"$contains": secret_value}}}),
        ("query where secret", "POST", "/entities/Poi/query", {"where": {"name": secret_value}}),
        ("query where tags", "POST", "/entities/Poi/query",
         {"where": {"tags": {"$contains": secret_value}}}),
        ("query as_of", "POST", "/entities/Poi/query",
         {"where": {"city": f"City-{secret_value}"}, "as_of": 1000000}),
        ("count where secret", "POST", "/entities/Poi/count", {"where": {"name": secret_value}}),
        ("plan validate get", "POST", "/plans/validate", {"ops": [{"op": "get", "id": x}]}),
        ("plan dry-run update", "POST", "/plans/dry-run",
         {"ops": [{"op": "update", "id": x, "data": {"cost": 3}}]}),
        ("plan execute link", "POST", "/plans/execute",
         {"ops": [{"op": "link", "from_id": own["trip"], "relation": "includes", "to_id": x}]}),
        ("plan execute read", "POST", "/plans/execute",
         {"ops": [{"op": "get", "id": x}, {"op": "related", "id": x},
                  {"op": "history", "id": x}]}),
        ("plan by reference", "POST", "/plans/execute",
         {"ops": [{"op": "query", "type": "Poi", "where": {"name": secret_value}},
                  {"op": "get", "id": "$0.items[0].id"}]}),
        ("tool get", "POST", "/tools/get", {"id": x}),
        ("tool history", "POST", "/tools/history", {"id": x}),
        ("tool related", "POST", "/tools/related", {"id": x}),
        ("tool update", "POST", "/tools/update", {"id": x, "data": {"cost": 4}}),
        ("tool query", "POST", "/tools/query_Poi", {"where": {"name": secret_value}}),
        ("tool search", "POST", "/tools/search_Poi", {"text": secret_value}),
        ("context focus", "POST", "/context", {"focus_ids": [x]}),
        ("context query", "POST", "/context", {"query": secret_value}),
        ("constraints subject", "GET", f"/constraints?subject={x}", None),
        ("summary scope", "POST", "/summaries", {"scope": x}),
    ]


def _fresh_id(like: str) -> str:
    """An ID of the same shape as ``like`` that exists nowhere."""
    prefix, sep, rest = like.rpartition("_")
    if sep and re.fullmatch(r"[0-9a-f]+", rest):
        return f"{prefix}_{secrets.token_hex(len(rest) // 2 + 1)[:len(rest)]}"
    return like[:-1] + ("x" if like[-1] != "x" else "y")


TARGETS = ("poi", "shared", "trip", "deleted", "erased", "given")


def run_isolation(workdir: Path, targets: tuple[str, ...] = TARGETS) -> IsolationFigures:
    """Probe every route of each tenant with the other tenant's IDs and values.

    ``targets`` are the kinds of foreign entity probed: a secret one, one whose facts both
    tenants share, a trip with links, a deleted one, an erased one and one with a caller-given
    ID.
    """
    keys = ",".join([f"{KEYS['alpha']}:alpha:admin", f"{KEYS['beta']}:beta:admin",
                     f"{ROLE_KEYS['reader']}:alpha:reader", f"{ROLE_KEYS['writer']}:alpha:writer"])
    figures = IsolationFigures()
    data: dict[str, dict[str, Any]] = {}

    def seed(mem: Any) -> None:
        for tenant in ("alpha", "beta"):
            data[tenant] = _tenant_data(mem, tenant)

    with service(workdir, keys, seed=seed) as (base, mem):
        for me, other in (("alpha", "beta"), ("beta", "alpha")):
            client = httpx.Client(base_url=base, timeout=60,
                                  headers={"Authorization": f"Bearer {KEYS[me]}"})
            _probe_tenant(client, data[me], data[other], figures, me, targets)
            client.close()
        _probe_auth(base, mem, figures)
    return figures


def _leaks_content(text: str, foreign: dict[str, Any], sent: str = "") -> list[str]:
    """The other tenant's secret and IDs found in ``text`` (except those the caller sent)."""
    for echoed in sorted({foreign["secret"], *foreign["all_ids"]}, key=len, reverse=True):
        if echoed in sent:
            text = text.replace(echoed, "")
    found = [foreign["secret"]] if foreign["secret"] in text else []
    return found + [eid for eid in foreign["all_ids"] if eid in text]


#: Probes whose answer ranks the caller's own entities by the text sent: their answers are
#: compared by shape (which IDs, how many candidates and dropped hits), not byte for byte.
RANKED = ("by secret text", "tool search", "context query")


def _shape(value: Any, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """The IDs and candidate / dropped counts anywhere in a JSON answer."""
    out = out if out is not None else {"ids": set(), "counts": []}
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("id", "entity_id", "from_id") and isinstance(v, str):
                out["ids"].add(v)
            elif k in ("candidates", "dropped", "count") and isinstance(v, int):
                out["counts"].append((k, v))
            else:
                _shape(v, out)
    elif isinstance(value, list):
        for v in value:
            _shape(v, out)
    return out


def _probe_tenant(client: httpx.Client, own: dict[str, Any], foreign: dict[str, Any],
                  figures: IsolationFigures, me: str, targets: tuple[str, ...]) -> None:
    _control(client, own)
    for target in targets:
        real = foreign[target]
        fake = _fresh_id(real)
        fake_secret = f"SECRET-nobody-{secrets.token_hex(4)}"
        for (name, method, path, body), (_n, m2, p2, b2) in zip(
                _probe_routes(own, real, foreign["secret"]),
                _probe_routes(own, fake, fake_secret), strict=True):
            headers = {"If-Match": '"1"'} if "If-Match" in name else {}
            got = client.request(method, path, json=body, headers=headers)
            ref = client.request(m2, p2, json=b2, headers=headers)
            figures.probes += 1
            label = f"{me} {name} with the other tenant's {target}"
            placeholders = {real: "<ID>", fake: "<ID>", foreign["secret"]: "<S>",
                            fake_secret: "<S>"}
            if got.status_code >= 500:
                figures.problems.append(f"{label}: {got.status_code}")
            leaked = _leaks_content(got.text, foreign, path + json.dumps(body))
            ranked = any(r in name for r in RANKED) and got.status_code == 200
            if leaked:
                figures.leaks += 1
                figures.problems.append(f"{label}: answer contains {leaked[:3]}")
            elif ranked and (got.status_code != ref.status_code
                             or _shape(got.json()) != _shape(ref.json())):
                figures.leaks += 1
                figures.problems.append(f"{label}: ranked answer differs from an unknown text: "
                                        f"{got.text[:200]} vs {ref.text[:200]}")
            elif not ranked and _answer(got, placeholders) != _answer(ref, placeholders):
                figures.leaks += 1
                figures.problems.append(
                    f"{label}: answers differ from a missing ID: {got.status_code} "
                    f"{got.text[:200]} vs {ref.status_code} {ref.text[:200]}")
    # an ID derived from a fact the other tenant holds (anyone can compute it)
    from dmf_hybrid._internal.ids import entity_id

    derived: list[tuple[int, str]] = []
    for name in ("Shanghai Museum", f"No such place {secrets.token_hex(4)}"):
        eid = entity_id("Poi", {"name": name, "city": "Shanghai"}, foreign["tenant"])
        response = client.post("/entities/Poi", json={"data": {"name": f"mine {eid}",
                                                               "city": "c"}, "id": eid})
        derived.append(_answer(response, {eid: "<ID>"}))
    figures.probes += 1
    if derived[0] != derived[1]:
        figures.leaks += 1
        figures.problems.append(f"{me}: creating with the ID derived from the other tenant's "
                                f"fact answers {derived[0]}, for an absent fact {derived[1]}")
    # the audit feed and every listing: nothing of the other tenant
    for path in ["/audit/events?limit=1000", "/tools", "/types"]:
        response = client.get(path)
        figures.probes += 1
        leaked = _leaks_content(response.text, foreign)
        if leaked:
            figures.leaks += 1
            figures.problems.append(f"{me} GET {path} contains {leaked[:3]}")
    events = client.get("/audit/events?limit=1000").json()
    figures.probes += 1
    if any(e["tenant"] != me for e in events):
        figures.leaks += 1
        figures.problems.append(f"{me}: the audit feed shows another tenant's events")
    # an ID the other tenant gave its entity: IDs are per tenant, so it is as free as any
    # (probed last: from now on the caller holds an entity with that ID itself)
    real, fake = foreign["given"], _fresh_id(foreign["given"])
    answers = []
    for eid in (real, fake):
        response = client.post("/entities/Poi", json={"data": {"name": f"mine {eid}",
                                                               "city": "c"}, "id": eid})
        answers.append(_answer(response, {eid: "<ID>"}))
        leaked = _leaks_content(response.text, foreign, eid)
        if leaked:
            figures.leaks += 1
            figures.problems.append(f"{me} create with the other tenant's caller-given ID: "
                                    f"answer contains {leaked[:3]}")
    figures.probes += 1
    if answers[0] != answers[1]:
        figures.leaks += 1
        figures.problems.append(f"{me}: creating with the other tenant's caller-given ID "
                                f"answers {answers[0]}, with a free ID {answers[1]}")


def _control(client: httpx.Client, own: dict[str, Any]) -> None:
    """The comparison must be able to tell: the caller's own ID answers unlike a missing one."""
    fake = _fresh_id(own["poi"])
    mine = _answer(client.get(f"/entities/{own['poi']}"), {own["poi"]: "<ID>"})
    missing = _answer(client.get(f"/entities/{fake}"), {fake: "<ID>"})
    if mine == missing:
        raise AssertionError("isolation probes cannot tell an existing ID from a missing one")


def _probe_auth(base: str, mem: Any, figures: IsolationFigures) -> None:
    """No key 401, unknown key 401, wrong role 403; keys are hashed at rest."""
    cases: list[tuple[str | None, str, str, Any, int]] = [
        (None, "GET", "/types", None, 401),
        ("not-a-key", "GET", "/types", None, 401),
        (None, "POST", "/search", {"type": "Poi", "text": "x"}, 401),
        (ROLE_KEYS["reader"], "POST", "/entities/Poi", {"data": {"name": "r", "city": "c"}}, 403),
        (ROLE_KEYS["reader"], "POST", "/plans/execute",
         {"ops": [{"op": "create", "type": "Poi", "data": {"name": "r", "city": "c"}}]}, 403),
        (ROLE_KEYS["reader"], "POST", "/tools/create_Poi", {"data": {"name": "r", "city": "c"}},
         403),
        (ROLE_KEYS["writer"], "POST", "/admin/reindex", None, 403),
        (ROLE_KEYS["writer"], "POST", "/admin/snapshot", {"name": "w"}, 403),
        (ROLE_KEYS["writer"], "POST", "/types", POI_TYPE, 403),
        (ROLE_KEYS["reader"], "GET", "/types", None, 200),
    ]
    for key, method, path, body, want in cases:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        got = httpx.request(method, base + path, json=body, headers=headers, timeout=60)
        figures.probes += 1
        if got.status_code != want:
            figures.leaks += 1
            figures.problems.append(f"{method} {path} with key {key}: {got.status_code}, "
                                    f"expected {want}")
    from dmf_hybrid._internal.api.auth import KeyRing

    # the service holds hashes only: no plaintext key anywhere in its key ring
    ring = KeyRing.from_settings(_settings_with_keys(KEYS["alpha"]))
    figures.probes += 1
    plain = [e for e in ring.entries if KEYS["alpha"] in repr(e)]
    if plain or any(e.key_hash == KEYS["alpha"] for e in ring.entries):
        figures.leaks += 1
        figures.problems.append("an API key is kept in plain text")


def _settings_with_keys(key: str) -> Any:
    from dmf_hybrid import Settings

    return Settings(api_keys=f"{key}:alpha:admin", embedder="hash", load_examples=False)

