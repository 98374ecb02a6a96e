"""Tests of the memory lifecycle (context, summaries, archive, rules); shared helpers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dmf_hybrid import Entity, HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex

TRAVEL = Path(__file__).resolve().parents[2] / "indexes" / "travel.toml"
#: An entity ID as the travel domain derives them: <Type>_<20 hex>
DERIVED_ID = re.compile(r"\b[A-Z][A-Za-z0-9]*_[0-9a-f]{20}\b")


def open_travel(path: Path | None) -> Memory:
    """A memory (test embedder, exact vectors) with the travel types and rules loaded."""
    mem = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex())
    mem.load_definitions(TRAVEL)
    return mem


def trip(mem: Memory, budget: float = 1000.0, destination: str = "Shanghai",
         **extra: Any) -> Entity:
    """A trip of user ann."""
    return mem.create("Trip", {"user": "ann", "destination": destination, "budget": budget,
                               "start_date": "2024-05-01", **extra})


def poi(mem: Memory, name: str, cost: float = 0.0, **extra: Any) -> Entity:
    """A point of interest in Shanghai."""
    return mem.create("PointOfInterest", {"name": name, "city": "Shanghai",
                                          "estimated_cost": cost, **extra})


def known_ids(mem: Memory) -> set[str]:
    """Every entity ID the store has ever issued in the memory's tenant."""
    return {r[0] for r in mem._store.db.fetchall(
        "SELECT id FROM entity_index WHERE tenant = ?", [mem.tenant])}


def constraints(mem: Memory, subject: str) -> dict[str, dict[str, Any]]:
    """The constraints on ``subject`` (any status) by rule name."""
    page = mem.query("Constraint", {"subject": subject}, limit=100)
    return {e.fields()["rule"]: {"id": e.id, **e.fields()} for e in page.items}


def rule_events(mem: Memory, since_seq: int = 0) -> list[dict[str, Any]]:
    """The meta of every rule event after ``since_seq``."""
    return [dict(e.meta or {}) for e in mem.events(since_seq, limit=10_000) if e.op == "rule"]
