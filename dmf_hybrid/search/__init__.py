"""Search: planner, keyword leg, fusion, resolution."""

from .results import Hit, LegScore, Receipt, SearchResult

__all__ = ["Hit", "LegScore", "Receipt", "SearchResult"]
