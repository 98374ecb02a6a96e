"""Liveness and readiness (no API key needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ...wire import ErrorBody, HealthPublic, ReadyPublic
from ..deps import State

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> HealthPublic:
    """Alive: the process answers (always 200)."""
    return HealthPublic()


@router.get("/readyz", response_model=ReadyPublic, responses={503: {"model": ErrorBody}})
def readyz(state: State) -> Any:
    """Ready (200) when the model is loaded and the outbox drained; 503 says what is missing."""
    report = state.readiness()
    if report["ready"]:
        return ReadyPublic(**report)
    return JSONResponse(status_code=503, content={
        "error": "unavailable", "message": "not ready: " + "; ".join(report["problems"]),
        "details": report})
