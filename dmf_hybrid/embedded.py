"""EmbeddedMemory: what the code above ``Memory`` (lifecycle, plans, tools) may use of it.

The public :class:`~dmf_hybrid.protocol.MemoryAPI` plus the in-process extras those stages
need: the tenant and settings, a read-only view of the store (:class:`~dmf_hybrid.store.reads.
Reads`), the search engine and transactions. ``Memory`` implements it; the stages import
this protocol, never ``memory.py``, so the import graph has one direction.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, Self

from .config import Settings
from .protocol import MemoryAPI
from .search.engine import SearchEngine
from .store.reads import Reads


class EmbeddedMemory(MemoryAPI, Protocol):
    """An in-process memory confined to one tenant."""

    tenant: str
    settings: Settings

    @property
    def reads(self) -> Reads:
        """The read-only view of this tenant's part of the store."""
        ...

    @property
    def engine(self) -> SearchEngine:
        """The search engine (indexer, vector and keyword legs)."""
        ...

    def transaction(self) -> AbstractContextManager[Self]:
        """All writes inside the block commit together or not at all."""
        ...
