"""Accuracy of date grounding on the labelled sample in ``evaluation/grounding/``.

``python -m evaluation.grounding`` scores the product's grounding
(:func:`dmf_hybrid._internal.dates.ground`) and, when they are installed, the raw parsers it was
chosen against (``--parser``): ``dateparser`` (``dateparser.search.search_dates``: dates, no range)
and ``jionlp`` (``jionlp.ner.extract_time``: Chinese only).

Each sample row is a turn with its reference time and the time expressions a reader finds in
it, each labelled by hand with the dates it means (``start``/``end``, inclusive) or ``null``
when it names no definite date ("recently", "a few years ago", a figure of speech). A resolved
expression is *right* when it is one of the labelled expressions (the texts overlap) and its
dates are the label's; anything else it resolves is wrong. Reported per language: precision
(right / resolved: "of the resolved dates, how many are right"), recall (right / labelled
definite expressions) and the time per turn.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_DIR = Path(__file__).resolve().parent / "grounding"
LANGUAGES = ("en", "zh", "en-heldout")

Resolved = list[tuple[str, dt.date, dt.date]]
Parser = Callable[[str, dt.datetime, str], Resolved]


@dataclass(frozen=True)
class Score:
    """One parser's figures on one language's sample."""

    turns: int
    labelled: int
    resolved: int
    right: int
    ms_per_turn: float
    wrong: tuple[str, ...]

    @property
    def precision(self) -> float:
        """Right / resolved (1.0 when nothing was resolved)."""
        return self.right / self.resolved if self.resolved else 1.0

    @property
    def recall(self) -> float:
        """Right / labelled definite expressions."""
        return self.right / self.labelled if self.labelled else 1.0

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"turns": self.turns, "labelled": self.labelled, "resolved": self.resolved,
                "right": self.right, "precision": round(self.precision, 4),
                "recall": round(self.recall, 4), "ms_per_turn": round(self.ms_per_turn, 3),
                "wrong": list(self.wrong)}


def load_sample(lang: str) -> list[dict[str, Any]]:
    """The labelled rows of one language (``dates-<lang>.jsonl``)."""
    path = SAMPLE_DIR / f"dates-{lang}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def product(text: str, reference: dt.datetime, lang: str) -> Resolved:
    """The product's grounding (``dmf_hybrid._internal.dates.ground``)."""
    from dmf_hybrid._internal.dates import ground

    return [(g.phrase, g.start, g.end) for g in ground(text, reference)]


def dateparser_search(text: str, reference: dt.datetime, lang: str) -> Resolved:
    """``dateparser.search.search_dates`` on the whole text (a date each, no range)."""
    from dateparser.search import search_dates

    found = search_dates(text, languages=[lang], settings={
        "RELATIVE_BASE": reference, "PREFER_DATES_FROM": "past"}) or []
    return [(phrase, when.date(), when.date()) for phrase, when in found]


def jionlp_time(text: str, reference: dt.datetime, lang: str) -> Resolved:
    """``jionlp.ner.extract_time`` (Chinese; English text gives nothing)."""
    import jionlp

    out: Resolved = []
    for item in jionlp.ner.extract_time(text, time_base=reference.timestamp(),
                                        with_parsing=True):
        span = item.get("detail", {}).get("time")
        if isinstance(span, list) and len(span) == 2 and all(isinstance(s, str) for s in span):
            try:
                start = dt.date.fromisoformat(span[0][:10])
                end = dt.date.fromisoformat(span[1][:10])
            except ValueError:
                continue
            out.append((item["text"], start, end))
    return out


PARSERS: dict[str, Parser] = {"product": product, "dateparser": dateparser_search,
                              "jionlp": jionlp_time}


def _same_text(a: str, b: str) -> bool:
    a, b = a.lower().strip(" ,.!?"), b.lower().strip(" ,.!?")
    return bool(a) and bool(b) and (a in b or b in a)


def score(parser: Parser, rows: Iterable[dict[str, Any]], lang: str) -> Score:
    """How ``parser`` does on ``rows`` (see the module doc)."""
    rows = list(rows)
    parser("warm up yesterday 昨天", dt.datetime(2023, 1, 1), lang)  # loads its data once
    turns = labelled = resolved = right = 0
    wrong: list[str] = []
    began = time.perf_counter()
    results = [parser(r["text"], dt.datetime.fromisoformat(r["reference"]), lang)
               for r in rows]
    seconds = time.perf_counter() - began
    for row, found in zip(rows, results, strict=True):
        turns += 1
        labels = row["expressions"]
        labelled += sum(1 for e in labels if e["start"] is not None)
        used: set[int] = set()
        for phrase, start, end in found:
            resolved += 1
            match = next((i for i, e in enumerate(labels)
                          if i not in used and _same_text(phrase, e["phrase"])), None)
            ok = match is not None and labels[match]["start"] == start.isoformat() \
                and labels[match]["end"] == end.isoformat()
            if match is not None:
                used.add(match)
            if ok:
                right += 1
            else:
                wrong.append(f"{row['id']}: {phrase!r} -> {start}..{end}")
    return Score(turns, labelled, resolved, right, seconds * 1000 / max(turns, 1),
                 tuple(wrong))


def main(argv: list[str] | None = None) -> int:
    """The CLI: a table per parser and language, and ``--out`` JSON."""
    ap = argparse.ArgumentParser(prog="python -m evaluation.grounding", description=__doc__)
    ap.add_argument("--parser", action="append", choices=sorted(PARSERS),
                    help="parser(s) to score (default: product)")
    ap.add_argument("--out", type=Path, help="results JSON")
    ap.add_argument("--show-wrong", action="store_true", help="list every wrong resolution")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    print("| parser | language | turns | labelled | resolved | right | precision | recall "
          "| ms/turn |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.parser or ["product"]:
        for lang in LANGUAGES:
            s = score(PARSERS[name], load_sample(lang), lang.split("-")[0])
            results.setdefault(name, {})[lang] = s.as_dict()
            print(f"| {name} | {lang} | {s.turns} | {s.labelled} | {s.resolved} | {s.right} "
                  f"| {s.precision:.3f} | {s.recall:.3f} | {s.ms_per_turn:.2f} |")
            if args.show_wrong:
                for line in s.wrong:
                    print("    wrong:", line)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
