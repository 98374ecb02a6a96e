"""Search: hybrid, vector or keyword, resolved from DuckDB, with a retrieval receipt."""

from __future__ import annotations

from fastapi import APIRouter

from ...models import SearchResult
from ...wire import SearchRequest
from ..deps import ReaderMemory

router = APIRouter(tags=["search"])


@router.post("/search")
def search(body: SearchRequest, memory: ReaderMemory) -> SearchResult:
    """Top-k hits for a text under filters, with per-leg provenance and a receipt."""
    return memory.search(body.type, body.text, where=body.where, k=body.k, mode=body.mode,
                         related_to=body.related_to, as_of=body.as_of,
                         conversation=body.conversation)
