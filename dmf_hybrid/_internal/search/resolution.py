"""Resolution: every proposed ID re-read from DuckDB; deleted, expired, stale, out-of-tenant
or filter-failing hits are dropped (fail closed), and the hits carry DuckDB's rows.

Expiry is judged here, at the time of the search: the candidate lists and rows kept between
searches belong to a committed state, and an entity may expire without a commit.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from ..clock import utcnow
from ..mirrors.vectors import LocalVectors
from ..models import Hit
from ..store import Store
from ..store.expiry import expired
from .ranking import SCORE_DIGITS, Ranking
from .scope import EXPIRES, TEXT_HASH, Row, Scope

#: IDs resolved beyond the ones still needed (a few proposals may fail resolution).
RESOLVE_SLACK = 0
#: A search's hits are validated in one call (one per hit and per leg score cost ~3x more).
_HITS: TypeAdapter[list[Hit]] = TypeAdapter(list[Hit])


def resolve_hits(scope: Scope, store: Store, local: LocalVectors | None, fused: Ranking,
                 rankings: dict[str, Ranking], k: int, *, direct: bool = False
                 ) -> tuple[list[Hit], int]:
    """Hits for the fused ranking, each re-read from DuckDB; failing ones are dropped.
    ``direct``: the legs scored the rows of this very state (:mod:`.direct`), so no score
    can be stale."""
    positions = {leg: {eid: (rank, score) for rank, (eid, score) in enumerate(r, 1)}
                 for leg, r in rankings.items()}
    accepted: list[tuple[Row, float, dict[str, dict[str, Any]]]] = []
    dropped = 0
    start = 0
    now = utcnow()
    while len(accepted) < k and start < len(fused):
        batch = fused[start:start + k - len(accepted) + RESOLVE_SLACK]
        start += len(batch)
        found = scope.fetch_rows([eid for eid, _ in batch])
        indexed: list[str | None] = [] if direct or scope.seq is not None or local is None else (
            local.text_hashes_of(scope.tenant, [eid for eid, _ in batch]))
        for at, (eid, score) in enumerate(batch):
            row = found.get(eid)
            if row is None or (scope.seq is None and expired(row[EXPIRES], now)):
                dropped += 1
                continue
            if not direct and scope.seq is None and (
                    local is None or indexed[at] != row[TEXT_HASH]):
                dropped += 1  # the index has not caught up with this entity: stale
                continue
            legs = {leg: {"rank": pos[eid][0], "score": round(float(pos[eid][1]), SCORE_DIGITS)}
                    for leg, pos in positions.items() if eid in pos}
            accepted.append((row, round(float(score), SCORE_DIGITS), legs))
            if len(accepted) == k:
                break
    entities = store.rows.rows_to_entities(scope.etype, [row for row, _, _ in accepted])
    return _HITS.validate_python([
        {"entity": entity, "score": score, "legs": legs}
        for entity, (_, score, legs) in zip(entities, accepted, strict=True)]), dropped
