"""The int8 ONNX build of the bundled model: export, cache, fidelity, batch invariance."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError as PydanticValidationError

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.embeddings import (
    SentenceTransformerEmbedder,
    default_model_path,
    onnx_int8,
)
from dmf_hybrid._internal.embeddings.onnx_int8 import (
    MODEL_ID_SUFFIX,
    ONNX_EMBEDDER,
    OnnxEmbedder,
    check_pipeline,
    export_onnx,
    source_key,
)
from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError
from dmf_hybrid._internal.factories import make_embedder
from tests.conftest import define_travel

ROOT = Path(__file__).resolve().parent.parent
TOPICS = ("a cat sits on the mat", "quarterly tax report for the board",
          "Shanghai Museum has a fine collection of ancient bronzes",
          "上海博物馆的古代青铜器收藏", "how do vaccines train the immune system?",
          "cheap flights to Lisbon in May", "Ünïcode wörds ✓ and emoji 🎉",
          "mitochondria are the powerhouse of the cell", "", "   ")


def sample_texts() -> list[str]:
    """Varied lengths: empty, short, sentences, a paragraph, and one past the token limit."""
    texts = list(TOPICS)
    for i in range(30):
        words = " ".join(TOPICS[(i + j) % 8] for j in range(1 + i % 6))
        texts.append(f"{i}: {words}")
    texts.append("word " * 400)
    return texts


def run_python(code: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ),
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


# ---------------------------------------------------------------- no model needed


def test_construction_imports_no_runtime_and_names_its_own_model_id() -> None:
    out = run_python("""
        import sys
        from dmf_hybrid._internal.embeddings.onnx_int8 import OnnxEmbedder
        e = OnnxEmbedder()
        print(e.model_id, e.dim, e.max_seq_length, e.loaded, e.count_tokens("hello world"),
              "onnxruntime" in sys.modules, "torch" in sys.modules)
    """)
    assert out == "all-MiniLM-L6-v2-onnx-int8 384 256 False 4 False False"


def test_the_setting_selects_it_with_its_cache_and_threads(tmp_path: Path) -> None:
    embedder = make_embedder(Settings(embedder=ONNX_EMBEDDER, onnx_cache_dir=tmp_path,
                                      onnx_threads=2))
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.cache_dir == tmp_path and embedder.num_threads == 2
    assert embedder.model_id == "all-MiniLM-L6-v2" + MODEL_ID_SUFFIX
    default = make_embedder(Settings(embedder=ONNX_EMBEDDER))
    assert isinstance(default, OnnxEmbedder) and default.num_threads == 1
    assert default.workers == 2
    one_by_one = make_embedder(Settings(embedder=ONNX_EMBEDDER, onnx_workers=1))
    assert isinstance(one_by_one, OnnxEmbedder) and one_by_one.workers == 1
    with pytest.raises(PydanticValidationError, match="onnx_workers"):
        Settings(onnx_workers=0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValidationError, match="workers"):
            OnnxEmbedder(workers=bad)  # type: ignore[arg-type]


def test_token_counts_match_the_torch_embedder() -> None:
    onnx_model, torch_model = OnnxEmbedder(), SentenceTransformerEmbedder()
    for text in sample_texts():
        assert onnx_model.count_tokens(text) == torch_model.count_tokens(text)


def test_a_long_text_is_tokenized_from_its_head_with_the_same_tokens() -> None:
    """Only a head of a long text is tokenized; its tokens are the whole text's, whatever the
    text: words, long runs without a break, CJK without spaces, newlines, accents."""
    import random

    model = OnnxEmbedder()
    assert model.tokenizer is not None  # loads both tokenizers, not the model
    rng = random.Random(11)
    pieces = ["word", "Zürich", "上海博物馆的古代青铜器", "x" * 300, "\n", "\t", "  ", "—", "🎉",
              "don't", "e-mail", "3.14", "ab" * 60]
    texts = [" ".join(rng.choice(pieces) for _ in range(rng.randint(0, 3000)))
             for _ in range(40)]
    texts += ["y" * 100_000, "上海" * 30_000, "a " * 5000, "q" * 5000 + " " + "word " * 400]
    whole = [model._cutting.encode(t).ids for t in texts]
    assert [e.ids for e in model._encode_heads(texts)] == whole
    assert OnnxEmbedder._head("one two three", 8) == "one two"
    assert OnnxEmbedder._head("onetwothree", 8) == "onetwothree"


def copy_model(tmp_path: Path) -> Path:
    target = tmp_path / "copied-model"
    shutil.copytree(default_model_path(), target)
    return target


def test_only_mean_pooled_models_are_accepted(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    check_pipeline(model)
    pooling = model / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False,
                                   "pooling_mode_cls_token": True}))
    with pytest.raises(ServiceUnavailable, match="mean Pooling"):
        check_pipeline(model)
    with pytest.raises(ServiceUnavailable, match="mean Pooling"):
        export_onnx(model, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before any work
    with pytest.raises(ServiceUnavailable):
        OnnxEmbedder(str(tmp_path / "no-such-model"))


def test_the_cache_key_follows_the_weights(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    before = source_key(model)
    assert before == source_key(default_model_path())
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert source_key(model) != before


@pytest.mark.slow  # the child imports torch and ONNX Runtime's tools (5-25 s here)
def test_an_export_says_how_it_is_going_and_why_it_failed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # a real child process whose model directory holds no weights: it fails after its imports
    monkeypatch.setattr(onnx_int8, "PROGRESS_SECONDS", 0.2)
    caplog.set_level(logging.INFO, logger=onnx_int8.__name__)
    (tmp_path / "work").mkdir()
    with pytest.raises(ServiceUnavailable) as info:
        onnx_int8._build_in_child(tmp_path / "no-model", tmp_path / "work")
    assert info.value.message.startswith(f"exporting {tmp_path / 'no-model'} to ONNX failed: ")
    logged = [r.getMessage() for r in caplog.records]
    assert logged[0].startswith("building the int8 ONNX model of no-model: once per model")
    assert any(m.startswith("building the ONNX model: ") and m.endswith(" s so far")
               for m in logged[1:]), logged


def test_without_onnxruntime_loading_says_what_to_install() -> None:
    out = run_python("""
        import sys
        sys.modules["onnxruntime"] = None  # as if it were not installed
        from dmf_hybrid._internal.errors import ServiceUnavailable
        from dmf_hybrid._internal.embeddings.onnx_int8 import OnnxEmbedder
        try:
            OnnxEmbedder().embed(["hello"])
        except ServiceUnavailable as exc:
            print(exc.message)
    """)
    assert "onnxruntime" in out and "pip install" in out


# ---------------------------------------------------------------- the exported model


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A cache directory with the model exported by another process, and what it printed."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    out = run_python(f"""
        import sys
        from dmf_hybrid._internal.embeddings.onnx_int8 import OnnxEmbedder
        e = OnnxEmbedder(cache_dir={str(cache)!r})
        e.embed(["hello"])
        print(e.loaded, "torch" in sys.modules, "transformers" in sys.modules)
    """, timeout=900)
    return cache, out


@pytest.fixture(scope="module")
def onnx_cache(exported: tuple[Path, str]) -> Path:
    return exported[0]


@pytest.mark.slow
def test_the_export_keeps_torch_out_of_the_process(exported: tuple[Path, str]) -> None:
    assert exported[1] == "True False False"


@pytest.fixture(scope="module")
def onnx_model(onnx_cache: Path) -> Iterator[OnnxEmbedder]:
    yield OnnxEmbedder(cache_dir=onnx_cache)


@pytest.fixture(scope="module")
def torch_model() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.mark.slow
def test_it_exports_once_atomically_and_reuses_the_file(onnx_model: OnnxEmbedder,
                                                        onnx_cache: Path) -> None:
    threads = [threading.Thread(target=onnx_model.load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert onnx_model.loaded and onnx_model.onnx_path is not None
    path = onnx_model.onnx_path
    key = source_key(onnx_model.model_path)
    assert path.parent.name == f"all-MiniLM-L6-v2-{key[:16]}"
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["source_sha256"] == key
    # nothing half-written is left beside it
    assert sorted(p.name for p in path.parent.iterdir()) == ["manifest.json", "model.onnx"]
    stamp = path.stat().st_mtime_ns
    other = OnnxEmbedder(cache_dir=onnx_cache)
    other.load()
    assert other.onnx_path == path and path.stat().st_mtime_ns == stamp  # not rebuilt


@pytest.mark.slow
def test_vectors_agree_with_the_torch_model(onnx_model: OnnxEmbedder,
                                            torch_model: SentenceTransformerEmbedder) -> None:
    texts = sample_texts()
    ours = onnx_model.embed(texts)
    theirs = torch_model.embed(texts)
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    cosine = (ours.astype(np.float64) * theirs).sum(axis=1)
    assert cosine.min() > 0.97, cosine.min()  # the empty text; sentences > 0.985
    assert cosine.mean() > 0.99, cosine.mean()
    assert onnx_model.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_a_vector_is_the_same_bits_alone_and_in_any_batch(onnx_model: OnnxEmbedder) -> None:
    texts = sample_texts()
    alone = np.vstack([onnx_model.embed([t]) for t in texts])
    rng = np.random.default_rng(5)
    for size in (2, 7, len(texts)):
        order = rng.permutation(len(texts))
        for at in range(0, len(texts), size):
            part = order[at:at + size]
            np.testing.assert_array_equal(onnx_model.embed([texts[i] for i in part]),
                                          alone[part])
    # texts past the limit are cut the way the tokenizer cuts: the same first tokens
    np.testing.assert_array_equal(onnx_model.embed(["word " * 400]),
                                  onnx_model.embed(["word " * 300]))


@pytest.mark.slow
def test_the_texts_of_a_call_run_on_its_workers_with_the_same_bits(onnx_cache: Path) -> None:
    texts = sample_texts()
    one_by_one = OnnxEmbedder(cache_dir=onnx_cache, workers=1)
    two = OnnxEmbedder(cache_dir=onnx_cache, workers=2)
    ran_on: set[str] = set()
    run = two._run

    def recording(session: Any, rows: Any) -> Any:
        ran_on.add(threading.current_thread().name)
        return run(session, rows)

    two._run = recording  # type: ignore[method-assign]
    np.testing.assert_array_equal(two.embed(texts), one_by_one.embed(texts))
    assert len(ran_on) == 2 and all(name.startswith("dmf-onnx") for name in ran_on)
    ran_on.clear()
    two.embed(texts[:1])  # a lone text (a query) runs in the caller's thread
    assert ran_on == {threading.current_thread().name}

    def failing(session: Any, rows: Any) -> Any:
        raise RuntimeError("runtime failure")

    two._run = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="runtime failure"):
        two.embed(texts)


@pytest.mark.slow
def test_a_damaged_cache_file_is_a_clear_error(onnx_model: OnnxEmbedder, tmp_path: Path
                                               ) -> None:
    onnx_model.load()
    assert onnx_model.onnx_path is not None
    copy = tmp_path / "cache"
    shutil.copytree(onnx_model.onnx_path.parent, copy / onnx_model.onnx_path.parent.name)
    (copy / onnx_model.onnx_path.parent.name / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ServiceUnavailable, match="delete the file"):
        OnnxEmbedder(cache_dir=copy).load()


@pytest.mark.slow
def test_search_with_it_and_a_switch_is_an_audited_re_embed(onnx_model: OnnxEmbedder,
                                                             tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "mem", embedder=onnx_model)
    define_travel(mem)
    rows = [{"name": name, "city": city} for name, city in (
        ("Fushimi Inari shrine", "Kyoto"), ("Nishiki fish market", "Kyoto"),
        ("Tate Modern art gallery", "London"), ("Borough food market", "London"),
        ("Alhambra palace", "Granada"))]
    ids = {row["name"]: e.id for row, e in zip(rows, mem.create_many("Poi", rows), strict=True)}
    res = mem.search("Poi", "a gallery of contemporary paintings", mode="vector", k=2)
    assert res.hits[0].entity.id == ids["Tate Modern art gallery"]
    food = mem.search("Poi", "where to buy fresh seafood", where={"city": "Kyoto"}, k=1)
    assert food.hits[0].entity.id == ids["Nishiki fish market"]
    assert res.receipt.model_id == "all-MiniLM-L6-v2-onnx-int8"
    mem.close()
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder())
    events = [e for e in mem.events() if e.op == "reindex"]
    assert events[-1].meta["from"] == "all-MiniLM-L6-v2-onnx-int8"
    assert events[-1].meta["to"] == "hash-64"
    mem.close()


@pytest.mark.slow
def test_concurrent_searches_answer_as_one_at_a_time(onnx_model: OnnxEmbedder, tmp_path: Path
                                                     ) -> None:
    from dmf_hybrid._internal.embeddings.batching import make_query_batcher
    from tests.search.test_query_batcher import concurrent_equals_alone

    assert make_query_batcher(onnx_model, Settings()) is None  # runs texts alone: no gain

    concurrent_equals_alone(onnx_model, tmp_path)


@pytest.mark.slow
def test_a_failed_export_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    (model / "model.safetensors").write_bytes(b"these are not weights")
    cache = tmp_path / "cache"
    with pytest.raises(ServiceUnavailable, match="exporting .* to ONNX failed"):
        OnnxEmbedder(str(model), cache_dir=cache).load()
    assert not list(cache.rglob("*.onnx"))  # no half-written model for the next start
