"""Analyzers for the keyword leg: text in, the list of index terms out, script by script.

A text is lowercased, full-width ASCII and half-width katakana are folded to their usual widths
(as Lucene's ``CJKWidthFilter`` does), and then each run of characters is split by its script:

- **Han, kana and Hangul runs** become overlapping character bigrams, as Lucene's
  ``CJKAnalyzer`` and Elasticsearch's ``cjk`` analyzer do: ``上海博物馆`` gives ``上海 海博 博物
  物馆``, so a query for ``博物馆`` matches it; a run of one character is kept as a unigram.
  (``cjk="unigram+bigram"`` also indexes every character, ``cjk="jieba"`` cuts runs into
  dictionary words with ``rjieba`` in search mode.)
- **Every other run of word characters** (Latin, Cyrillic, Greek, digits, ...) is split as
  before on ``\\b\\w\\w+\\b`` (words of two or more characters), stopwords are dropped, then the
  words are stemmed with a Snowball stemmer (PyStemmer; ``"english"`` is Porter2). Stopwords
  go *before* stemming, as in Lucene. A text with no Han, kana or Hangul character gives the
  same terms as an analyzer that knows nothing of those scripts.

Punctuation, whitespace and symbols (emoji included) separate terms and are not terms.
Mixed text needs no configuration: ``"iPhone手机壳"`` gives ``iphon 手机 机壳``.

Why bigrams by default. On the CrossWOZ validation lookups (512 Chinese requests that name a
place, dish or facility; ``python -m evaluation crosswoz --split val --mode keyword
--analyzer NAME``) BM25 alone put a gold entity in the top 5 for 0.922 of them with bigrams
(``english``), 0.840 with unigrams and bigrams (``english-unigram``: single characters match
too, and drown the rarer bigrams) and 0.682 with rjieba's words (``english-jieba``): names and
dishes are often not words of the segmenter's dictionary (``驴杂汤`` is cut into ``驴 杂汤``).
Bigrams need no dictionary and no dependency, and treat Japanese and Korean alike.
docs/retrieval.md has the table.

An analyzer is named in a type's definition (``analyzer``, and per field for fields whose
language differs); :data:`ANALYZERS` lists the names. Documents and queries of one index go
through the same analyzer (:class:`TypeAnalyzer` builds it from a type's definition).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dmf_hybrid._internal.analyzers import ANALYZERS, DEFAULT_ANALYZER, check_analyzer
from dmf_hybrid._internal.errors import ServiceUnavailable, ValidationError

if TYPE_CHECKING:
    from dmf_hybrid._internal.schema import EntityType

TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")

#: Han (CJK unified ideographs, extensions A-G, compatibility ideographs), the ideographic
#: iteration and closing marks, Hiragana, Katakana (with the prolonged sound mark, not the
#: middle dot), Katakana phonetic extensions, Hangul syllables and jamo.
CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3041-\u309f"  # Hiragana
    "\u30a1-\u30fa\u30fc-\u30ff"  # Katakana
    "\u3131-\u318e"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # Han extension A
    "\u4e00-\u9fff"  # Han
    "\ua960-\ua97f"  # Hangul jamo extended A
    "\uac00-\ud7a3"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul jamo extended B
    "\uf900-\ufaff"  # Han compatibility ideographs
    "\U00020000-\U0003134f"  # Han extensions B-G
)
_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
#: a run of CJK characters, or a run of other word characters
_RUN = re.compile(f"([{CJK_RANGES}]+)|([^\\W{CJK_RANGES}]+)")
#: full-width ASCII variants and half-width katakana, folded with NFKC (CJKWidthFilter)
_WIDTH_FORMS = re.compile("[\uff01-\uff5e\uff61-\uff9f]+")

#: Lucene's English stop set (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``), also bm25s' ``"en"``.
LUCENE_STOPWORDS_EN: frozenset[str] = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their "
        "then there these they this to was will with"
    ).split()
)

#: Words whose stems are remembered (stemming is about half the cost of indexing a text).
STEM_CACHE_SIZE = 100_000
#: Texts of up to this many characters (field values: categories, cities, names) keep their
#: terms; building the BM25 index of 100,000 entities analysed each value again.
SHORT_TEXT = 64
#: Short texts whose terms are remembered.
TERMS_CACHE_SIZE = 100_000
#: Words longer than this are stemmed on every use, not cached.
MAX_CACHED_WORD = 64

STOPWORD_SETS: dict[str, frozenset[str]] = {"en": LUCENE_STOPWORDS_EN}

#: How Han / kana / Hangul runs are split.
CJK_MODES = ("bigram", "unigram+bigram", "jieba")



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


def _load_jieba() -> Callable[[str], list[str]]:
    try:
        import rjieba  # optional: only the "jieba" CJK mode needs it
    except ImportError as exc:
        raise ServiceUnavailable(
            "the jieba CJK mode needs the 'rjieba' package (pip install rjieba)",
            package="rjieba") from exc
    cut: Callable[[str], list[str]] = rjieba.cut_for_search
    return cut


def fold_width(text: str) -> str:
    """``text`` with full-width ASCII and half-width katakana at their usual widths."""
    if not _WIDTH_FORMS.search(text):
        return text
    return _WIDTH_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Han, kana or Hangul character."""
    return _CJK_CHAR.search(text) is not None


def cjk_bigrams(run: str) -> list[str]:
    """The overlapping bigrams of a CJK run (the run itself when it is one character)."""
    if len(run) < 2:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


class Analyzer:
    """Turns a text into its index terms; safe to share between threads."""

    def __init__(self, *, stemmer: str | None = "english", stopwords: str | None = "en",
                 cjk: str = "bigram") -> None:
        if cjk not in CJK_MODES:
            raise ValidationError(f"unknown CJK mode {cjk!r}; known: {', '.join(CJK_MODES)}",
                                  field="cjk")
        self.stemmer_name = stemmer
        self.stopwords_name = stopwords
        self.cjk = cjk
        self.stopwords = stopword_set(stopwords)
        self._local = threading.local()
        self._stem_cache: dict[str, str] = {}
        self._terms_cache: dict[str, tuple[str, ...]] = {}
        self._cut = _load_jieba() if cjk == "jieba" else None
        if stemmer is not None:
            module = _load_stemmer_module()
            if stemmer not in module.algorithms():
                raise ValidationError(
                    f"unknown stemmer {stemmer!r}; known: {sorted(module.algorithms())}",
                    field="stemmer",
                )
            self._stemmer_module: Any = module

    def __repr__(self) -> str:
        return (f"Analyzer(stemmer={self.stemmer_name!r}, stopwords={self.stopwords_name!r}, "
                f"cjk={self.cjk!r})")

    def _stem_words(self) -> Callable[[list[str]], list[str]] | None:
        # PyStemmer objects are not thread-safe: one per thread.
        if self.stemmer_name is None:
            return None
        fn: Callable[[list[str]], list[str]] | None = getattr(self._local, "stem_words", None)
        if fn is None:
            # no cache of its own (10,000 words by default, per thread, however long: it
            # kept runs of letters of kilobytes); _words keeps a bounded one for all threads
            fn = self._stemmer_module.Stemmer(self.stemmer_name, 0).stemWords
            self._local.stem_words = fn
        return fn

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text`` in order, duplicates kept (empty for stopword-only text)."""
        if len(text) > SHORT_TEXT:
            return self._terms(text)
        known = self._terms_cache.get(text)
        if known is None:
            known = tuple(self._terms(text))
            if len(self._terms_cache) < TERMS_CACHE_SIZE:
                self._terms_cache[text] = known  # atomic under the GIL; racers agree
        return list(known)

    def _terms(self, text: str) -> list[str]:
        # NFC first: a composed and a decomposed "Zürich" are one term
        text = fold_width(unicodedata.normalize("NFC", text).lower())
        if not has_cjk(text):
            return self._words(TOKEN_PATTERN.findall(text))
        out: list[str] = []
        words: list[str] = []
        for cjk_run, word in _RUN.findall(text):
            if word:
                if len(word) > 1:
                    words.append(word)
                continue
            if words:
                out.extend(self._words(words))
                words = []
            out.extend(self._cjk_terms(cjk_run))
        if words:
            out.extend(self._words(words))
        return out

    def _cjk_terms(self, run: str) -> list[str]:
        if self._cut is not None:
            return [w for w in self._cut(run) if w.strip()]
        bigrams = cjk_bigrams(run)
        if self.cjk == "unigram+bigram" and len(run) > 1:
            return [*run, *bigrams]
        return bigrams

    def _words(self, found: list[str]) -> list[str]:
        """Stopped and stemmed words (of scripts that separate words)."""
        stop = self.stopwords
        words = [w for w in found if w not in stop]
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
            # dict.update is atomic under the GIL; racing threads write the same values; a
            # run of letters of kilobytes is stemmed once, never kept
            cache.update((w, t) for w, t in stems.items() if len(w) <= MAX_CACHED_WORD)
        return [cache[w] if w in cache else stems[w] for w in words]

    # the TextAnalysis protocol of KeywordIndex: one analyzer for documents and queries
    def document_terms(self, document: KeywordDocument) -> list[str]:
        """The terms of a document (a text; segments are analysed alike, in order)."""
        if isinstance(document, FieldedDocument):
            document = document.body
        if isinstance(document, str):
            return self.terms(document)
        return [t for _, segment in document for t in self.terms(segment)]

    def query_terms(self, text: str) -> list[str]:
        """The terms of a query: the same analysis as documents."""
        return self.terms(text)


@lru_cache(maxsize=64)
def named_analyzer(name: str) -> Analyzer:
    """The shared analyzer called ``name`` (see :data:`ANALYZERS`); SchemaError if unknown."""
    check_analyzer(name)
    options = ANALYZERS.get(name, {"stemmer": name, "stopwords": None})
    return Analyzer(**options)


#: The most terms a field value may have to be matched whole (see :class:`FieldedDocument`).
MAX_VALUE_TERMS = 16

#: The text the keyword index scores: the embedded text, or (analyzer name, text) segments
#: of a type with field analyzers.
KeywordBody = str | tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class FieldedDocument:
    """A keyword document with its field values: ``body`` is scored by BM25; ``values`` are
    ``(analyzer name, text)`` of each text field value (each list element apart), which a
    query *names* when it holds every one of a value's terms (see ``KeywordIndex.exact``)."""

    body: KeywordBody
    values: tuple[tuple[str, str], ...] = ()


KeywordDocument = KeywordBody | FieldedDocument


class TypeAnalyzer:
    """The analysis of one entity type: its analyzer, and those of fields that name their own.

    With one analyzer (the usual case) documents and queries are analysed by it and terms are
    exactly its terms. When fields name other analyzers, a document is a sequence of
    ``(analyzer, text)`` segments (see :func:`keyword_document`); each term is prefixed with
    its analyzer's name (``"english:museum"``), so terms of different analyzers never mix, and
    a query is analysed once by each analyzer of the type (a term of the query matches the
    fields analysed the same way).
    """

    def __init__(self, analyzer: str = DEFAULT_ANALYZER,
                 fields: Mapping[str, str] | None = None) -> None:
        self.analyzer = check_analyzer(analyzer)
        self.fields = {f: check_analyzer(a, f"fields.{f}.analyzer")
                       for f, a in sorted((fields or {}).items())}
        self.names = tuple(sorted({self.analyzer, *self.fields.values()}))
        self.key = (self.analyzer, tuple(self.fields.items()))

    @classmethod
    def of(cls, typedef: Any) -> TypeAnalyzer:
        """The analysis a TypeDef declares (``analyzer`` and fields' ``analyzer``)."""
        return cls(typedef.analyzer,
                   {name: spec.analyzer for name, spec in typedef.fields.items()
                    if spec.analyzer is not None and spec.analyzer != typedef.analyzer})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeAnalyzer) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"TypeAnalyzer({self.analyzer!r}, fields={self.fields!r})"

    @property
    def mixed(self) -> bool:
        """Whether several analyzers share the index (terms are then prefixed)."""
        return len(self.names) > 1

    def value_terms(self, document: KeywordDocument) -> tuple[frozenset[str], ...]:
        """The distinct term sets of a document's field values (1 to MAX_VALUE_TERMS terms)."""
        if not isinstance(document, FieldedDocument):
            return ()
        found: dict[frozenset[str], None] = {}
        for name, value in document.values:
            terms = named_analyzer(name).terms(value)
            if self.mixed:
                terms = [f"{name}:{t}" for t in terms]
            if 0 < len(terms) <= MAX_VALUE_TERMS:
                found.setdefault(frozenset(terms))
        return tuple(found)

    def document_terms(self, document: KeywordDocument) -> list[str]:
        """The index terms of a keyword document."""
        if isinstance(document, FieldedDocument):
            document = document.body
        if isinstance(document, str):
            terms = named_analyzer(self.analyzer).terms(document)
            return [f"{self.analyzer}:{t}" for t in terms] if self.mixed else terms
        out: list[str] = []
        for name, segment in document:
            terms = named_analyzer(name).terms(segment)
            out.extend(f"{name}:{t}" for t in terms) if self.mixed else out.extend(terms)
        return out

    def query_terms(self, text: str) -> list[str]:
        """The query's terms under every analyzer of the type."""
        if not self.mixed:
            return named_analyzer(self.analyzer).terms(text)
        return [f"{name}:{t}" for name in self.names for t in named_analyzer(name).terms(text)]


def substring_needles(analysis: TypeAnalyzer, text: str, limit: int = 16) -> list[str]:
    """Lowercase substrings a document holding the query's terms holds: the query's terms (a
    stem is mostly a prefix of its words) and its words that have terms (the stem of
    "happy" is "happi"), two characters or more; at most ``limit``, the longest first."""
    needles = {t.split(":", 1)[1] if analysis.mixed else t
               for t in analysis.query_terms(text)}
    folded = fold_width(unicodedata.normalize("NFC", text).lower())
    needles.update(w for w in TOKEN_PATTERN.findall(folded)
                   if not has_cjk(w) and analysis.query_terms(w))
    return sorted((n for n in needles if len(n) >= 2), key=lambda n: (-len(n), n))[:limit]


def keyword_document(analysis: TypeAnalyzer, parts: Sequence[tuple[str | None, str]]
                     ) -> KeywordBody:
    """What the keyword index analyses of an entity, from its embed template's parts.

    ``parts`` are ``(field or None, text)`` pieces of the rendered template (see
    ``EntityType.embed_parts``). Without field analyzers this is the embedded text itself;
    with them, ``(analyzer, text)`` segments: a field's value under its field's analyzer, the
    template's own words and other fields under the type's.
    """
    if not analysis.mixed:
        return " ".join("".join(text for _, text in parts).split())
    segments: list[tuple[str, str]] = []
    for name, text in parts:
        analyzer = analysis.fields.get(name, analysis.analyzer) if name else analysis.analyzer
        if segments and segments[-1][0] == analyzer:
            segments[-1] = (analyzer, segments[-1][1] + text)
        else:
            segments.append((analyzer, text))
    return tuple(segments)


#: Analyses by the (immutable) type definition they were read from: a search asks three
#: times, and reading one checks every analyzer name again.
_ANALYSES: dict[int, tuple[Any, TypeAnalyzer]] = {}
#: Definitions whose analyses are kept before they are all read again.
ANALYSES_MAX = 256


def type_analysis(etype: EntityType) -> TypeAnalyzer:
    """The keyword analysis a type's definition declares (its analyzer, its fields')."""
    typedef = etype.typedef
    known = _ANALYSES.get(id(typedef))
    if known is not None and known[0] is typedef:  # the entry keeps the definition alive
        return known[1]
    analysis = TypeAnalyzer.of(typedef)
    if len(_ANALYSES) >= ANALYSES_MAX:
        _ANALYSES.clear()
    _ANALYSES[id(typedef)] = (typedef, analysis)
    return analysis


def entity_document(analysis: TypeAnalyzer, etype: EntityType, data: Mapping[str, Any],
                    text: str, parts: list[tuple[str | None, str]] | None = None
                    ) -> KeywordDocument:
    """What the keyword index of a type analyses of one entity (``text``: its embed text;
    ``parts``: its rendered template, if already made): the text (or its segments) and the
    values of its embedded text fields."""
    if parts is None:
        parts = etype.embed_parts(data) or []
    body = text if not analysis.mixed else keyword_document(analysis, parts)
    values: list[tuple[str, str]] = []
    for name, _ in parts:
        spec = etype.fields.get(name) if name is not None else None
        if name is None or spec is None or not (spec.type in ("str", "enum") or spec.item == "str"):
            continue
        analyzer = analysis.fields.get(name, analysis.analyzer)
        value = data.get(name)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                values.append((analyzer, str(getattr(item, "value", item))))
    return FieldedDocument(body, tuple(values)) if values else body


def entity_documents(etype: EntityType, rows: Sequence[tuple[str, Mapping[str, Any]]]
                     ) -> list[tuple[str, KeywordDocument]]:
    """``(entity_id, keyword document)`` of the ``(entity_id, data)`` rows that are embedded."""
    analysis = type_analysis(etype)
    docs: list[tuple[str, KeywordDocument]] = []
    for entity_id, data in rows:
        text = etype.embed_text(data)
        if text is not None:
            docs.append((entity_id, entity_document(analysis, etype, data, text)))
    return docs
