"""Embedders: the hash test embedder, model discovery, and (slow) the real offline model."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from dmf_hybrid._internal.embeddings import (
    DEFAULT_DIM,
    DEFAULT_MODEL_ID,
    Embedder,
    HashEmbedder,
    SentenceTransformerEmbedder,
    default_model_path,
    model_id_for_path,
    read_model_dim,
)
from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["a cat sits on the mat", "quarterly tax report", "", "Ünïcode wörds ✓", "x " * 500]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def run_python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# -- HashEmbedder ----------------------------------------------------------------------------


def test_hash_embedder_shape_dtype_and_norm() -> None:
    emb = HashEmbedder(dim=64)
    assert isinstance(emb, Embedder)
    assert emb.model_id == "hash-64"
    out = emb.embed(TEXTS)
    assert out.shape == (len(TEXTS), 64)
    assert out.dtype == np.float32
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    assert emb.embed([]).shape == (0, 64)


def test_hash_embedder_is_deterministic_within_a_process() -> None:
    first = HashEmbedder(32).embed(TEXTS)
    second = HashEmbedder(32).embed(TEXTS)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first[1], HashEmbedder(32).embed([TEXTS[1]])[0])


def test_hash_embedder_is_deterministic_across_processes() -> None:
    code = f"""
        import hashlib
        from dmf_hybrid._internal.embeddings import HashEmbedder
        print(hashlib.sha256(HashEmbedder(48).embed({TEXTS!r}).tobytes()).hexdigest())
    """
    digests = {run_python(code, PYTHONHASHSEED=seed) for seed in ("0", "12345")}
    here = hashlib.sha256(HashEmbedder(48).embed(TEXTS).tobytes()).hexdigest()
    assert digests == {here}


def test_hash_embedder_empty_text_is_a_fixed_unit_vector() -> None:
    emb = HashEmbedder(16)
    empty, punctuation = emb.embed(["", "  ?! "])
    np.testing.assert_array_equal(empty, punctuation)
    assert np.linalg.norm(empty) == pytest.approx(1.0)


def test_hash_embedder_shared_words_score_higher() -> None:
    emb = HashEmbedder()
    cat, kitten, tax, cat_case = emb.embed(
        [
            "the cat sits on the mat",
            "a cat sleeping on a mat",
            "quarterly tax report for finance",
            "THE CAT SITS ON THE MAT",
        ]
    )
    assert cos(cat, kitten) > cos(cat, tax)
    assert cos(kitten, cat) > cos(kitten, tax)
    assert cos(cat, cat_case) == pytest.approx(1.0)


def test_hash_embedder_rejects_bad_input() -> None:
    emb = HashEmbedder()
    with pytest.raises(ValidationError):
        emb.embed("one string")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        emb.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        HashEmbedder(1)


# -- model discovery (no torch) --------------------------------------------------------------


def test_model_id_rule(tmp_path: Path) -> None:
    assert model_id_for_path(default_model_path()) == DEFAULT_MODEL_ID
    snapshot = tmp_path / "models--sentence-transformers--all-mpnet-base-v2" / "snapshots" / "ab12"
    assert model_id_for_path(snapshot) == "sentence-transformers/all-mpnet-base-v2"
    assert model_id_for_path(tmp_path / "acme_models" / "model") == "acme_models/model"
    assert model_id_for_path(tmp_path / "bge-small-en-v1.5") == "bge-small-en-v1.5"


def test_default_model_is_found_and_its_dim_read_without_loading() -> None:
    path = Path(default_model_path())
    assert (path / "modules.json").is_file()
    assert read_model_dim(path) == DEFAULT_DIM
    emb = SentenceTransformerEmbedder()
    assert not emb.loaded
    assert emb.dim == DEFAULT_DIM
    assert emb.model_id == DEFAULT_MODEL_ID
    assert emb.max_seq_length == 256
    assert not emb.loaded


def test_construction_and_token_counting_do_not_import_torch() -> None:
    out = run_python(
        """
        import sys
        from dmf_hybrid._internal.embeddings import SentenceTransformerEmbedder
        e = SentenceTransformerEmbedder()
        print(e.dim, e.count_tokens("hello world"), e.loaded, "torch" in sys.modules)
        """
    )
    assert out == "384 4 False False"


def test_missing_model_directory_is_service_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ServiceUnavailable):
        SentenceTransformerEmbedder(str(tmp_path / "nope"))


def test_read_model_dim_handles_dense_and_unknown(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "2_Dense").mkdir()
    (tmp_path / "config.json").write_text('{"hidden_size": 768}')
    (tmp_path / "1_Pooling" / "config.json").write_text(
        '{"word_embedding_dimension": 768, "pooling_mode_mean_tokens": true,'
        ' "pooling_mode_cls_token": true}'
    )
    (tmp_path / "2_Dense" / "config.json").write_text('{"out_features": 256}')
    modules = [
        '{"path": "", "type": "sentence_transformers.models.Transformer"}',
        '{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}',
    ]
    (tmp_path / "modules.json").write_text("[" + ",".join(modules) + "]")
    assert read_model_dim(tmp_path) == 1536
    dense = '{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}'
    (tmp_path / "modules.json").write_text("[" + ",".join([*modules, dense]) + "]")
    assert read_model_dim(tmp_path) == 256
    odd = '{"path": "", "type": "my.custom.Module"}'
    (tmp_path / "modules.json").write_text("[" + ",".join([*modules, odd]) + "]")
    assert read_model_dim(tmp_path) is None


# -- the real model --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.mark.slow
def test_real_model_loads_offline_from_the_package(model: SentenceTransformerEmbedder) -> None:
    threads = [threading.Thread(target=model.load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert model.loaded
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert model.load() is model.load()
    assert model.dim == 384
    assert model.model_id == "all-MiniLM-L6-v2"


@pytest.mark.slow
def test_real_model_vectors(model: SentenceTransformerEmbedder) -> None:
    out = model.embed(["a cat sits on the mat", "a kitten on a rug", "quarterly tax report"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    cat, kitten, tax = out
    assert cos(cat, kitten) > cos(cat, tax) + 0.2
    assert model.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_real_model_is_deterministic(model: SentenceTransformerEmbedder) -> None:
    texts = ["identical input gives identical output", "another sentence", ""]
    first = model.embed(texts)
    np.testing.assert_array_equal(first, model.embed(texts))
    alone = model.embed([texts[0]])[0]
    np.testing.assert_allclose(alone, first[0], atol=1e-5)


@pytest.mark.slow
def test_real_model_token_count_matches_its_tokenizer(model: SentenceTransformerEmbedder) -> None:
    text = "Tokenisation counts word-pieces, e.g. 'unbelievably' → several."
    expected = len(model.load().tokenizer(text, truncation=False)["input_ids"])
    assert model.count_tokens(text) == expected
    assert model.count_tokens("word " * 400) > model.max_seq_length
