"""Time expressions in English and Chinese grounded to absolute dates, with no model.

:func:`ground` finds the time expressions of a text ("yesterday", "last week", "next month",
"two days ago", "on Saturday", "in May 2023", "last summer"; "昨天", "上周", "下个月", "三天前",
"周六", "去年五月") and resolves each against a reference time (a message's ``time``; for a
query, the search's ``reference_time``) to an inclusive range of dates, :class:`Grounded`.

The spans are found here (a lexicon of both languages: what a time expression looks like);
`dateparser <https://dateparser.readthedocs.io>`_ resolves each span to a date and its
granularity (day, week, month, year), and the granularity makes the range: a day; the Monday
to Sunday week; the calendar month or year. The kinds dateparser does not read (weekends,
seasons, "in the past week", Chinese weekdays of this / last / next week, "去年五月") are
resolved here by the same conventions:

- "last Friday" is the latest Friday before the reference day, "next Friday" the first after
  it; a bare weekday ("on Saturday") is the latest one before, or the first after when the
  sentence speaks of the future ("will", "going to", "'ll", "can't wait"). Chinese "周六" is
  the Saturday of the reference's week, "上周六" / "下周六" that of the week before / after.
- "last week" / "上周" is the Monday-Sunday week before the reference's; "last weekend" /
  "上周末" its Saturday and Sunday; "this weekend" / "周末" the reference week's.
- "last year" is the calendar year before; "ten years ago" the whole year ten back;
  "in the past week" / "in the last month" the span up to the reference day.
- Seasons are the meteorological ones of the northern hemisphere (summer: June to August);
  "last summer" is the latest summer that ended before the reference day.
- Vague expressions ("recently", "the other day", "a few years ago") are not resolved.

Accuracy on the labelled sample in ``evaluation/grounding/`` is in ``docs/time.md``.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from dataclasses import dataclass
from typing import Any

_DAY = dt.timedelta(days=1)
_WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4,
             "saturday": 5, "sunday": 6, "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3,
             "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12,
            "春天": 3, "夏天": 6, "秋天": 9, "冬天": 12}
_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
_EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
               "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
               "twelve": 12}

_WD = ("(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
       "mon|tues|tue|wed|thurs|thur|thu|fri|sat|sun)")
_MONTH = ("(?:january|february|march|april|may|june|july|august|september|october|november|"
          "december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)")
_NUM = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d{1,3})"
_UNIT = r"(?:days?|weeks?|months?|years?|weekends?)"
_SEASON = r"(?:spring|summer|fall|autumn|winter)"
_ZH_NUM = r"[\d一二两三四五六七八九十]{1,3}"
_ZH_WD = r"(?:周|星期|礼拜)[一二三四五六日天]"

#: The expressions, longest forms first within each alternative. Each names its kind.
_EXPRESSIONS = [
    ("span", r"\b(?:in|over|during) the (?:past|last) (?:week|month|year)\b"),
    ("ago", rf"\b{_NUM} {_UNIT} (?:ago|back|earlier)\b"),
    ("after", rf"\b(?:in )?{_NUM} {_UNIT} (?:later|from now)\b"),
    ("weekend", r"\b(?:last|this|next|past|coming) weekend\b"),
    ("season", rf"\b(?:last|this|next|past) {_SEASON}\b"),
    ("season", rf"\b(?:in )?(?:the )?{_SEASON} (?:of )?(?:19|20)\d\d\b"),
    ("weekday", rf"\b(?:last|next|this|on) {_WD}\b"),
    ("relative", r"\b(?:last|this|next|past|coming) (?:week|month|year)\b"),
    ("day", r"\b(?:the day before yesterday|the day after tomorrow|yesterday|today|tonight|"
            r"tomorrow|last night|this (?:morning|afternoon|evening))\b"),
    ("absolute", rf"\b(?:on )?(?:\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}|"
                 rf"{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?)(?:,? (?:19|20)\d\d)?\b"),
    ("absolute", rf"\b(?:in |early |late |mid-?)?{_MONTH}(?:,? (?:of )?(?:19|20)\d\d)?\b"),
    ("year", r"\b(?:in )(?:19|20)\d\d\b"),
    # Chinese
    ("zh_ago", rf"{_ZH_NUM}(?:天|周|个星期|个礼拜|个月|年)(?:前|以前|之前|后|以后|之后)"),
    ("zh_weekday", rf"(?:上|下|这|本)?(?:个)?{_ZH_WD}"),
    ("zh_weekend", r"(?:上|下|这|本)?(?:个)?周末"),
    ("zh_month", rf"(?:去年|今年|明年|前年)?{_ZH_NUM}月(?:份)?(?:{_ZH_NUM}[日号])?"),
    ("zh_season", r"(?:去年|今年|明年)(?:春天|夏天|秋天|冬天)"),
    ("zh_relative", r"大前天|前天|昨天|昨晚|今天|今晚|今早|明天|明晚|后天|大后天|"
                    r"上上周|上周|下周|这周|本周|上个?星期|下个?星期|这个?星期|"
                    r"上个月|下个月|这个月|本月|去年|今年|明年|前年"),
]
_PATTERNS = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in _EXPRESSIONS]
#: Words that say a sentence speaks of the future (a bare weekday is then the next one).
_FUTURE = re.compile(r"\b(?:will|shall|going to|gonna|planning|plan to|can't wait|"
                     r"let's|lets|looking forward)\b|'ll\b", re.IGNORECASE)
_YEAR = re.compile(r"(?:19|20)\d\d")
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*")
#: Questions about when something happened: the rows that carry a date can answer them.
_WHEN = re.compile(r"\bwhen\b|\bwhat (?:date|day|year|month|time)\b|\bwhich (?:date|day|"
                   r"year|month)\b|\bhow long ago\b|什么时候|哪天|哪一天|几号|几月|哪年|哪一年|"
                   r"何时|多久以前", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Grounded:
    """A time expression of a text and the dates it means (``start`` to ``end``, inclusive)."""

    start: dt.date
    end: dt.date
    phrase: str

    def as_json(self) -> dict[str, str]:
        """``{"phrase", "start", "end"}``, dates as ISO strings."""
        return {"phrase": self.phrase, "start": self.start.isoformat(),
                "end": self.end.isoformat()}

    def overlaps(self, start: dt.date, end: dt.date) -> bool:
        """Whether this range and ``start``..``end`` share a day."""
        return self.start <= end and start <= self.end


def asks_when(text: str) -> bool:
    """Whether a query asks when something happened ("When did...", "什么时候")."""
    return _WHEN.search(text) is not None


def ground(text: str, reference: dt.datetime | dt.date) -> list[Grounded]:
    """The time expressions of ``text`` resolved against ``reference``, in text order."""
    ref = reference.date() if isinstance(reference, dt.datetime) else reference
    out: list[Grounded] = []
    for sentence in _SENTENCE.finditer(text):
        future = _FUTURE.search(sentence.group(0)) is not None
        taken: list[tuple[int, int]] = []
        found: list[tuple[int, Grounded]] = []
        for kind, pattern in _PATTERNS:
            for m in pattern.finditer(sentence.group(0)):
                if any(m.start() < e and s < m.end() for s, e in taken):
                    continue  # inside a longer expression found first
                span = _resolve(kind, m.group(0), ref, future)
                if span is not None:
                    taken.append((m.start(), m.end()))
                    found.append((m.start(), Grounded(span[0], span[1], m.group(0))))
        out += [g for _, g in sorted(found, key=lambda item: item[0])]
    return out


# --------------------------------------------------------------------------- resolution


def _resolve(kind: str, phrase: str, ref: dt.date, future: bool
             ) -> tuple[dt.date, dt.date] | None:
    p = phrase.lower().strip()
    if kind.startswith("zh"):
        return _resolve_zh(kind, phrase, ref)
    if kind == "span":
        unit = p.rsplit(" ", 1)[1]
        back = {"week": _add(ref, days=-7), "month": _add(ref, months=-1),
                "year": _add(ref, months=-12)}[unit]
        return back, ref
    if kind == "weekend":
        week = _week_start(ref) + dt.timedelta(days=7 * {"last": -1, "past": -1, "this": 0,
                                                           "coming": 0, "next": 1}[p.split()[0]])
        return week + 5 * _DAY, week + 6 * _DAY
    if kind == "season":
        return _season(p, ref)
    if kind == "weekday":
        which, name = p.split()
        wd = _WEEKDAYS[name]
        if which == "next" or (which in ("on", "this") and future):
            return _after(ref, wd), _after(ref, wd)
        return _before(ref, wd), _before(ref, wd)
    if kind == "ago" and "weekend" in p:
        n = _en_number(p.split()[0])
        week = _week_start(ref) - dt.timedelta(days=7 * n)
        return week + 5 * _DAY, week + 6 * _DAY
    no_digit = not any(ch.isdigit() for ch in p)
    if kind == "absolute" and no_digit and p.split()[-1] in ("may", "mar", "march"):
        if not p.startswith(("in ", "early", "late", "mid")):
            return None  # "may" alone is a verb far more often than a month
    return _parse(phrase, ref, future)


def _resolve_zh(kind: str, phrase: str, ref: dt.date) -> tuple[dt.date, dt.date] | None:
    shift = {"上": -1, "下": 1, "这": 0, "本": 0}
    if kind == "zh_weekday":
        week = _week_start(ref) + dt.timedelta(days=7 * shift.get(phrase[0], 0))
        day = week + dt.timedelta(days=_ZH_WEEKDAYS[phrase[-1]])
        return day, day
    if kind == "zh_weekend":
        week = _week_start(ref) + dt.timedelta(days=7 * shift.get(phrase[0], 0))
        return week + 5 * _DAY, week + 6 * _DAY
    if kind == "zh_season":
        year = ref.year + {"去": -1, "今": 0, "明": 1}[phrase[0]]
        first = dt.date(year, _SEASONS[phrase[2:]], 1)
        return first, _add(first, months=3) - _DAY
    if kind == "zh_month":
        m = re.fullmatch(rf"(去年|今年|明年|前年)?({_ZH_NUM})月(?:份)?(?:({_ZH_NUM})[日号])?",
                         phrase)
        if m is None:
            return None
        month = _zh_number(m.group(2))
        if not 1 <= month <= 12:
            return None
        if m.group(1):
            year = ref.year + {"前年": -2, "去年": -1, "今年": 0, "明年": 1}[m.group(1)]
        else:  # a month without a year: the latest one up to the reference's
            year = ref.year if month <= ref.month else ref.year - 1
        if m.group(3):
            try:
                day = dt.date(year, month, _zh_number(m.group(3)))
            except ValueError:
                return None
            return day, day
        first = dt.date(year, month, 1)
        return first, _add(first, months=1) - _DAY
    if kind == "zh_ago":
        m = re.fullmatch(rf"({_ZH_NUM})(天|周|个星期|个礼拜|个月|年)(.+)", phrase)
        assert m is not None
        n = _zh_number(m.group(1)) * (1 if m.group(3) in ("后", "以后", "之后") else -1)
        unit = {"天": "day", "周": "week", "个星期": "week", "个礼拜": "week", "个月": "month",
                "年": "year"}[m.group(2)]
        return _unit_range(ref, unit, n)
    relative = {"大前天": ("day", -3), "前天": ("day", -2), "昨天": ("day", -1),
                "昨晚": ("day", -1), "今天": ("day", 0), "今晚": ("day", 0),
                "今早": ("day", 0), "明天": ("day", 1), "明晚": ("day", 1),
                "后天": ("day", 2), "大后天": ("day", 3), "上上周": ("week", -2),
                "上周": ("week", -1), "下周": ("week", 1), "这周": ("week", 0),
                "本周": ("week", 0), "上个月": ("month", -1), "下个月": ("month", 1),
                "这个月": ("month", 0), "本月": ("month", 0), "前年": ("year", -2),
                "去年": ("year", -1), "今年": ("year", 0), "明年": ("year", 1)}
    key = re.sub(r"个?星期", "周", phrase).replace("个周", "周")
    unit_n = relative.get(key)
    if unit_n is None:
        return None
    return _unit_range(ref, unit_n[0], unit_n[1], exact=True)


def _unit_range(ref: dt.date, unit: str, n: int, exact: bool = False
                ) -> tuple[dt.date, dt.date]:
    """The day, Monday-Sunday week, month or year ``n`` units from ``ref``."""
    if unit == "day":
        day = ref + dt.timedelta(days=n)
        return day, day
    if unit == "week":
        start = _week_start(ref) + dt.timedelta(days=7 * n)
        return start, start + 6 * _DAY
    if unit == "month":
        first = _add(ref.replace(day=1), months=n)
        return first, _add(first, months=1) - _DAY
    return dt.date(ref.year + n, 1, 1), dt.date(ref.year + n, 12, 31)


_lock = threading.Lock()
_parsers: dict[str, Any] = {}


def _parse(phrase: str, ref: dt.date, future: bool) -> tuple[dt.date, dt.date] | None:
    """dateparser's date and granularity of an English phrase, as a range."""
    from dateparser.date import DateDataParser  # 0.2 s to import; only rows with a phrase

    key = "future" if future else "past"
    with _lock:
        parser = _parsers.get(key)
        if parser is None:
            parser = _parsers[key] = DateDataParser(languages=["en"], settings={
                "PREFER_DATES_FROM": key, "RETURN_TIME_AS_PERIOD": True,
                "PREFER_DAY_OF_MONTH": "first"})
        base = dt.datetime.combine(ref, dt.time(12))
        parser._settings.RELATIVE_BASE = base  # noqa: SLF001 - one parser, any reference
        data = parser.get_date_data(re.sub(r"^(?:in|on|early|late|mid-?)\s+", "", phrase,
                                           flags=re.IGNORECASE))
    if data is None or data.date_obj is None:
        return None
    day = data.date_obj.date()
    period = data.period or "day"
    if period in ("day", "time", "part_of_day", "hour", "minute", "second"):
        return day, day
    if period == "week":
        start = _week_start(day)
        return start, start + 6 * _DAY
    if period == "month":
        first = day.replace(day=1)
        return first, _add(first, months=1) - _DAY
    return dt.date(day.year, 1, 1), dt.date(day.year, 12, 31)


# --------------------------------------------------------------------------- calendar


def _week_start(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


def _before(ref: dt.date, weekday: int) -> dt.date:
    return ref - dt.timedelta(days=(ref.weekday() - weekday) % 7 or 7)


def _after(ref: dt.date, weekday: int) -> dt.date:
    return ref + dt.timedelta(days=(weekday - ref.weekday()) % 7 or 7)


def _add(day: dt.date, *, days: int = 0, months: int = 0) -> dt.date:
    if months:
        total = day.year * 12 + day.month - 1 + months
        year, month = divmod(total, 12)
        last = (dt.date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1) - _DAY).day
        day = day.replace(year=year, month=month + 1, day=min(day.day, last))
    return day + dt.timedelta(days=days)


def _season(phrase: str, ref: dt.date) -> tuple[dt.date, dt.date] | None:
    words = phrase.split()
    name = next(w for w in words if w in _SEASONS)
    first_month = _SEASONS[name]
    year_given = _YEAR.search(phrase)
    if year_given:
        first = dt.date(int(year_given.group(0)), first_month, 1)
    else:
        this = dt.date(ref.year, first_month, 1)
        if first_month == 12 and ref.month < 3:
            this = dt.date(ref.year - 1, 12, 1)
        end_this = _add(this, months=3) - _DAY
        which = words[0]
        if which in ("last", "past"):
            first = this if end_this < ref else dt.date(this.year - 1, first_month, 1)
        elif which == "next":
            first = this if this > ref else dt.date(this.year + 1, first_month, 1)
        else:
            first = this
    return first, _add(first, months=3) - _DAY


def _en_number(word: str) -> int:
    return int(word) if word.isdigit() else _EN_NUMBERS[word.lower()]


def _zh_number(text: str) -> int:
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[ones] if ones else 0)
    value = 0
    for ch in text:
        value = value * 10 + _ZH_DIGITS[ch]
    return value
