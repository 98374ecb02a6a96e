"""Search results: hits with per-leg provenance and a replayable retrieval receipt."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..models import Entity


class LegScore(BaseModel):
    """Where one leg ranked a hit (1-based) and the score it gave."""

    rank: int
    score: float


class Hit(BaseModel):
    """One search hit: the entity as resolved from DuckDB, its fused score and leg scores."""

    entity: Entity
    score: float
    legs: dict[str, LegScore] = Field(default_factory=dict)


class Receipt(BaseModel):
    """How an answer was produced; replay it with ``as_of=resolved_at_seq``."""

    resolved_at_seq: int
    mode: str
    plan: str = Field(description='"exact" (all candidates scored) or "ann" (vector index).')
    candidates: int = Field(description="Entities that passed the filters in DuckDB.")
    model_id: str
    k: int
    rrf_k: int | None = None
    fusion: str | None = Field(None, description="How a hybrid search fused its legs.")
    dropped: int = Field(0, description="Proposed hits that failed resolution (fail closed).")
    timings_ms: dict[str, float] = Field(default_factory=dict)


class SearchResult(BaseModel):
    """Hits in a deterministic order (score desc, entity ID asc) and the receipt."""

    hits: list[Hit]
    receipt: Receipt
