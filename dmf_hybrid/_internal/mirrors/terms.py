"""A document's index terms as the keyword index keeps them: bounded in number and length,
each named by a 64-bit key instead of its string.

Why keys. High-entropy text (every word new) made the index's vocabulary its largest part: a
term kept as a Python string in a dict cost ~240 bytes, so 600 texts of 120 KB of random words
(a million distinct terms) took 192 MB. Keyed, a term costs 8 bytes in a sorted array, and a
posting 8 (its slot and frequency), 26 MB for the same text (``evaluation/
bench_keyword_memory.py``). The key is FNV-1a (64-bit) over the term's code points and then its
length, finished with SplitMix64's mixer: the same in every process and on every machine.
Two distinct terms share a key with probability about n^2/2^65 (3 in 10^8 for a million terms);
they would then score as one term. Within one document such a pair is one posting of the
summed frequency, so a slot never appears twice in a posting list.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

KeyArray = npt.NDArray[np.uint64]
TfArray = npt.NDArray[np.uint32]

#: A document's index terms are bounded, so memory follows the number of documents, not the
#: entropy of their text: at most MAX_DOC_TERMS distinct terms per document (its most frequent,
#: ties in order of first appearance), each at most MAX_TERM_CHARS characters (a SHA-256 in hex
#: fits; a run of letters without a break does not). Every term still counts in the document's
#: length, so BM25's length normalisation sees the whole text. Text of ordinary documents is
#: far below both (SciFact abstracts: at most a few hundred distinct terms).
MAX_DOC_TERMS = 2000
MAX_TERM_CHARS = 64

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1
#: Below this many terms a loop in Python is faster than numpy's per-call overhead.
_VECTOR_FROM = 24
#: Terms keyed in one numpy call (a call holds them as UTF-32 padded to the longest).
KEY_CHUNK = 16_384
_NO_KEYS: KeyArray = np.zeros(0, dtype=np.uint64)


def term_keys(terms: Sequence[str]) -> KeyArray:
    """The 64-bit key of each term (see the module doc: two terms share one in ~n^2/2^65)."""
    if len(terms) < _VECTOR_FROM:
        return np.array([_term_key(t) for t in terms], dtype=np.uint64)
    codes = np.array(terms, dtype=str).view(np.uint32).reshape(len(terms), -1)  # UTF-32
    lengths = np.fromiter(map(len, terms), dtype=np.int64, count=len(terms))
    h = np.full(len(terms), _FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(_FNV_PRIME)
    for column in range(codes.shape[1]):
        # the padding of terms shorter than the longest one is not part of them
        h = np.where(lengths > column, (h ^ codes[:, column]) * prime, h)
    h ^= lengths.astype(np.uint64)
    h *= prime
    return _mix(h)


def _mix(h: KeyArray) -> KeyArray:
    """SplitMix64's finaliser, in place."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(_MIX1)
    h ^= h >> np.uint64(27)
    h *= np.uint64(_MIX2)
    h ^= h >> np.uint64(31)
    return h


def _term_key(term: str) -> int:
    """:func:`term_keys` of one term, in Python (the same bits)."""
    h = _FNV_OFFSET
    for char in term:
        h = ((h ^ ord(char)) * _FNV_PRIME) & _MASK
    h = ((h ^ len(term)) * _FNV_PRIME) & _MASK
    h ^= h >> 30
    h = (h * _MIX1) & _MASK
    h ^= h >> 27
    h = (h * _MIX2) & _MASK
    return h ^ (h >> 31)


class DocTerms(NamedTuple):
    """A document's indexed terms: their keys (sorted, distinct) and frequencies, and a digest
    of both (indexing the same terms again is a no-op)."""

    keys: KeyArray
    tfs: TfArray
    digest: int


def bounded_counts(terms: Sequence[str]) -> DocTerms:
    """A document's (distinct term keys, their frequencies) as indexed: terms of at most
    MAX_TERM_CHARS characters, the MAX_DOC_TERMS most frequent of them."""
    return bounded_counts_many([terms])[0]


def bounded_counts_many(documents: Sequence[Sequence[str]]) -> list[DocTerms]:
    """:func:`bounded_counts` of each document, keyed and sorted together (numpy's per-call
    cost, paid once per batch instead of once per document, was most of a short text's)."""
    counters = []
    for terms in documents:
        counter = Counter(t for t in terms if len(t) <= MAX_TERM_CHARS)
        if len(counter) > MAX_DOC_TERMS:
            counter = Counter(dict(counter.most_common(MAX_DOC_TERMS)))
        counters.append(counter)
    sizes = np.fromiter(map(len, counters), dtype=np.int64, count=len(counters))
    distinct = [term for counter in counters for term in counter]
    keys = np.concatenate([term_keys(distinct[i:i + KEY_CHUNK])
                           for i in range(0, len(distinct), KEY_CHUNK)] or [_NO_KEYS])
    tfs = np.fromiter((tf for counter in counters for tf in counter.values()),
                      dtype=np.uint32, count=len(distinct))
    doc = np.repeat(np.arange(len(counters)), sizes)
    order = np.lexsort((keys, doc))  # by document, then key
    keys, tfs, doc = keys[order], tfs[order], doc[order]
    first = np.ones(len(keys), dtype=np.bool_)
    first[1:] = (keys[1:] != keys[:-1]) | (doc[1:] != doc[:-1])
    if not first.all():  # two terms of one document share a key: one posting, tfs summed
        tfs = np.add.reduceat(tfs, np.flatnonzero(first)).astype(np.uint32)
        keys, doc = keys[first], doc[first]
    ends = np.searchsorted(doc, np.arange(len(counters)), side="right").tolist()
    # a digest of each document's (key, tf) pairs: a sum of mixed pairs, as they are sorted
    mixed = _mix(keys ^ (tfs.astype(np.uint64) * np.uint64(_MIX1)))
    digests = np.zeros(len(counters), dtype=np.uint64)
    np.add.at(digests, doc, mixed)
    out = []
    start = 0
    for end, digest in zip(ends, digests.tolist(), strict=True):
        out.append(DocTerms(keys[start:end], tfs[start:end], digest))
        start = end
    return out
