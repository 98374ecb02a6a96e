"""Memory lifecycle: prompt context and deterministic summaries.

The ``Memory`` methods ``context`` and ``summarize`` delegate here; a stage gets the memory as a
:class:`~dmf_hybrid._internal.core.MemoryCore`. The rules and the event archive they rely on are the
store's (:mod:`dmf_hybrid._internal.store.rules`, :mod:`dmf_hybrid._internal.store.archive`; their
write hooks are registered by :func:`dmf_hybrid._internal.core.rule_engine`). The result types live
in :mod:`dmf_hybrid._internal.models` (the HTTP client returns them too)."""

from __future__ import annotations

from ..models import ArchiveFile, ArchiveResult, MemoryContext, SummaryResult
from ..ruledefs import RuleDef
from ..store.rules import CompiledRule, RuleEngine

__all__ = [
    "ArchiveFile",
    "ArchiveResult",
    "CompiledRule",
    "MemoryContext",
    "RuleDef",
    "RuleEngine",
    "SummaryResult",
]
