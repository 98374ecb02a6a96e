"""Resolution: every proposed ID re-read from DuckDB; deleted, expired, stale, out-of-tenant
or filter-failing hits are dropped (fail closed), and the hits carry DuckDB's rows.

Expiry is judged here, at the time of the search: the candidate lists and rows kept between
searches belong to a committed state, and an entity may expire without a commit.
"""

from __future__ import annotations

from ..clock import utcnow
from ..mirrors.vectors import LocalVectors
from ..models import Hit, LegScore
from ..store import Store
from ..store.expiry import expired
from .ranking import SCORE_DIGITS, Ranking
from .scope import EXPIRES, TEXT_HASH, Scope

#: IDs resolved beyond the ones still needed (a few proposals may fail resolution).
RESOLVE_SLACK = 0


def resolve_hits(scope: Scope, store: Store, local: LocalVectors | None, fused: Ranking,
                 rankings: dict[str, Ranking], k: int, *, direct: bool = False
                 ) -> tuple[list[Hit], int]:
    """Hits for the fused ranking, each re-read from DuckDB; failing ones are dropped.
    ``direct``: the legs scored the rows of this very state (:mod:`.direct`), so no score
    can be stale."""
    positions = {leg: {eid: (rank, score) for rank, (eid, score) in enumerate(r, 1)}
                 for leg, r in rankings.items()}
    hits: list[Hit] = []
    dropped = 0
    start = 0
    now = utcnow()
    while len(hits) < k and start < len(fused):
        batch = fused[start:start + k - len(hits) + RESOLVE_SLACK]
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
            legs = {leg: LegScore(rank=pos[eid][0],
                                  score=round(float(pos[eid][1]), SCORE_DIGITS))
                    for leg, pos in positions.items() if eid in pos}
            hits.append(Hit(entity=store.rows.row_to_entity(scope.etype, row),
                            score=round(float(score), SCORE_DIGITS), legs=legs))
            if len(hits) == k:
                break
    return hits, dropped
