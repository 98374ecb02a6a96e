"""Deterministic summaries of the audit log: a ``MemorySummary`` entity per window and scope.

``summarize(mem, scope, since_seq, until_seq)`` reads the tenant's events with
``since_seq < seq <= until_seq`` (default: all of them up to now) in a scope — ``None`` or
``"*"`` for everything, a type name for that type's entities, otherwise an entity ID for that
entity (its own events and the links to it) — and templates one line per entity from the event
types and field changes, e.g. ``Trip Trip_ab… "Shanghai": created (destination="Shanghai",
budget=5000.0); budget 5000.0 → 5500.0; includes +2 PointOfInterest (…)``.

Only entity mutations, links, unlinks and rule firings are summarised; events of
``MemorySummary`` entities themselves are left out (no summaries of summaries). The
summary carries the window, the seq of its first and last event, the number of events, and
``events_hash`` = SHA-256 of the canonical JSON list of their chain hashes, so anyone can
re-derive it from the log (:func:`check_summary`). Its ID derives from (scope, first_seq,
last_seq, events_hash): summarising the same events again returns the same entity. An
optional ``summariser(text, data) -> str`` (e.g. an LLM adapter) adds prose in ``prose``;
the templated ``text`` and the provenance are always there. The summary is linked by
``covers`` to every covered entity that is live, and is embedded like any other entity.
An empty window returns ``SummaryResult(empty=True)`` and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..checks import check_seq_bounds
from ..core import MemoryCore
from ..errors import LimitExceeded, NotFound, ValidationError
from ..ids import content_hash
from ..models import AuditEvent, SummaryResult
from ..store.reads import EventSelection
from ..store.tables import ENTITY_OPS

SUMMARY_TYPE = "MemorySummary"
SUMMARY_OPS = (*ENTITY_OPS, "link", "unlink", "rule")
MAX_VALUE_CHARS = 40
#: The most events one summary covers: a larger window is refused before any work, naming the
#: ``until_seq`` that would fit (a summary of more is no summary, and its text would pass the
#: field size limit).
MAX_SUMMARY_EVENTS = 500
MAX_CREATE_FIELDS = 6
Summariser = Callable[[str, Mapping[str, Any]], str]


def _value(value: Any) -> str:
    if isinstance(value, str):
        text = value if len(value) <= MAX_VALUE_CHARS else value[:MAX_VALUE_CHARS - 1] + "…"
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, list):
        inner = ", ".join(_value(v) for v in value[:5])
        return f"[{inner}{', …' if len(value) > 5 else ''}]"
    return json.dumps(value, ensure_ascii=False, default=str)


def describe_fields(data: Mapping[str, Any], first: tuple[str, ...] = (),
                    limit: int = MAX_CREATE_FIELDS) -> str:
    """``k=v, …`` of the non-empty fields (``first`` ones first, then by name)."""
    names = [n for n in first if n in data] + sorted(n for n in data if n not in first)
    parts = [f"{n}={_value(data[n])}" for n in names if data[n] not in (None, [], "")]
    return ", ".join(parts[:limit]) + (", …" if len(parts) > limit else "")


def field_changes(event: AuditEvent) -> str:
    """``field old → new; …`` of an update event (by field name)."""
    before = (event.before or {}).get("data", {})
    after = (event.after or {}).get("data", {})
    names = sorted(set(before) | set(after))
    return "; ".join(f"{n} {_value(before.get(n))} → {_value(after.get(n))}"
                     for n in names if before.get(n) != after.get(n))


def describe_event(event: AuditEvent, identity: tuple[str, ...] = ()) -> str:
    """One event as a short phrase (what changed, never when)."""
    if event.redacted:
        return f"{event.op} (erased content)"
    if event.op == "create":
        data = (event.after or {}).get("data", {})
        return f"created ({describe_fields(data, identity)})"
    if event.op in ("update", "append"):
        return field_changes(event) or event.op
    if event.op in ("delete", "restore", "erase"):
        return {"delete": "deleted", "restore": "restored", "erase": "erased"}[event.op]
    meta = event.meta or {}
    if event.op in ("link", "unlink"):
        sign = "+" if event.op == "link" else "-"
        return f"{meta.get('relation')} {sign}{meta.get('to')}"
    if event.op == "rule":
        return (f"rule {meta.get('rule')} v{meta.get('rule_version')} {meta.get('outcome')} "
                f"{meta.get('constraint_id')}")
    return event.op


def _entity_types(mem: MemoryCore, ids: list[str]) -> dict[str, str]:
    """The type of each known ID (from the entity index)."""
    return mem.reads.types_of_ids(ids)


def render(mem: MemoryCore, events: list[AuditEvent]) -> tuple[str, list[str]]:
    """The templated text of events (one line per entity, by first seq) and the IDs covered."""
    groups: dict[str, list[AuditEvent]] = {}
    for event in events:
        if event.entity_id is not None:
            groups.setdefault(event.entity_id, []).append(event)
    linked = [str((e.meta or {}).get("to")) for e in events if e.op in ("link", "unlink")]
    rule_ids = [str((e.meta or {}).get("constraint_id")) for e in events if e.op == "rule"]
    covered = sorted(set(groups) | {i for i in linked + rule_ids if i != "None"})
    types = _entity_types(mem, covered)
    lines = []
    for eid, group in groups.items():
        tname = group[0].type or types.get(eid, "?")
        identity: tuple[str, ...] = ()
        try:
            identity = tuple(mem.get_type(tname).typedef.identity or ())
        except NotFound:
            pass
        parts: list[str] = []
        i = 0
        while i < len(group):
            event = group[i]
            if event.op in ("link", "unlink") and not event.redacted:
                rel = (event.meta or {}).get("relation")
                run = [event]
                while (i + len(run) < len(group) and group[i + len(run)].op == event.op
                       and (group[i + len(run)].meta or {}).get("relation") == rel):
                    run.append(group[i + len(run)])
                targets = [str((e.meta or {}).get("to")) for e in run]
                target_types = sorted({types.get(t, "?") for t in targets})
                sign = "+" if event.op == "link" else "-"
                parts.append(f"{rel} {sign}{len(run)} {'/'.join(target_types)} "
                             f"({', '.join(targets)})")
                i += len(run)
                continue
            parts.append(describe_event(event, identity))
            i += 1
        lines.append(f"{tname} {eid}: " + "; ".join(parts))
    return "\n".join(lines), covered


def _scope_window(mem: MemoryCore, scope: Any, since_seq: int, until_seq: int
                  ) -> tuple[str, EventSelection]:
    """The scope's name, and the selection of its summarised events with
    since_seq < seq <= until_seq."""
    if scope is not None and scope != "*" and (not isinstance(scope, str) or not scope):
        raise ValidationError("scope must be \"*\", a type name or an entity ID", field="scope")
    window = EventSelection(SUMMARY_OPS, upto=until_seq, after=since_seq,
                            other_than=SUMMARY_TYPE)
    if scope is None or scope == "*":
        return "*", window
    if any(t.name == scope for t in mem.types()):
        return scope, replace(window, type_name=scope)
    if mem.reads.type_of_id(scope) is None:
        raise NotFound(f"scope {scope!r} is neither a type nor an entity ID", field="scope")
    return scope, replace(window, about=[scope])


def window_events(mem: MemoryCore, scope: Any, since_seq: int, until_seq: int
                  ) -> tuple[str, list[AuditEvent]]:
    """The scope's name and its summarised events with since_seq < seq <= until_seq."""
    name, window = _scope_window(mem, scope, since_seq, until_seq)
    return name, mem.reads.events(window)


def check_window_size(mem: MemoryCore, scope: Any, since_seq: int, until_seq: int) -> None:
    """LimitExceeded, before any work, when the window holds more than
    :data:`MAX_SUMMARY_EVENTS` summarised events; the message gives the ``until_seq`` that
    would fit."""
    _name, window = _scope_window(mem, scope, since_seq, until_seq)
    seq = mem.reads.nth_event_seq(window, MAX_SUMMARY_EVENTS)
    if seq is not None:
        fits = seq - 1
        raise LimitExceeded(
            f"the window holds more than {MAX_SUMMARY_EVENTS} events to summarise; narrow it "
            f"(since_seq={since_seq}, until_seq={fits} holds {MAX_SUMMARY_EVENTS}) or choose "
            "a type or an entity as the scope", field="until_seq", limit=MAX_SUMMARY_EVENTS,
            until_seq=fits)


def _window(mem: MemoryCore, since_seq: Any, until_seq: Any) -> tuple[int, int]:
    check_seq_bounds(since_seq=since_seq, until_seq=until_seq)
    since = since_seq or 0
    until = mem.last_seq() if until_seq is None else min(until_seq, mem.last_seq())
    if until < since:
        raise ValidationError("until_seq must not be before since_seq", field="until_seq")
    return since, until


def summarize(mem: MemoryCore, scope: Any = None, since_seq: Any = None, until_seq: Any = None,
              *, summariser: Summariser | None = None, actor: str | None = None,
              reason: str | None = None) -> SummaryResult:
    """Summarise a scope's events in a window into a ``MemorySummary`` entity."""
    since, until = _window(mem, since_seq, until_seq)
    check_window_size(mem, scope, since, until)
    name, events = window_events(mem, scope, since, until)
    result = SummaryResult(empty=not events, scope=name, since_seq=since, until_seq=until)
    if not events:
        result.text = f"no events in scope {name} with {since} < seq <= {until}"
        return result
    text, covered = render(mem, events)
    result = result.model_copy(update={
        "event_count": len(events), "first_seq": events[0].seq, "last_seq": events[-1].seq,
        "events_hash": content_hash([e.hash for e in events]), "text": text,
        "entity_ids": covered})
    data: dict[str, Any] = {
        "scope": name, "since_seq": since, "until_seq": until, "first_seq": result.first_seq,
        "last_seq": result.last_seq, "event_count": len(events),
        "events_hash": result.events_hash, "text": text, "entity_ids": covered}
    if summariser is not None:
        prose = summariser(text, dict(data))
        if not isinstance(prose, str):
            raise ValidationError("the summariser must return a string", field="summariser")
        data["prose"] = prose
        data["summariser"] = getattr(summariser, "__name__", type(summariser).__name__)
    with mem.transaction():
        mem.get_type(SUMMARY_TYPE)  # a bundled type: defined on first use
        entity = mem.create(SUMMARY_TYPE, data, actor=actor, reason=reason)
        if entity.created:
            by_type: dict[str, list[str]] = {}
            for eid, tname in sorted(_entity_types(mem, covered).items()):
                by_type.setdefault(tname, []).append(eid)
            live: set[str] = set()
            for tname, ids in sorted(by_type.items()):
                live |= set(mem.reads.get_many(tname, ids))
            for eid in sorted(live):
                mem.link(entity.id, "covers", eid, actor=actor, reason=reason)
    return result.model_copy(update={"summary": entity})


def check_summary(mem: MemoryCore, summary_id: str) -> dict[str, Any]:
    """Re-derive a summary from the log: ``{ok, events_hash_ok, text_ok, event_count}``."""
    fields = mem.get(summary_id).fields()
    _, events = window_events(mem, fields["scope"], fields["since_seq"], fields["until_seq"])
    digest = content_hash([e.hash for e in events])
    text, _ = render(mem, events)
    hash_ok = digest == fields["events_hash"] and len(events) == fields["event_count"]
    return {"ok": hash_ok and text == fields["text"], "events_hash_ok": hash_ok,
            "text_ok": text == fields["text"], "event_count": len(events)}
