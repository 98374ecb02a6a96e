"""Analyzers for the keyword leg: text in, the list of index terms out.

The pipeline is the one Lucene's ``EnglishAnalyzer`` and ``bm25s`` use: lowercase, split on the
pattern ``\\b\\w\\w+\\b`` (words of two or more word characters), drop stopwords, then stem with
a Snowball stemmer (PyStemmer; ``"english"`` is Porter2). Stopwords are removed *before*
stemming, as Lucene does. The same analyzer must be used for documents and queries.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from dmf_hybrid.errors import ServiceUnavailable, ValidationError

TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")

#: Lucene's English stop set (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``), also bm25s' ``"en"``.
LUCENE_STOPWORDS_EN: frozenset[str] = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their "
        "then there these they this to was will with"
    ).split()
)

#: Words whose stems are remembered (stemming is about half the cost of indexing a text).
STEM_CACHE_SIZE = 500_000

STOPWORD_SETS: dict[str, frozenset[str]] = {"en": LUCENE_STOPWORDS_EN}


def stopword_set(name: str | None) -> frozenset[str]:
    """The stopword set called ``name`` (``None`` gives the empty set)."""
    if name is None:
        return frozenset()
    try:
        return STOPWORD_SETS[name]
    except KeyError:
        raise ValidationError(
            f"unknown stopword list {name!r}; known: {sorted(STOPWORD_SETS)}", field="stopwords"
        ) from None


def _load_stemmer_module() -> Any:
    try:
        import Stemmer  # PyStemmer: a small C extension, still imported only when needed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ServiceUnavailable(
            "keyword search with stemming needs the 'PyStemmer' package (pip install PyStemmer)"
        ) from exc
    return Stemmer


class Analyzer:
    """Turns a text into its index terms; safe to share between threads."""

    def __init__(self, *, stemmer: str | None = "english", stopwords: str | None = "en") -> None:
        self.stemmer_name = stemmer
        self.stopwords_name = stopwords
        self.stopwords = stopword_set(stopwords)
        self._local = threading.local()
        self._stem_cache: dict[str, str] = {}
        if stemmer is not None:
            module = _load_stemmer_module()
            if stemmer not in module.algorithms():
                raise ValidationError(
                    f"unknown stemmer {stemmer!r}; known: {sorted(module.algorithms())}",
                    field="stemmer",
                )
            self._stemmer_module: Any = module

    def _stem_words(self) -> Callable[[list[str]], list[str]] | None:
        # PyStemmer objects are not thread-safe: one per thread.
        if self.stemmer_name is None:
            return None
        fn: Callable[[list[str]], list[str]] | None = getattr(self._local, "stem_words", None)
        if fn is None:
            fn = self._stemmer_module.Stemmer(self.stemmer_name).stemWords
            self._local.stem_words = fn
        return fn

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text`` in order, duplicates kept (empty for stopword-only text)."""
        stop = self.stopwords
        words = [w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stop]
        if self.stemmer_name is None or not words:
            return words
        cache = self._stem_cache
        try:
            return [cache[w] for w in words]
        except KeyError:
            pass
        missing = list(dict.fromkeys(w for w in words if w not in cache))
        stem_words = self._stem_words()
        assert stem_words is not None
        stems = dict(zip(missing, stem_words(missing), strict=True))
        if len(cache) < STEM_CACHE_SIZE:
            # dict.update is atomic under the GIL; racing threads write the same values
            cache.update(stems)
        return [cache[w] if w in cache else stems[w] for w in words]
