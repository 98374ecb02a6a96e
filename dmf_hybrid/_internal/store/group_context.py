"""Group context at write time: a new row's context field gets its group's preceding texts.

A type with ``context`` (``dmf_hybrid._internal.profiles.GroupContext``) has the store fill, for
each row it creates with that field empty, the embedded texts (the template with the context field
left empty) of up to ``turns`` rows of the same group with the next lower orders, oldest first: live
rows already stored and rows earlier in the same call. The field is then data like any other: an
earlier row never changes when later ones arrive, a replay or re-index renders the same text, and
the embedding cache (keyed by the text's hash) embeds each text once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ..clock import utcnow
from ..errors import DMFError
from ..schema import EntityType
from .expiry import live_sql
from .rows import aware_datetimes
from .sql import q
from .tables import table_name
from .txn import Connection


def fill_group_context(con: Connection, etype: EntityType, tenant: str,
                       rows: Sequence[Any]) -> list[Any]:
    """``rows`` with the context field filled where the type has one and the row leaves it
    empty; rows that do not validate are passed on unchanged (creating them reports why)."""
    ctx = etype.typedef.context
    if ctx is None:
        return list(rows)
    out: list[Any] = list(rows)
    values: dict[int, dict[str, Any]] = {}
    for i, data in enumerate(rows):
        try:
            plain = data.model_dump() if isinstance(data, BaseModel) else dict(data)
            checked = etype.validate_data(plain).model_dump()
        except (DMFError, TypeError, ValueError):
            continue
        if checked.get(ctx.field) or checked.get(ctx.order) is None:
            continue
        values[i] = checked
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, v in values.items():
        groups.setdefault(tuple(v[g] for g in ctx.group), []).append(i)
    for group, members in groups.items():
        texts = _stored_texts(con, etype, tenant, group,
                              sorted({values[i][ctx.order] for i in members}))
        for i in members:  # earlier rows of this call come before later ones of equal order
            texts.setdefault(values[i][ctx.order], _text(etype, values[i]))
        orders = sorted(texts)
        for i in members:
            before = [o for o in orders if o < values[i][ctx.order]][-ctx.turns:]
            out[i] = {**values[i], ctx.field: " ".join(texts[o] for o in before)}
    return out


def _text(etype: EntityType, values: Mapping[str, Any]) -> str:
    ctx = etype.typedef.context
    assert ctx is not None
    return etype.embed_text({**values, ctx.field: ""}) or ""


def _stored_texts(con: Connection, etype: EntityType, tenant: str,
                  group: tuple[Any, ...], new: Sequence[int]) -> dict[int, str]:
    """{order: text} of the group's live stored rows that can precede a new row of an order
    in ``new`` (the ``turns`` nearest below each)."""
    ctx = etype.typedef.context
    assert ctx is not None
    table = table_name(etype.key)
    order = q(ctx.order)
    match = " AND ".join(f"{q(g)} IS NOT DISTINCT FROM ?" for g in ctx.group)
    at: list[Any] = []
    live = live_sql(at, utcnow())  # an expired row lends no text to its successors
    params = [tenant, *at, *group, max(new)]
    # the orders first (cheap), then the rows of the ones any new row can need
    orders = [r[0] for r in con.execute(
        f"SELECT DISTINCT {order} FROM {table} WHERE tenant = ? AND {live} "
        f"AND {match} AND {order} < ? ORDER BY {order} DESC", params).fetchall()]
    if not orders:
        return {}
    wanted = sorted({o for n in new for o in [o for o in orders if o < n][:ctx.turns]})
    cols = ", ".join(q(f) for f in etype.fields)
    rows = con.execute(
        f"SELECT {cols} FROM {table} WHERE tenant = ? AND {live} AND {match} "
        f"AND {order} IN (SELECT unnest(CAST(? AS BIGINT[]))) ORDER BY {order}, id",
        [tenant, *at, *group, wanted]).fetchall()
    texts: dict[int, str] = {}
    for row in rows:
        data = aware_datetimes(etype, dict(zip(etype.fields, row, strict=True)))
        v = etype.model.model_validate(data).model_dump()
        texts.setdefault(v[ctx.order], _text(etype, v))
    return texts
