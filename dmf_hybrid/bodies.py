"""The JSON bodies of MemoryClient's read requests: query, count, search, context, constraints.

Each argument is checked here the way ``Memory`` checks it (the same ``checks`` and
``conversations`` functions), so a bad argument raises the same error before any request is
sent; what needs the schema (field names, a type's ``conversation`` field) is checked by the
server, whose error the client rebuilds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checks import AsOf, check_page, check_reference_time, check_where
from .conversations import check_conversation, check_turns
from .encoding import as_of_value, jsonable, where_json


def query_body(where: Mapping[str, Any] | None, order_by: str | Sequence[str] | None,
               limit: int, cursor: str | None, as_of: AsOf) -> dict[str, Any]:
    """``POST /entities/{type}/query``."""
    check_page(limit, cursor)
    return {"where": where_json(where), "order_by": jsonable(order_by, "order_by"),
            "limit": limit, "cursor": cursor, "as_of": as_of_value(as_of)}


def count_body(where: Mapping[str, Any] | None, as_of: AsOf) -> dict[str, Any]:
    """``POST /entities/{type}/count``."""
    return {"where": where_json(where), "as_of": as_of_value(as_of)}


def search_body(type_name: str, text: str | None, where: Mapping[str, Any] | None, k: int,
                mode: str, related_to: Mapping[str, Any] | None, as_of: AsOf,
                conversation: str | None, reference_time: Any = None) -> dict[str, Any]:
    """``POST /search``."""
    when = check_reference_time(reference_time)
    return {"type": type_name, "text": text, "where": where_json(where), "k": k,
            "mode": mode, "related_to": jsonable(related_to, "related_to"),
            "as_of": as_of_value(as_of),
            "conversation": None if conversation is None else check_conversation(conversation),
            "reference_time": None if when is None else when.isoformat()}


def context_body(focus_ids: Sequence[str] | None, query: str | None, budget_tokens: int,
                 as_of: AsOf, k: int, conversation: str | None, turns: int | None
                 ) -> dict[str, Any]:
    """``POST /context``."""
    check_turns(turns, conversation)
    return {"focus_ids": jsonable(focus_ids, "focus_ids"), "query": query,
            "budget_tokens": budget_tokens, "as_of": as_of_value(as_of), "k": k,
            "conversation": conversation, "turns": turns}


def constraints_body(where: Mapping[str, Any] | None, limit: int, cursor: str | None,
                     as_of: AsOf) -> dict[str, Any]:
    """``POST /constraints/query``."""
    check_where(where)
    check_page(limit, cursor)
    return {"where": where_json(where), "limit": limit, "cursor": cursor,
            "as_of": as_of_value(as_of)}
