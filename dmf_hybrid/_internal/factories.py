"""The embedder and the vector index a Settings names (what ``Memory.open`` builds by default)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from .config import Settings
from .embeddings import Embedder, embedder_named
from .errors import ValidationError
from .vector.base import VectorIndex
from .vector.chroma import ChromaIndex
from .vector.exact import ExactIndex


def make_embedder(settings: Settings) -> Embedder:
    """The embedder a Settings names: a bundled model, the hash embedder or a model path."""
    return embedder_named(settings.embedder, model_path=settings.model_path,
                          num_threads=settings.torch_threads or None,
                          onnx_threads=settings.onnx_threads or None,
                          onnx_workers=settings.onnx_workers,
                          onnx_cache_dir=settings.onnx_cache_dir)


def make_vector_index(settings: Settings, directory: Path | None) -> VectorIndex:
    """Chroma on disk under the memory directory, a Chroma server, or in-memory exact."""
    if settings.chroma_url:
        url = urlparse(settings.chroma_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValidationError("chroma_url must look like http://host:port",
                                  field="chroma_url")
        return ChromaIndex.http(url.hostname, url.port or 8000, ssl=url.scheme == "https")
    if directory is None:
        return ExactIndex()
    return ChromaIndex.persistent(str(directory / "chroma"))
