"""Prompt context: a compact, deterministic description of what an agent needs now.

``build_context(mem, request)`` returns a :class:`MemoryContext` for a
:class:`~dmf_hybrid._internal.requests.ContextRequest` (its focus IDs, query, token budget,
``as_of``): a text for the prompt and the structured data behind it. Sections, in this order (which
is also their priority when the token budget runs out):

1. ``Focus``: each focus entity with its ID, type, version and non-empty fields (identity
   fields first), read at the context's seq;
2. ``Conversation``: given a conversation, its last ``turns`` messages (the ``Message`` rows
   with the highest ``turn``), oldest first, each with its ID, turn, time when set, role and
   text;
3. ``Open constraints``: open ``Constraint`` entities on the focus entities (all of them
   when there is no focus);
4. ``Relations``: the focus entities' direct links, both directions, with the other end's
   type and label;
5. ``Search``: given a query, the top ``k`` hits over every embedded type (score desc, ID);
   with a conversation, the hits of types with a ``conversation`` field are that
   conversation's;
6. ``Recent changes``: the newest audit events of the focus entities (of the tenant when
   there is no focus), newest first, described without times;
7. ``Entities``: per type, how many there are and the IDs of the most recently changed.

Lines are added in that order while they fit ``budget_tokens`` (a focus entity whose full
line does not fit is shown by type, ID, version and label only; of the conversation, the
newest turns that fit, so the oldest are left out first); a section whose first line
does not fit is left out, and the last line says how many items were left out. The
structured lists hold exactly the items the text shows. Every ID in
the text is read from the store (focus IDs that do not exist raise NotFound), and the same
state and arguments give byte-identical text: every list has a deterministic order with the ID
as last key, numbers have fixed formats, and no wall-clock time appears.

Token counting: the embedder's ``count_tokens`` (the model's tokenizer) when it has one,
otherwise the approximation ``ceil(len(line) / 4)``; either is summed line by line (with the
newline), which never undercounts the approximation and adds the tokenizer's special tokens
once per line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..checks import ID_PATTERN, LAST_TURNS, MAX_TURNS, check_id
from ..conversations import CONVERSATION_FIELD, MESSAGE_TYPE, check_log_type, check_turns
from ..core import MemoryCore
from ..errors import NotFound, ValidationError
from ..models import (
    AuditEvent,
    ContextChange,
    ContextEntity,
    ContextHit,
    ContextLink,
    ContextTurn,
    Entity,
    MemoryContext,
)
from ..profiles import DateGrounding
from ..requests import (
    CONTEXT_MAX_BUDGET,
    CONTEXT_MAX_FOCUS,
    CONTEXT_MAX_QUERY_CHARS,
    CONTEXT_MIN_BUDGET,
    ContextRequest,
)
from ..ruledefs import CONSTRAINT_TYPE
from ..store.reads import EventSelection
from .summaries import SUMMARY_OPS, SUMMARY_TYPE, _value, describe_event

MAX_FOCUS = CONTEXT_MAX_FOCUS
MAX_QUERY_CHARS = CONTEXT_MAX_QUERY_CHARS
MIN_BUDGET, MAX_BUDGET = CONTEXT_MIN_BUDGET, CONTEXT_MAX_BUDGET
MAX_RELATIONS = 20
MAX_CONSTRAINTS = 20
MAX_CHANGES = 12
MAX_OVERVIEW_IDS = 5
MAX_FIELDS = 12
MAX_TURN_CHARS = 400
LABEL_FIELDS = ("name", "title", "label", "handle", "destination", "message", "text")
APPROX = "ceil(chars/4)"
CONTEXT_TOOL_ARGS = ("focus_ids", "query", "budget_tokens", "as_of", "conversation", "turns")


def approx_tokens(text: str) -> int:
    """The documented approximation: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)


def token_counter(mem: MemoryCore) -> tuple[Callable[[str], int], str]:
    """The embedder's tokenizer count when it has one, else the approximation; and its name."""
    embedder = getattr(mem.engine, "embedder", None)
    count = getattr(embedder, "count_tokens", None)
    if callable(count):
        return count, f"{getattr(embedder, 'model_id', 'model')} tokenizer"
    return approx_tokens, APPROX


def label(entity: Entity) -> str | None:
    """A short human label of an entity (its name-like field), or None."""
    data = entity.fields()
    etype_fields = list(data)
    for name in (*LABEL_FIELDS, *etype_fields):
        value = data.get(name)
        if isinstance(value, str) and value:
            return _value(value)
    return None


def _entity_item(mem: MemoryCore, entity: Entity) -> ContextEntity:
    etype = mem.get_type(entity.type)
    identity = tuple(etype.typedef.identity or ())
    data = entity.fields()
    order = [n for n in identity if n in data] + [n for n in etype.fields if n not in identity]
    fields = {n: data[n] for n in order if data.get(n) not in (None, [], "")}
    return ContextEntity(id=entity.id, type=entity.type, version=entity.version,
                         label=label(entity), fields=fields)


def _fields_text(fields: dict[str, Any]) -> str:
    parts = [f"{n}={_value(v)}" for n, v in fields.items()]
    more = len(parts) - MAX_FIELDS
    return "; ".join(parts[:MAX_FIELDS]) + (f"; … {more} more" if more > 0 else "")


class _Builder:
    def __init__(self, count: Callable[[str], int], budget: int) -> None:
        self.count, self.budget = count, budget
        self.lines: list[str] = []
        self.used = 0
        self.omitted = 0
        self.reserve = count("(999 more items left out for the token budget)\n")

    def fits(self, line: str) -> bool:
        return self.used + self.count(line + "\n") + self.reserve <= self.budget

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.used += self.count(line + "\n")

    def section(self, title: str, items: Sequence[tuple[str, Any]],
                short: Sequence[str] = ()) -> list[Any]:
        """Add a section's lines while they fit (else their ``short`` form); kept payloads."""
        kept: list[Any] = []
        if not items:
            return kept
        header = f"## {title}"
        first = items[0][0] if self.fits(items[0][0]) or not short else short[0]
        if not self.fits(header + "\n" + first):
            self.omitted += len(items)
            return kept
        self.add(header)
        for i, (line, payload) in enumerate(items):
            if not self.fits(line):
                if i >= len(short) or not self.fits(short[i]):
                    self.omitted += len(items) - i
                    break
                line = short[i]
            self.add(line)
            kept.append(payload)
        return kept

    def last_section(self, title: str, items: Sequence[tuple[str, Any]]) -> list[Any]:
        """Add the section's last items that fit, in their order; kept payloads."""
        header = f"## {title}"
        room = self.budget - self.reserve - self.used - self.count(header + "\n")
        start = len(items)
        while start and self.count(items[start - 1][0] + "\n") <= room:
            start -= 1
            room -= self.count(items[start][0] + "\n")
        self.omitted += start
        if start == len(items):
            return []
        self.add(header)
        for line, _ in items[start:]:
            self.add(line)
        return [payload for _, payload in items[start:]]


def _recent_events(mem: MemoryCore, focus: list[str], seq: int) -> list[AuditEvent]:
    selection = EventSelection(SUMMARY_OPS, upto=seq, about=focus or None)
    return mem.reads.events(selection, newest_first=True, limit=MAX_CHANGES)


def _last_turns(mem: MemoryCore, conversation: str, turns: int, as_of: int | None
                ) -> list[ContextTurn]:
    """The conversation's last ``turns`` messages, oldest first (none: an empty list)."""
    types = {t.name: t for t in mem.types()}
    if MESSAGE_TYPE not in types:
        return []
    check_log_type(types[MESSAGE_TYPE], field="conversation")
    page = mem.query(MESSAGE_TYPE, {CONVERSATION_FIELD: conversation}, order_by="-turn",
                     limit=turns, as_of=as_of)
    grounding = types[MESSAGE_TYPE].typedef.dates
    return [_turn(m, grounding) for m in reversed(page.items)]


def _turn(message: Entity, grounding: DateGrounding | None) -> ContextTurn:
    fields = message.fields()
    # a log type of one's own needs no datetime field "time" (add_messages needs none)
    when = fields.get("time")
    return ContextTurn(id=message.id, turn=fields["turn"], role=fields["role"],
                       text=fields["text"], time=when if isinstance(when, dt.datetime) else None,
                       dates=_found_dates(message.data, grounding))


def _found_dates(data: Any, grounding: DateGrounding | None) -> list[dict[str, str]]:
    """The resolved time expressions a row's grounded dates field holds."""
    value = None if grounding is None else getattr(data, grounding.field, None)
    found = value.get("found") if isinstance(value, dict) else None
    return [dict(f) for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _turn_line(turn: ContextTurn) -> str:
    text = turn.text if len(turn.text) <= MAX_TURN_CHARS else \
        turn.text[:MAX_TURN_CHARS - 1] + "…"
    when = f" ({turn.time.isoformat()})" if turn.time is not None else ""
    dates = "; ".join(f"{d['phrase']} = {d['start']}" + (
        f"..{d['end']}" if d["end"] != d["start"] else "") for d in turn.dates)
    return f"- {turn.id} turn {turn.turn}{when} {turn.role}: " \
           f"{json.dumps(text, ensure_ascii=False)}" + (f" [{dates}]" if dates else "")


def build_context(mem: MemoryCore, request: ContextRequest) -> MemoryContext:
    """The prompt context a request asks for (see the module doc)."""
    focus, query, budget_tokens, k = (request.focus_ids or [], request.query,
                                      request.budget_tokens, request.k)
    conversation = request.conversation
    last = check_turns(request.turns, conversation)
    resolved = mem.reads.resolve_as_of(request.as_of)
    seq = mem.last_seq() if resolved is None else resolved
    count, counter_name = token_counter(mem)
    b = _Builder(count, budget_tokens)
    b.add(f"# Memory context at seq {seq}")
    types = {t.name: t for t in mem.types()}
    out = MemoryContext(text="", tokens=0, budget_tokens=budget_tokens,
                        token_counter=counter_name, as_of_seq=seq)

    entities = [mem.get(fid, as_of=resolved) for fid in focus]
    items = [_entity_item(mem, e) for e in entities]
    out.focus = b.section(
        "Focus", [(f"- {i.type} {i.id} v{i.version}: {_fields_text(i.fields)}", i)
                  for i in items],
        short=[f"- {i.type} {i.id} v{i.version}{': ' + i.label if i.label else ''}"
               for i in items])

    if last is not None and conversation is not None:
        out.turns = b.last_section(f"Conversation {conversation}", [
            (_turn_line(t), t) for t in _last_turns(mem, conversation, last, resolved)])

    if CONSTRAINT_TYPE in types and "status" in types[CONSTRAINT_TYPE].fields:
        where: dict[str, Any] = {"status": "open"}
        if focus:
            where["subject"] = {"$in": focus}
        page = mem.query(CONSTRAINT_TYPE, where, order_by=["created_at"],
                         limit=min(MAX_CONSTRAINTS, mem.settings.max_page_size), as_of=resolved)
        citems = [_entity_item(mem, c) for c in page.items]
        out.constraints = b.section("Open constraints", [
            (f"- {c.type} {c.id} on {c.fields.get('subject')} ({c.fields.get('kind')}, "
             f"rule {c.fields.get('rule')}): {c.fields.get('message') or ''}".rstrip(": "), c)
            for c in citems])

    links: list[tuple[str, ContextLink]] = []
    for entity in entities:
        for link in _direct_links(mem, entity.id, resolved):
            links.append((f"- {link.from_id} -{link.relation}-> {link.to_id} "
                          f"({link.other_type}"
                          f"{' ' + link.other_label if link.other_label else ''})", link))
    out.relations = b.section("Relations", links)

    if query is not None:
        pool: list[ContextHit] = []
        for tname in sorted(types):
            if types[tname].typedef.embed is None or tname == SUMMARY_TYPE and focus:
                continue
            scoped = last is not None and CONVERSATION_FIELD in types[tname].fields
            result = mem.search(tname, query, k=k, as_of=resolved,
                                conversation=conversation if scoped else None)
            pool += [ContextHit(id=h.entity.id, type=tname, score=round(h.score, 6),
                                label=label(h.entity)) for h in result.hits]
        pool.sort(key=lambda h: (-h.score, h.id))
        out.hits = b.section(f"Search: {_value(query)}", [
            (f"- {h.type} {h.id} (score {h.score:.3f}){' ' + h.label if h.label else ''}", h)
            for h in pool[:k]])

    changes = []
    for event in _recent_events(mem, focus, seq):
        change = ContextChange(seq=event.seq, op=event.op, type=event.type,
                               entity_id=event.entity_id, text=describe_event(event))
        changes.append((f"- seq {event.seq} {event.type or ''} {event.entity_id or ''}: "
                        f"{change.text}", change))
    out.changes = b.section("Recent changes", changes)

    overview = []
    for tname in sorted(types):
        total = mem.count(tname, as_of=resolved)
        if not total:
            continue
        shown = _recently_changed(mem, tname, seq, resolved)
        more = ", …" if total > len(shown) else ""
        overview.append((f"- {tname}: {total} ({', '.join(shown)}{more})", (tname, total,
                                                                            shown)))
    kept = b.section("Entities", overview)
    out.types = {t: n for t, n, _ in kept}

    if b.omitted:
        b.add(f"({b.omitted} more items left out for the token budget)")
    text = "\n".join(b.lines) + "\n"
    return out.model_copy(update={"text": text, "tokens": b.used, "truncated": b.omitted > 0,
                                  "omitted": b.omitted, "ids": mentioned_ids(mem, text)})


def _direct_links(mem: MemoryCore, entity_id: str, as_of: int | None) -> list[ContextLink]:
    """Up to MAX_RELATIONS live links of an entity, by (relation, direction, other ID)."""
    found = mem.reads.links([entity_id], None, "both", as_of)
    ordered = sorted(found, key=lambda x: (x[1], x[3], x[2] if x[3] == "out" else x[0]))
    out: list[ContextLink] = []
    for a, relation, b, tag in ordered:
        if len(out) >= MAX_RELATIONS:
            break
        other_id = b if tag == "out" else a
        if other_id == entity_id and tag == "in":
            continue  # a self-link is listed once, as outgoing
        try:
            other = mem.get(other_id, as_of=as_of)
        except NotFound:
            continue
        out.append(ContextLink(from_id=a, relation=relation, to_id=b, other_type=other.type,
                               other_label=label(other)))
    return out


def _recently_changed(mem: MemoryCore, type_name: str, seq: int, as_of: int | None
                      ) -> list[str]:
    """IDs of a type's live entities whose last change is newest (by audit seq, then ID)."""
    ids = mem.reads.last_changed(
        EventSelection(("create", "update", "append", "restore"), upto=seq, type_name=type_name),
        MAX_OVERVIEW_IDS * 4)
    if as_of is None:
        live = set(mem.reads.get_many(type_name, ids))
    else:
        live = {i for i in ids if _exists(mem, i, as_of)}
    return [i for i in ids if i in live][:MAX_OVERVIEW_IDS]


def _exists(mem: MemoryCore, entity_id: str, as_of: int) -> bool:
    try:
        mem.get(entity_id, as_of=as_of)
    except NotFound:
        return False
    return True


def mentioned_ids(mem: MemoryCore, text: str) -> list[str]:
    """The entity IDs of this tenant that a text mentions, sorted."""
    words = {w.strip("(),;:") for w in text.split()}
    candidates = sorted(w for w in words if w and _looks_like_id(w))
    return sorted(mem.reads.types_of_ids(candidates))


def _looks_like_id(word: str) -> bool:
    try:
        check_id(word)
    except ValidationError:
        return False
    return "_" in word


def context_tool_definition(conversations: bool = False) -> dict[str, Any]:
    """The function-calling definition of the ``context`` agent tool (``conversations``: with
    the ``conversation`` and ``turns`` parameters, for a memory that keeps a conversation log)."""
    properties: dict[str, Any] = {
        "focus_ids": {"type": "array", "maxItems": MAX_FOCUS, "items": {"type": "string"},
                      "description": "IDs of the entities the task is about."},
        "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                  "description": "What to look for (adds search hits)."},
        "budget_tokens": {"type": "integer", "minimum": MIN_BUDGET, "maximum": MAX_BUDGET,
                          "default": 800},
        "as_of": {"type": "integer", "minimum": 0,
                  "description": "Describe memory as of this audit seq."},
    }
    if conversations:
        properties["conversation"] = {
            "type": "string", "pattern": ID_PATTERN,
            "description": "Add its last turns; scope the query's hits to it."}
        properties["turns"] = {"type": "integer", "minimum": 1, "maximum": MAX_TURNS,
                               "default": LAST_TURNS,
                               "description": "How many (needs conversation)."}
    return {
        "name": "context",
        "description": "Get a compact, current description of memory for the prompt: the focus "
                       "entities with their IDs and fields, their links, open constraints, recent "
                       "changes and (with a query) the top search hits"
                       + (" and (with a conversation) its last turns" if conversations else "")
                       + ". Use the IDs it lists; never guess IDs. Returns {text, ids, ...}.",
        "parameters": {"type": "object", "additionalProperties": False,
                       "properties": properties},
    }


def call_context_tool(mem: MemoryCore, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run the ``context`` tool: ``{text, ids, as_of_seq, tokens, truncated}``."""
    unknown = sorted(set(arguments) - set(CONTEXT_TOOL_ARGS))
    if unknown:
        raise ValidationError(f"context takes no argument {unknown[0]!r}", field=unknown[0])
    result = build_context(mem, ContextRequest.of(**arguments))
    return result.model_dump(mode="json", include={"text", "ids", "as_of_seq", "tokens",
                                                   "truncated"})
