"""Rankings: (entity ID, score) lists ordered by score descending, then entity ID."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Ranking = list[tuple[str, float]]
#: Scores in hits and receipts are rounded to this many digits.
SCORE_DIGITS = 6
#: Up to this many scores are ranked by one sort, with no partition first.
SORT_ALL_MAX = 64


def ranked(ids: Sequence[str], scores: npt.ArrayLike, depth: int) -> Ranking:
    """The best ``depth`` (id, score): score descending, then entity ID ascending."""
    values = np.asarray(scores, dtype=np.float64)
    if len(values) <= SORT_ALL_MAX:  # a few: sorting them all is the same cut, and cheaper
        pairs = sorted(zip(ids, values.tolist(), strict=True),
                       key=lambda item: (-item[1], item[0]))
        return pairs[:depth]
    if len(values) > depth > 0:
        kth = np.partition(values, len(values) - depth)[len(values) - depth]
        keep = np.flatnonzero(values >= kth).tolist()  # ties at the cut stay, decided by ID
    else:
        keep = list(range(len(values)))
    pairs = sorted(((ids[i], float(values[i])) for i in keep),
                   key=lambda item: (-item[1], item[0]))
    return pairs[:depth]


def unit64(vector: np.ndarray) -> npt.NDArray[np.float64]:
    """``vector`` as a float64 unit vector (a zero vector stays zero)."""
    query = np.asarray(vector, dtype=np.float64)
    norm = math.sqrt(float(query.dot(query)))  # what np.linalg.norm computes, with less ado
    return query if norm == 0.0 else query / norm
