"""Vector indexes: the VectorIndex protocol, ChromaIndex (ChromaDB) and ExactIndex (numpy).

Importing this package does not import chromadb; ChromaIndex imports it when built.
"""

from __future__ import annotations

from dmf_hybrid._internal.vector.base import (
    Metadata,
    MetadataValue,
    VectorIndex,
    VectorRecord,
    check_collection_name,
    collection_name,
)
from dmf_hybrid._internal.vector.chroma import ChromaIndex
from dmf_hybrid._internal.vector.exact import ExactIndex

__all__ = [
    "ChromaIndex",
    "ExactIndex",
    "Metadata",
    "MetadataValue",
    "VectorIndex",
    "VectorRecord",
    "check_collection_name",
    "collection_name",
]
