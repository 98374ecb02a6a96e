"""Shared helpers of the performance benchmarks: latency summaries, markdown tables, JSON, plots.

Percentiles interpolate linearly between order statistics (numpy's default), so a p95 of a
small sample is not just its maximum. Plots use matplotlib's ``Agg`` backend (no display);
when matplotlib is missing a plot is skipped with a warning, never the benchmark.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "environment",
    "latency_summary",
    "line_plots",
    "markdown_table",
    "percentile",
    "write_json",
]


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``samples``, linearly interpolated; NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    position = (len(ordered) - 1) * min(max(q, 0.0), 100.0) / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_summary(seconds: Sequence[float]) -> dict[str, float | int]:
    """``n`` and p50 / p95 / mean / max in milliseconds of latencies given in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else math.nan,
        "max_ms": round(max(ms), 3) if ms else math.nan,
    }


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats get at most 3 significant decimals."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "–"
            return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def environment() -> dict[str, Any]:
    """Where and when a benchmark ran: Python, platform, CPUs (and their model and the vector
    instructions int8 models run on, which can change a model's last digits), load average,
    UTC time."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on every platform
        load = []
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "load_average": load,
        "utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def cpu_model() -> str:
    """The CPU's model name and its int8-relevant instruction sets, from /proc/cpuinfo
    ("" where there is none)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    first = info.split("\n\n", 1)[0].splitlines()  # the first processor's block
    fields = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in first if ":" in ln)}
    name = " ".join(fields.get("model name", "").split())
    flags = set(fields.get("flags", "").split())
    simd = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni") if f in flags]
    return f"{name} ({' '.join(simd)})" if simd else name


def write_json(path: Path, document: Mapping[str, Any]) -> Path:
    """``document`` written to ``path`` as indented JSON (parent directories created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def publish(document: Mapping[str, Any], out: Path,
            markdown: Callable[[Mapping[str, Any]], str],
            plot: Callable[[Mapping[str, Any], Path], Path | None] | None = None
            ) -> list[Path]:
    """Print a benchmark's markdown table, write its results (:func:`write_results`) and say
    where; the paths written."""
    print(markdown(document))
    paths = write_results(document, out, markdown, plot)
    print("wrote " + ", ".join(str(p) for p in paths))
    return paths


def write_results(document: Mapping[str, Any], out: Path,
                  markdown: Callable[[Mapping[str, Any]], str],
                  plot: Callable[[Mapping[str, Any], Path], Path | None] | None = None
                  ) -> list[Path]:
    """A benchmark's JSON at ``out``, its markdown beside it (same stem, ``.md``) and, with
    ``plot``, its PNG (``.png``, unless matplotlib is missing); the paths written."""
    written = [write_json(out, document)]
    md = out.with_suffix(".md")
    md.write_text(markdown(document), encoding="utf-8")
    written.append(md)
    if plot is not None:
        image = plot(document, out.with_suffix(".png"))
        if image is not None:
            written.append(image)
    return written


Series = Mapping[str, tuple[Sequence[float], Sequence[float], str]]


def line_plots(path: Path, panels: Sequence[tuple[str, str, Series]], *, xlabel: str,
               xticks: Sequence[float] | None = None, logx: bool = False,
               logy_panels: Sequence[int] = (), title: str | None = None) -> Path | None:
    """A PNG of side-by-side line panels, or None when matplotlib is unavailable.

    Each panel is ``(title, ylabel, {label: (xs, ys, fmt)})`` where ``fmt`` is a matplotlib
    format string such as ``"C0--"`` (colour C0, dashed); the panels whose indexes are in
    ``logy_panels`` get a logarithmic y axis.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: skipping %s", path)
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for index, (ax, (panel_title, ylabel, series)) in enumerate(
            zip(axes[0], panels, strict=True)):
        for label, (xs, ys, style) in series.items():
            ax.plot(list(xs), list(ys), style, marker="o", label=label)
        if logx:
            ax.set_xscale("log", base=2)
        if index in logy_panels:
            ax.set_yscale("log")
        if xticks is not None:
            ax.set_xticks(list(xticks))
            ax.set_xticklabels([f"{x:g}" for x in xticks])
        ax.set_title(panel_title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay out a matplotlib figure, write it to ``path`` (its directory made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
