"""Search: hybrid, vector or keyword, resolved from DuckDB, with a retrieval receipt."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ...memory import Memory
from ...models import SearchResult
from ...requests import SearchRequest
from ..deps import ReaderMemory, State, model_response

router = APIRouter(tags=["search"])


@router.post("/search", response_model=SearchResult)
async def search(body: SearchRequest, memory: ReaderMemory, state: State) -> Response:
    """Top-k hits for a text under filters, with per-leg provenance and a receipt."""
    return await state.run_search(answer, memory, body)


def answer(memory: Memory, body: SearchRequest) -> Response:
    """The response to a search request (this route's, and the fast path's of
    :mod:`dmf_hybrid._internal.api.fast_search`)."""
    return model_response(memory.search(
        body.type, body.text, where=body.where, k=body.k, mode=body.mode,
        related_to=body.related_to, as_of=body.as_of, conversation=body.conversation,
        reference_time=body.reference_time))
