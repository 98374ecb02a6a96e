"""Date grounding (dmf_hybrid._internal.dates): conventions, and accuracy on the labelled sample."""

from __future__ import annotations

import datetime as dt

import pytest

from dmf_hybrid._internal.dates import asks_when, ground
from evaluation.grounding import LANGUAGES, load_sample, product, score

MON = dt.datetime(2023, 5, 8, 13, 56)  # a Monday


def spans(text: str, ref: dt.datetime = MON) -> list[tuple[str, str, str]]:
    return [(g.phrase, g.start.isoformat(), g.end.isoformat()) for g in ground(text, ref)]


@pytest.mark.parametrize("text, expected", [
    ("I went there yesterday.", [("yesterday", "2023-05-07", "2023-05-07")]),
    ("We met last week!", [("last week", "2023-05-01", "2023-05-07")]),
    ("Camping next month?", [("next month", "2023-06-01", "2023-06-30")]),
    ("It was two days ago.", [("two days ago", "2023-05-06", "2023-05-06")]),
    ("I ran on Saturday.", [("on Saturday", "2023-05-06", "2023-05-06")]),
    ("I'll run on Saturday.", [("on Saturday", "2023-05-13", "2023-05-13")]),
    ("Last weekend was fun.", [("Last weekend", "2023-05-06", "2023-05-07")]),
    ("I painted it last summer.", [("last summer", "2022-06-01", "2022-08-31")]),
    ("It happened in May 2022.", [("in May 2022", "2022-05-01", "2022-05-31")]),
    ("我昨天去了故宫", [("昨天", "2023-05-07", "2023-05-07")]),
    ("上周我们去了长城", [("上周", "2023-05-01", "2023-05-07")]),
    ("下个月去上海", [("下个月", "2023-06-01", "2023-06-30")]),
    ("三天前他来了", [("三天前", "2023-05-05", "2023-05-05")]),
    ("周六去吃烤鸭", [("周六", "2023-05-13", "2023-05-13")]),
    ("去年五月", [("去年五月", "2022-05-01", "2022-05-31")]),
])
def test_expressions_resolve_by_the_documented_conventions(text, expected):
    assert spans(text) == expected


@pytest.mark.parametrize("text", [
    "I went there recently.", "The other day was nice.", "A few years ago I moved.",
    "You may go now.", "Nothing about time here.", "我想找一个评分高的景点"])
def test_vague_or_absent_expressions_resolve_to_nothing(text):
    assert ground(text, MON) == []


def test_when_questions_are_recognised():
    assert asks_when("When did Caroline go to the support group?")
    assert asks_when("她什么时候去的长城？")
    assert not asks_when("What did Caroline research?")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_accuracy_on_the_labelled_sample(lang):
    """At least 90 % of the resolved dates are right, and 90 % of the labelled ones found."""
    result = score(product, load_sample(lang), lang.split("-")[0])
    print(f"{lang}: {result.right}/{result.resolved} resolved right "
          f"({result.precision:.3f}), recall {result.recall:.3f}")
    assert result.turns >= 100
    assert result.precision >= 0.90, result.wrong
    assert result.recall >= 0.90, result.wrong
