"""The Embedder protocol and what every embedder shares.

Every embedder returns float32 rows of unit L2 norm, so cosine similarity is a dot product.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError

logger = logging.getLogger(__name__)

#: Texts per forward pass.
DEFAULT_BATCH_SIZE = 64
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

FloatMatrix = npt.NDArray[np.float32]


class LazyModel:
    """The load-once part of a model-backed embedder: the model opens on first use, once,
    under a lock (concurrent first callers wait for the one load).

    A subclass sets ``model_id`` and implements :meth:`_open_model`; ``load_seconds`` is how
    long opening took (None before).
    """

    model_id: str

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: Any = None
        self.load_seconds: float | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, loaded={self.loaded})"

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (readiness, as opposed to liveness)."""
        return self._handle is not None

    def load(self) -> Any:
        """The loaded model (opening it on first call, offline)."""
        handle = self._handle
        if handle is not None:
            return handle
        with self._lock:
            if self._handle is None:
                start = time.perf_counter()
                self._handle = self._open_model()
                self.load_seconds = time.perf_counter() - start
            return self._handle

    def _open_model(self) -> Any:
        raise NotImplementedError


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors; ``model_id`` is stored with each vector."""

    @property
    def model_id(self) -> str:
        """Stable name of the model, stored with every cached vector."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: list[str]) -> FloatMatrix:
        """An ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or a ValidationError naming the first text that is not a string."""
    if isinstance(texts, str):
        raise ValidationError("embed() takes a list of texts, not one string", field="texts")
    out = list(texts)
    for pos, text in enumerate(out):
        if not isinstance(text, str):
            raise ValidationError(
                f"text at position {pos} must be a string, not {type(text).__name__}",
                field="texts",
                position=pos,
            )
    return out


def read_json(path: Path) -> Any:
    """The JSON in a file, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def package_dir(package: str, subdir: str, pip_name: str) -> str:
    """The directory ``subdir`` of an installed package, located without importing it;
    ServiceUnavailable naming the PyPI package when it is missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ServiceUnavailable(f"the model is not installed: install the PyPI package "
                                 f"{pip_name}", package=pip_name)
    path = Path(next(iter(spec.submodule_search_locations))) / subdir
    if not path.is_dir():
        raise ServiceUnavailable(f"the package {pip_name} is installed but has no {subdir} "
                                 f"at {path}; reinstall it", package=pip_name)
    return str(path)


def embed_queries(embedder: Embedder, texts: list[str]) -> FloatMatrix:
    """Query vectors: the embedder's ``embed_queries`` where it has one (E5), else ``embed``."""
    method = getattr(embedder, "embed_queries", None)
    if callable(method):
        return np.asarray(method(texts), dtype=np.float32)
    return np.asarray(embedder.embed(texts), dtype=np.float32)
