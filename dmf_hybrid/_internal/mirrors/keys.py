"""Sorted 64-bit key indexes: find candidates listed as DuckDB ``hash(tenant, id)`` values.

The exact mirror, the BM25 index and the ANN plan's membership test all map such a list to
their own positions (mirror rows, BM25 slots) or test proposals against it, with no Python
strings made; these are the shared pieces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Keys = npt.NDArray[np.uint64]
#: (keys ascending, the position each belongs to)
KeyIndex = tuple[Keys, npt.NDArray[Any]]


def key_index(keys: Keys, positions: npt.NDArray[Any]) -> KeyIndex | None:
    """``keys`` sorted, with the position of each; None when two positions share a key."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    if len(ordered) > 1 and bool((ordered[1:] == ordered[:-1]).any()):
        return None
    return ordered, positions[order]


def locate(ordered: Keys, wanted: Keys) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """For each wanted key: where it is (or would be) in ``ordered``, and whether it is there."""
    if not len(ordered):
        return np.zeros(len(wanted), dtype=np.intp), np.zeros(len(wanted), dtype=np.bool_)
    at = np.minimum(np.searchsorted(ordered, wanted), len(ordered) - 1)
    return at, ordered[at] == wanted


def positions_of(index: KeyIndex, wanted: Keys) -> npt.NDArray[Any]:
    """The positions of those ``wanted`` keys that are in the index, in ``wanted``'s order."""
    at, hit = locate(index[0], wanted)
    return index[1][at[hit]]


def distinct(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The distinct values, ascending (a sort and one pass: ~10x faster than ``np.unique``)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
