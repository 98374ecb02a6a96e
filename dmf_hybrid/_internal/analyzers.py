"""The names of the keyword analyzers a type or field may give, and their checks.

Names only, with no text processing and no third-party import, so that ``schema`` (and the
light HTTP client) can validate a definition; the analyzers themselves are in
``dmf_hybrid._internal.mirrors.text``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .errors import SchemaError

#: The analyzers a type or field can name: what words of space-separated scripts get (every
#: one splits Han / kana / Hangul runs into bigrams, unless it says otherwise). Besides these,
#: every Snowball stemmer name (``"french"``, ``"german"``, ``"russian"`` ...) names the
#: analyzer that stems with it (no stopwords).
ANALYZERS: dict[str, dict[str, Any]] = {
    "english": {"stemmer": "english", "stopwords": "en"},
    "simple": {"stemmer": None, "stopwords": None},
    # the same for space-separated words; Han / kana / Hangul also as single characters
    "english-unigram": {"stemmer": "english", "stopwords": "en", "cjk": "unigram+bigram"},
    # the same; Han / kana / Hangul runs cut into words by rjieba (an optional package)
    "english-jieba": {"stemmer": "english", "stopwords": "en", "cjk": "jieba"},
}
#: The analyzer of a type that names none.
DEFAULT_ANALYZER = "english"
#: The Snowball stemmers of PyStemmer (a test keeps this equal to ``Stemmer.algorithms()``).
SNOWBALL_NAMES: tuple[str, ...] = (
    "arabic", "armenian", "basque", "catalan", "czech", "danish", "dutch", "dutch_porter",
    "english", "esperanto", "estonian", "finnish", "french", "german", "greek", "hindi",
    "hungarian", "indonesian", "irish", "italian", "lithuanian", "nepali", "norwegian",
    "persian", "polish", "porter", "portuguese", "romanian", "russian", "serbian", "sesotho",
    "spanish", "swedish", "tamil", "turkish", "yiddish",
)


def analyzer_names() -> list[str]:
    """Every analyzer name a type or field may give, sorted."""
    return sorted({*ANALYZERS, *SNOWBALL_NAMES})


def check_analyzer(name: Any, field: str = "analyzer") -> str:
    """``name`` if it names an analyzer, else a SchemaError listing the choices."""
    if not (isinstance(name, str) and (name in ANALYZERS or name in SNOWBALL_NAMES)):
        raise SchemaError(f"unknown analyzer {name!r}; known: {', '.join(analyzer_names())}",
                          field=field)
    return name


def check_runnable(name: str, field: str = "analyzer") -> None:
    """A SchemaError if analyzer ``name`` needs a package this process does not have."""
    if ANALYZERS.get(name, {}).get("cjk") == "jieba" and importlib.util.find_spec(
            "rjieba") is None:
        raise SchemaError(f"analyzer {name!r} needs the rjieba package "
                          "(pip install 'dmf-hybrid[jieba]')", field=field)
