"""An ONNX Runtime build of a sentence-transformers model, int8-quantised, for fast CPU embedding.

:class:`OnnxEmbedder` runs the same model as :class:`~dmf_hybrid._internal.embeddings.
SentenceTransformerEmbedder` (by default the bundled all-MiniLM-L6-v2) without torch at run
time: the transformer is exported to ONNX from the installed weights, its matrix products are
quantised to int8 with ONNX Runtime's own tools, and mean pooling and L2 normalisation, the
sentence-transformers pipeline of the model directory, are done here in numpy.

Where and when the export happens: lazily, on the first :meth:`OnnxEmbedder.load` (the service
loads its model in the background at start, so this is at start-up), into a cache directory
``<cache_dir>/<model>-<key>/model.onnx`` whose ``key`` is a SHA-256 of the source weights and
config files and of :data:`EXPORT_RECIPE`. A different model, changed weights or a new recipe
is a new directory, never a stale file; a file is written under a temporary name and renamed,
so a crash leaves no half file, and an exclusive file lock makes concurrent processes export
it once. The export runs in a child process (it imports torch, which would otherwise stay in
the service's memory) and takes 20-45 s on 2 cores; every later start only opens the ONNX
file (no torch import, ~1 s). A cache directory rather than the package directory
(often read-only) or the memory's data directory (one model serves many memories).

The recipe: ONNX Runtime's BERT fusions (attention, layer norm, GELU), then its dynamic int8
quantisation with per-channel weights. Dynamic quantisation scales a run's activations by the
run's own range, so texts sharing a run would change each other's vectors (by up to 0.03 per
component, measured): every text is run alone, which makes its vector a function of the text
only (tested bit for bit), and costs little, since a lone text needs no padding.
Measured against the alternatives on SciFact abstracts (one run, 2 shared cores, torch 4.3
abstracts/s): fp32 ONNX 7.8/s (cosine 1.0 to torch); weight-only int8 (``MatMulNBits``, whose
rows are batch-invariant) 4.9-6.1/s, slower than fp32 on this AVX2 machine; dynamic int8
per-tensor 10.8/s but mean cosine 0.933; dynamic int8 per-channel 12.0/s, mean cosine 0.993.

Every vector is float32 with unit L2 norm, like every embedder's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ServiceUnavailable, ValidationError
from .base import OFFLINE_ENV, FloatMatrix, LazyModel, check_texts, read_json
from .sentence_transformer import default_model_path, model_id_for_path, read_model_dim

log = logging.getLogger(__name__)

#: The ``embedder`` setting that selects the ONNX build of the bundled (or ``model_path``) model.
ONNX_EMBEDDER = "minilm-onnx"
#: A long text is tokenized from a head of this many characters per token of the model's
#: length (doubled while the head has fewer tokens; see ``OnnxEmbedder._encode_heads``).
HEAD_CHARS_PER_TOKEN = 16
#: Suffix of an ONNX build's ``model_id`` (``all-MiniLM-L6-v2`` -> ``all-MiniLM-L6-v2-onnx-int8``).
MODEL_ID_SUFFIX = "-onnx-int8"
#: Changing how a model is exported or quantised changes this, and so the cache key.
EXPORT_RECIPE = "torch.onnx opset 17 + ORT bert fusions + quantize_dynamic QInt8 per-channel v2"
#: Intra-op threads of ONNX Runtime: one, as for torch (see ``Settings.onnx_threads``).
DEFAULT_THREADS = 1
#: Texts of one call run at once (see ``Settings.onnx_workers``).
DEFAULT_WORKERS = 2
#: Files of a model directory whose bytes decide the exported model.
_SOURCE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "modules.json",
                 "sentence_bert_config.json", "1_Pooling/config.json")
_ONNX_FILE = "model.onnx"
_BUILT = "int8.onnx"
#: Bound on one export (20-45 s measured on a shared 2-core machine).
EXPORT_TIMEOUT = 900.0
#: How often a running export logs that it is still at work.
PROGRESS_SECONDS = 10.0
_MANIFEST = "manifest.json"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir() -> Path:
    """``~/.cache/dmf-hybrid/onnx``: where exported models live unless a setting says else."""
    return Path.home() / ".cache" / "dmf-hybrid" / "onnx"


def _missing(package: str) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the ONNX embedder needs the {package} package, which is not installed: install "
        f"it with `pip install onnx onnxruntime tokenizers` (or `pip install -e .`)",
        package=package)


def source_key(model_path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of the files that decide the export, and of the export recipe."""
    root = Path(model_path)
    digest = hashlib.sha256(EXPORT_RECIPE.encode())
    for name in _SOURCE_FILES:
        path = root / name
        if not path.is_file():
            continue
        digest.update(f"\0{name}\0".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_pipeline(model_path: str | os.PathLike[str]) -> None:
    """Raise ServiceUnavailable unless the directory is Transformer + mean Pooling (+ Normalize),
    the only sentence-transformers pipeline :class:`OnnxEmbedder` reproduces."""
    root = Path(model_path)
    modules = read_json(root / "modules.json")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules] if isinstance(
        modules, list) else []
    pooling = next((m for m in modules or [] if str(m.get("type", "")).endswith("Pooling")),
                   None) if kinds else None
    config = read_json(root / str(pooling.get("path", "")) / "config.json") if pooling else None
    mean_only = isinstance(config, dict) and config.get("pooling_mode_mean_tokens") and not any(
        config.get(k) for k in config if k.startswith("pooling_mode_") and
        k != "pooling_mode_mean_tokens")
    if kinds[:2] != ["Transformer", "Pooling"] or set(kinds[2:]) - {"Normalize"} or not mean_only:
        raise ServiceUnavailable(
            f"the ONNX embedder supports sentence-transformers models made of a Transformer, "
            f"mean Pooling and Normalize; {root} has {kinds or 'no modules.json'}",
            model_path=str(root))


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive lock between processes (and threads) on ``lock_path``."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def export_onnx(model_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str]) -> Path:
    """The int8 ONNX file of a model directory, exported into ``cache_dir`` unless it is there.

    Safe to call from several threads and processes at once: one exports, the others wait
    and then find the file.
    """
    source = Path(model_path)
    check_pipeline(source)
    key = source_key(source)
    slug = model_id_for_path(source).replace("/", "--")
    target_dir = Path(cache_dir) / f"{slug}-{key[:16]}"
    target = target_dir / _ONNX_FILE
    if target.is_file():
        return target
    with _exclusive(Path(cache_dir) / f".{slug}-{key[:16]}.lock"):
        if target.is_file():  # another process finished it while we waited
            return target
        target_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=target_dir, prefix=".export-") as work:
            built = _build_in_child(source, Path(work))
            manifest = {
                "source": str(source), "source_sha256": key, "recipe": EXPORT_RECIPE,
                "versions": _versions(), "seconds": round(time.perf_counter() - start, 1),
            }
            (target_dir / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n",
                                                encoding="utf-8")
            os.replace(built, target)  # atomic: the file is whole or absent
        log.info("exported %s to %s in %.1f s", source, target, time.perf_counter() - start)
    return target


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "onnx", "onnxruntime", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def _build_in_child(source: Path, work: Path) -> Path:
    """:func:`_build` in a child Python, so torch is never imported by the caller; logs its
    progress every PROGRESS_SECONDS (a first start waits on it)."""
    log.info("building the int8 ONNX model of %s: once per model, 20-45 s on 2 cores",
             source.name)
    start = time.monotonic()
    try:
        with subprocess.Popen([sys.executable, "-m", __name__, str(source), str(work)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as child:
            while True:
                try:
                    stdout, stderr = child.communicate(timeout=PROGRESS_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - start
                    if elapsed > EXPORT_TIMEOUT:
                        child.kill()
                        child.communicate()
                        raise
                    log.info("building the ONNX model: %.0f s so far", elapsed)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceUnavailable(f"exporting {source} to ONNX failed: {exc}",
                                 model_path=str(source)) from exc
    built = work / _BUILT
    if child.returncode != 0 or not built.is_file():
        lines = (stderr or stdout).strip().splitlines()
        raise ServiceUnavailable(
            f"exporting {source} to ONNX failed: {lines[-1] if lines else child.returncode}",
            model_path=str(source))
    return built


def _build(source: Path, work: Path) -> Path:
    """Export fp32 with torch, fuse, quantise; the path of the int8 file inside ``work``."""
    os.environ.update(OFFLINE_ENV)  # read by huggingface_hub at import time
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers import optimizer
    except ImportError as exc:
        raise _missing(exc.name or "onnxruntime") from exc
    try:
        import torch
        from transformers import AutoConfig, AutoModel
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:  # only the export needs them
        raise ServiceUnavailable(
            "exporting the ONNX model needs torch and transformers (once; later starts do "
            "not): install them with `pip install torch transformers`",
            package=exc.name or "torch") from exc

    class Hidden(torch.nn.Module):
        """The transformer's last hidden state; pooling is done in numpy, per row."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    no_progress_bars: Any = transformers_logging.disable_progress_bar
    no_progress_bars()
    config = AutoConfig.from_pretrained(source, local_files_only=True)
    # eager attention traces to plain ops the fusions recognise; sdpa bakes in a branch
    model = AutoModel.from_pretrained(source, local_files_only=True,
                                      attn_implementation="eager").eval()
    # traced with a padded row, so the mask arithmetic is part of the graph
    ids = torch.tensor([[101, 7592, 2088, 2003, 102, 0], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).long()
    fp32 = work / "fp32.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about branches the mask makes constant
        torch.onnx.export(
            Hidden(model), (ids, mask, torch.zeros_like(ids)), str(fp32), dynamo=False,
            input_names=list(_INPUTS), output_names=["last_hidden_state"], opset_version=17,
            dynamic_axes={name: {0: "batch", 1: "sequence"}
                          for name in (*_INPUTS, "last_hidden_state")})
    # fuse attention, layer norms and GELUs into ONNX Runtime's BERT kernels
    fused = optimizer.optimize_model(
        str(fp32), model_type="bert", num_heads=int(config.num_attention_heads),
        hidden_size=int(config.hidden_size))
    fused_path = work / "fused.onnx"
    fused.save_model_to_file(str(fused_path))
    # int8 weights with a scale per output channel; activations int8 with a scale per run
    out = work / _BUILT
    quantize_dynamic(str(fused_path), str(out), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return out


class OnnxEmbedder(LazyModel):
    """The int8 ONNX build of a sentence-transformers model (default: the bundled MiniLM).

    ``model_id`` is the source model's ID plus ``-onnx-int8``: its vectors are close to the
    torch model's (cosine > 0.999) but not equal, so switching is the audited re-embed.
    ``num_threads`` is ONNX Runtime's intra-op thread count (threads do not spin while
    waiting, so a busy core is not fought over). ``workers`` is how many texts of one call
    run at once, each still alone (the same bits as one after another): a call with several
    texts (an ingest, a re-embed) uses that many cores, a single query one. Nothing is
    loaded, and no ONNX package imported, until the first :meth:`embed` or :meth:`load`.
    """

    #: A text's vector is the same bits alone and in any batch (see the module doc).
    batch_invariant = True
    #: Each text runs alone, so queuing queries into shared calls only serialises them:
    #: bench_http measured 66 req/s with the query batcher against 80 without, 16 clients.
    gains_from_batching = False

    def __init__(self, model_path: str | None = None, *,
                 cache_dir: str | os.PathLike[str] | None = None,
                 num_threads: int | None = DEFAULT_THREADS, workers: int = DEFAULT_WORKERS,
                 model_id: str | None = None) -> None:
        path = Path(model_path) if model_path is not None else Path(default_model_path())
        if not path.is_dir():
            raise ServiceUnavailable(
                f"embedding model directory {str(path)!r} does not exist", model_path=str(path))
        if num_threads is not None and num_threads < 0:
            raise ValidationError("num_threads must be 0 (the runtime's default) or more",
                                  field="num_threads")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValidationError("workers must be an integer of 1 or more", field="workers")
        self.workers = workers
        self.model_path = str(path)
        self.model_id = model_id or model_id_for_path(path) + MODEL_ID_SUFFIX
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.num_threads = num_threads
        self._declared_dim = read_model_dim(path)
        config = read_json(path / "sentence_bert_config.json")
        self._max_len = int(config["max_seq_length"]) if isinstance(config, dict) and isinstance(
            config.get("max_seq_length"), int) else 512
        self._tokenizer: Any = None
        self._cutting: Any = None
        self._feeds: tuple[str, ...] = ()
        self.onnx_path: Path | None = None
        super().__init__()

    @property
    def dim(self) -> int:
        """The output dimension (from the model's config files)."""
        if self._declared_dim is None:
            raise ServiceUnavailable(f"model {self.model_id} does not report its dimension")
        return self._declared_dim

    @property
    def max_seq_length(self) -> int:
        """Tokens per text the model reads; longer texts are truncated."""
        return self._max_len

    def _open_model(self) -> Any:
        """The ONNX Runtime session (exporting the model on first use; see the module doc)."""
        start = time.perf_counter()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise _missing("onnxruntime") from exc
        self.onnx_path = export_onnx(self.model_path, self.cache_dir)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if self.num_threads:
            options.intra_op_num_threads = self.num_threads
        # idle threads sleep instead of spinning: on a shared 2-core machine spinning threads
        # steal the core the service's Python needs (the torch_threads lesson)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(str(self.onnx_path), options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # a damaged cache file or an incompatible runtime
            raise ServiceUnavailable(
                f"cannot load the ONNX model {self.onnx_path}: {exc}; delete the file to "
                f"export it again", model_path=str(self.onnx_path)) from exc
        self._feeds = tuple(i.name for i in session.get_inputs())
        self._get_tokenizer()
        log.info("loaded ONNX embedding model %s from %s in %.1f s", self.model_id,
                 self.onnx_path, time.perf_counter() - start)
        return session

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise _missing("tokenizers") from exc
            tokenizer_file = Path(self.model_path) / "tokenizer.json"
            if not tokenizer_file.is_file():
                raise ServiceUnavailable(f"{self.model_path} has no tokenizer.json",
                                         model_path=self.model_path)
            counting = Tokenizer.from_file(str(tokenizer_file))
            counting.no_padding()
            counting.no_truncation()
            # the model's own rule: keep the head, special tokens included in the limit
            cutting = Tokenizer.from_file(str(tokenizer_file))
            cutting.no_padding()
            cutting.enable_truncation(self._max_len)
            self._cutting = cutting
            self._tokenizer = counting
        return self._tokenizer

    @property
    def tokenizer(self) -> Any:
        """The model's ``tokenizers.Tokenizer`` (no truncation, no padding)."""
        return self._get_tokenizer()

    def count_tokens(self, text: str) -> int:
        """Tokens the model would see for ``text``, special tokens included, before
        truncation to :attr:`max_seq_length`."""
        return len(self._get_tokenizer().encode(text, add_special_tokens=True).ids)

    def embed(self, texts: list[str]) -> FloatMatrix:
        """An ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        items = check_texts(texts)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        if not items:
            return out
        session = self.load()
        self._get_tokenizer()
        # one text per run: int8 activations are scaled per run, so a text that shared a run
        # would get a vector that depends on its company (and padding would cost as much as
        # batching gains at these lengths: 16 queries in one run took 0.8x the time of 16 runs)
        encodings = self._encode_heads(items)

        def embed_row(row: int) -> None:
            out[row] = self._run(session, [(encodings[row].ids, encodings[row].type_ids)])[0]

        workers = min(self.workers, len(items))
        if workers == 1:
            for row in range(len(items)):
                embed_row(row)
        else:  # ONNX Runtime releases the GIL while it runs; a session serves many threads
            with ThreadPoolExecutor(workers, thread_name_prefix="dmf-onnx") as pool:
                for _ in pool.map(embed_row, range(len(items))):
                    pass  # re-raises the first failure
        return out

    def _encode_heads(self, texts: list[str]) -> list[Any]:
        """The truncated encodings of ``texts``, tokenizing only as much of a long text as its
        first :attr:`max_seq_length` tokens need.

        Tokenizing a whole text of 100 KB to keep 256 tokens cost time and left ~130 MB of
        the tokenizer's allocations in the process (``evaluation/bench_keyword_memory.py``).
        A head of the text cut at an ASCII whitespace ends between two words, and the
        pre-tokenizer splits at whitespace, so the head's tokens are the text's first tokens:
        when the head alone fills the model's length, its encoding is the text's. Otherwise
        a head twice as long is tried, up to the whole text.
        """
        encodings = self._cutting.encode_batch([self._head(t, HEAD_CHARS_PER_TOKEN * self._max_len)
                                                for t in texts])
        for row, text in enumerate(texts):
            chars = HEAD_CHARS_PER_TOKEN * self._max_len
            while len(encodings[row].ids) < self._max_len and chars < len(text):
                chars *= 2
                encodings[row] = self._cutting.encode(self._head(text, chars))
        return encodings

    @staticmethod
    def _head(text: str, chars: int) -> str:
        """``text`` up to the last ASCII whitespace within its first ``chars`` characters (the
        whole text if it is that short or has none there)."""
        if len(text) <= chars:
            return text
        cut = max(text.rfind(space, 0, chars + 1) for space in " \t\n\r")
        return text[:cut] if cut > 0 else text

    def _run(self, session: Any, rows: list[tuple[list[int], list[int]]]) -> FloatMatrix:
        width = max(len(ids) for ids, _ in rows)
        feeds = {name: np.zeros((len(rows), width), dtype=np.int64) for name in _INPUTS}
        for r, (ids, types) in enumerate(rows):
            feeds["input_ids"][r, :len(ids)] = ids
            feeds["attention_mask"][r, :len(ids)] = 1
            feeds["token_type_ids"][r, :len(ids)] = types
        hidden = session.run(None, {name: feeds[name] for name in self._feeds})[0]
        vectors = np.empty((len(rows), hidden.shape[2]), dtype=np.float32)
        for r, (ids, _) in enumerate(rows):
            mean = hidden[r, :len(ids)].astype(np.float64).mean(axis=0)  # this row's tokens only
            norm = float(np.linalg.norm(mean))
            vectors[r] = mean / norm if norm > 0 else mean
        return vectors


__all__ = ["DEFAULT_THREADS", "DEFAULT_WORKERS", "EXPORT_RECIPE", "MODEL_ID_SUFFIX",
           "ONNX_EMBEDDER", "OnnxEmbedder", "check_pipeline", "default_cache_dir", "export_onnx",
           "source_key"]


# the export's child process: python -m dmf_hybrid._internal.embeddings.onnx_int8
if __name__ == "__main__":
    # the parent reports the last line of this process's stderr
    logging.basicConfig(format="%(message)s")
    try:
        _build(Path(sys.argv[1]), Path(sys.argv[2]))
    except ServiceUnavailable as error:
        log.error("%s", error.message)
        sys.exit(1)
