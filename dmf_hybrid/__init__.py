"""dmf-hybrid: a deterministic memory service for conversational AI agents.

DuckDB is the truth; a vector index (ChromaDB) is derived and rebuildable; every change is
audited in a hash-chained log.
"""

from .config import Settings
from .embeddings import Embedder, HashEmbedder, SentenceTransformerEmbedder
from .errors import (
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
from .memory import Memory
from .models import AuditEvent, AuditReport, Entity, Page, Related
from .schema import EntityType, FieldSpec, RelationSpec, TypeDef
from .search.results import Hit, LegScore, Receipt, SearchResult

__version__ = "0.1.0"

__all__ = [
    "AuditEvent",
    "AuditIntegrityError",
    "AuditReport",
    "Conflict",
    "DMFError",
    "Embedder",
    "Entity",
    "EntityType",
    "FieldSpec",
    "FilterError",
    "Forbidden",
    "HashEmbedder",
    "Hit",
    "LegScore",
    "LimitExceeded",
    "Memory",
    "NotFound",
    "Page",
    "PlanError",
    "Receipt",
    "Related",
    "RelationError",
    "RelationSpec",
    "SchemaError",
    "SearchResult",
    "SentenceTransformerEmbedder",
    "ServiceUnavailable",
    "Settings",
    "StoreLocked",
    "TypeDef",
    "Unauthorized",
    "ValidationError",
    "VersionConflict",
]
