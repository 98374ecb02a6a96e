"""Analyzers by script: Chinese, Japanese, Korean, mixed and emoji text; names; field analyzers."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmf_hybrid._internal.analyzers import SNOWBALL_NAMES, analyzer_names, check_analyzer
from dmf_hybrid._internal.errors import SchemaError
from dmf_hybrid._internal.mirrors.keyword import KeywordIndex
from dmf_hybrid._internal.mirrors.text import (
    LUCENE_STOPWORDS_EN,
    Analyzer,
    TypeAnalyzer,
    cjk_bigrams,
    keyword_document,
    named_analyzer,
)

english = named_analyzer("english")


def test_chinese_runs_become_overlapping_bigrams() -> None:
    assert english.terms("上海博物馆") == ["上海", "海博", "博物", "物馆"]
    assert english.terms("馆") == ["馆"]  # a run of one character stays a unigram
    assert english.terms("我的蓝色衬衫到哪了？") == [
        "我的", "的蓝", "蓝色", "色衬", "衬衫", "衫到", "到哪", "哪了"]
    # punctuation ends a run: no bigram spans "，"
    assert english.terms("故宫，天坛") == ["故宫", "天坛"]


def test_a_part_of_a_chinese_name_finds_it() -> None:
    index = KeywordIndex(analyzer=english)
    index.upsert([("museum", "上海博物馆，中国古代艺术"), ("tower", "东方明珠电视塔"),
                  ("shirt", "蓝色衬衫，已发货")])
    assert [eid for eid, _ in index.search("博物馆", 3)] == ["museum"]
    assert [eid for eid, _ in index.search("我的蓝色衬衫到哪了", 3)][0] == "shirt"
    assert index.search("长城", 3) == []


def test_japanese_kana_and_kanji_alike_and_width_folding() -> None:
    assert english.terms("東京タワーに行きました") == [
        "東京", "京タ", "タワ", "ワー", "ーに", "に行", "行き", "きま", "まし", "した"]
    # half-width katakana is folded to full width, as Lucene's CJKWidthFilter does
    assert english.terms("ﾀﾜｰ") == english.terms("タワー") == ["タワ", "ワー"]
    # full-width ASCII is folded to ASCII (then lowercased and stemmed like any word)
    assert english.terms("ＲＵＮＮＩＮＧ　１２３") == ["run", "123"]


def test_korean_hangul_runs_are_bigrams() -> None:
    assert english.terms("국립중앙박물관") == ["국립", "립중", "중앙", "앙박", "박물", "물관"]


def test_mixed_text_needs_no_configuration() -> None:
    assert english.terms("iPhone手机壳 running shoes") == ["iphon", "手机", "机壳", "run", "shoe"]
    assert english.terms("The 上海 Museum of art") == ["上海", "museum", "art"]
    index = KeywordIndex(analyzer=english)
    index.upsert([("a", "Shanghai Museum 上海博物馆"), ("b", "Oriental Pearl 东方明珠")])
    assert index.search("museums in 上海", 1)[0][0] == "a"
    assert index.search("明珠", 1)[0][0] == "b"


def test_emoji_separate_terms_and_are_not_terms() -> None:
    assert english.terms("蓝色🙂衬衫") == ["蓝色", "衬衫"]
    assert english.terms("great 👍🏽 coffee ☕") == ["great", "coffe"]
    assert english.terms("🎉🎂🙂") == []
    index = KeywordIndex(analyzer=english)
    index.upsert([("x", "生日快乐 🎂")])
    assert index.search("🎂", 1) == []  # nothing to match: no terms, no error
    assert index.search("生日 🎂", 1)[0][0] == "x"


def test_unigram_and_jieba_modes() -> None:
    assert Analyzer(cjk="unigram+bigram").terms("博物馆") == ["博", "物", "馆", "博物", "物馆"]
    pytest.importorskip("rjieba")
    words = Analyzer(cjk="jieba").terms("我想去上海博物馆")
    assert "上海" in words and "博物馆" in words


_LATIN = st.text(alphabet=st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ -.,;'!?\n\t")
    + list("éèüßçñøåÆŒαβγδжщ")), max_size=80)


@settings(max_examples=300, deadline=None)
@given(_LATIN)
def test_text_without_cjk_analyses_exactly_as_before(text: str) -> None:
    """What the keyword leg did before scripts were told apart: the English figures stand."""
    import Stemmer

    stem = Stemmer.Stemmer("english").stemWords
    old = [w for w in re.findall(r"(?u)\b\w\w+\b", text.lower())
           if w not in LUCENE_STOPWORDS_EN]
    assert english.terms(text) == stem(old)


@given(st.text(alphabet=st.sampled_from(list("上海博物馆东京タワー서울 ab,🙂")), max_size=40))
def test_every_cjk_run_yields_its_bigrams(text: str) -> None:
    terms = named_analyzer("simple").terms(text)
    cjk = re.findall("[上海博物馆东京タワー서울]+", text)
    words = re.findall("[ab]{2,}", text)
    assert sorted(terms) == sorted([g for run in cjk for g in cjk_bigrams(run)] + words)


def test_unknown_names_are_refused_with_the_choices() -> None:
    with pytest.raises(SchemaError) as info:
        check_analyzer("klingon")
    assert "english" in info.value.message and "simple" in info.value.message
    assert info.value.field == "analyzer"
    assert "french" in analyzer_names()


def test_snowball_names_are_the_stemmers_pystemmer_has() -> None:
    import Stemmer

    assert tuple(sorted(Stemmer.algorithms())) == SNOWBALL_NAMES
    with pytest.raises(SchemaError):
        TypeAnalyzer("english", {"notes": "nope"})


def test_field_analyzers_keep_their_terms_apart() -> None:
    analysis = TypeAnalyzer("simple", {"notes": "english"})
    assert analysis.mixed and analysis.names == ("english", "simple")
    doc = keyword_document(analysis, [("name", "Running Club"), (None, ": "),
                                      ("notes", "running daily")])
    assert doc == (("simple", "Running Club: "), ("english", "running daily"))
    assert analysis.document_terms(doc) == [
        "simple:running", "simple:club", "english:run", "english:daili"]
    assert analysis.query_terms("runs") == ["english:run", "simple:runs"]
    index = KeywordIndex(analyzer=analysis)
    index.upsert([("stemmed", (("simple", "Club"), ("english", "running"))),
                  ("plain", (("simple", "running"), ("english", "club")))])
    # "runs" stems to "run" only under the notes field's analyzer
    assert [eid for eid, _ in index.search("runs", 2)] == ["stemmed"]
    # one analyzer: no prefixes, the document is the text
    single = TypeAnalyzer("english")
    assert not single.mixed
    assert keyword_document(single, [("a", "x  "), (None, " y")]) == "x y"
