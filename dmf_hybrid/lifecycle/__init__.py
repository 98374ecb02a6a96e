"""Memory lifecycle: prompt context, deterministic summaries, event archiving and rules.

``install(store)`` (called once by ``Memory.open``) loads the store's rules and registers the
write hooks that run inside every write transaction: erasure reaching the event archive
(:mod:`dmf_hybrid.store.archive`) and rule evaluation (:mod:`dmf_hybrid.store.rules`). The
``Memory`` methods ``context``, ``summarize``, ``open_constraints`` and ``define_rule``
delegate here.
Their result types live in :mod:`dmf_hybrid.models` (the HTTP client returns them too).
"""

from __future__ import annotations

import threading
import weakref

from ..models import ArchiveFile, ArchiveResult, MemoryContext, SummaryResult
from ..ruledefs import RuleDef
from ..store import Store
from ..store.archive import redaction_hook
from ..store.rules import CompiledRule, RuleEngine

__all__ = [
    "ArchiveFile",
    "ArchiveResult",
    "CompiledRule",
    "MemoryContext",
    "RuleDef",
    "RuleEngine",
    "SummaryResult",
    "install",
]

_ENGINES: weakref.WeakKeyDictionary[Store, RuleEngine] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def install(store: Store) -> RuleEngine:
    """The store's rule engine, loading it and registering the write hooks the first time."""
    with _LOCK:
        engine = _ENGINES.get(store)
        if engine is None:
            engine = RuleEngine(store)
            store.write_hooks.append(redaction_hook(store))
            store.write_hooks.append(engine.on_write)
            _ENGINES[store] = engine
        return engine

