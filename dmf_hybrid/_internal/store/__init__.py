"""DuckDB store: tables, transactions, audit log, time travel."""

from .store import Store

__all__ = ["Store"]
