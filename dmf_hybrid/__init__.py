"""dmf-hybrid: a deterministic memory service for conversational AI agents.

DuckDB is the truth; a vector index (ChromaDB) is derived and rebuildable; every change is
audited in a hash-chained log.

``pip install dmf-hybrid`` is the HTTP client (``MemoryClient``, pydantic and httpx); the
embedded ``Memory``, its embedders and the server come with ``pip install 'dmf-hybrid[server]'``.
Those names are imported on first use, so ``from dmf_hybrid import MemoryClient`` needs only
the client's dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._internal import SERVER_EXTRA_HINT
from ._internal.client import MemoryClient
from ._internal.errors import (
    AuditIntegrityError,
    Conflict,
    DMFError,
    FilterError,
    Forbidden,
    LimitExceeded,
    NotFound,
    PlanError,
    RelationError,
    SchemaError,
    ServiceUnavailable,
    StoreLocked,
    Unauthorized,
    ValidationError,
    VersionConflict,
)
from ._internal.models import (
    ArchiveFile,
    ArchiveResult,
    AuditEvent,
    AuditReport,
    BundleManifest,
    ContextChange,
    ContextEntity,
    ContextHit,
    ContextLink,
    ContextTurn,
    Entity,
    EntityDecoder,
    Hit,
    LegScore,
    MemoryContext,
    Page,
    PlanOutcome,
    Receipt,
    ReconcileCounts,
    ReindexCounts,
    Related,
    RuleInfo,
    SearchResult,
    SnapshotManifest,
    SummaryResult,
)
from ._internal.protocol import MemoryAPI
from ._internal.ruledefs import RuleDef
from ._internal.schema import EntityType, FieldSpec, RelationSpec, TypeDef
from ._internal.version import __version__ as __version__

if TYPE_CHECKING:
    from ._internal.config import Settings
    from ._internal.embeddings import Embedder, HashEmbedder, SentenceTransformerEmbedder
    from ._internal.memory import Memory

#: Names that need the ``server`` extra (DuckDB, Chroma, numpy, pydantic-settings; torch for
#: the real model),
#: and the module each lives in: imported on first use (see :func:`__getattr__`).
_SERVER_NAMES = {
    "Embedder": "embeddings",
    "HashEmbedder": "embeddings",
    "Memory": "memory",
    "SentenceTransformerEmbedder": "embeddings",
    "Settings": "config",
}


def __getattr__(name: str) -> Any:
    """The embedded names, imported lazily (an optional extra), with a hint when missing."""
    module_name = _SERVER_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"._internal.{module_name}", __name__)
    except ImportError as exc:
        if (exc.name or "").startswith(__name__):
            raise  # a bug of ours, not a missing extra
        raise ImportError(
            f"dmf_hybrid.{name} is part of the embedded memory and server, which need "
            f"packages this installation lacks ({exc.name or exc}): {SERVER_EXTRA_HINT}",
            name=exc.name) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value

__all__ = [
    "ArchiveFile",
    "ArchiveResult",
    "AuditEvent",
    "AuditIntegrityError",
    "AuditReport",
    "BundleManifest",
    "Conflict",
    "ContextChange",
    "ContextEntity",
    "ContextHit",
    "ContextLink",
    "ContextTurn",
    "DMFError",
    "Embedder",
    "Entity",
    "EntityDecoder",
    "EntityType",
    "FieldSpec",
    "FilterError",
    "Forbidden",
    "HashEmbedder",
    "Hit",
    "LegScore",
    "LimitExceeded",
    "Memory",
    "MemoryAPI",
    "MemoryClient",
    "MemoryContext",
    "NotFound",
    "Page",
    "PlanError",
    "PlanOutcome",
    "Receipt",
    "ReconcileCounts",
    "ReindexCounts",
    "Related",
    "RelationError",
    "RelationSpec",
    "RuleDef",
    "RuleInfo",
    "SchemaError",
    "SearchResult",
    "SentenceTransformerEmbedder",
    "ServiceUnavailable",
    "Settings",
    "SnapshotManifest",
    "StoreLocked",
    "SummaryResult",
    "TypeDef",
    "Unauthorized",
    "ValidationError",
    "VersionConflict",
]
