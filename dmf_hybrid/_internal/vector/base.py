"""The VectorIndex protocol every vector backend implements, and the helpers they share.

A vector index is derived state: it maps entity IDs to one vector and a small flat metadata
dict per collection, and proposes candidate IDs with cosine similarities. DuckDB stays the
truth; an index can always be dropped and rebuilt.

Contract of every implementation (tested by one shared suite against each of them):

- collections use cosine space; ``ensure_collection`` is idempotent and raises
  :class:`~dmf_hybrid._internal.errors.SchemaError` when the collection exists with another
  dimension;
- ``upsert`` replaces the vector *and the whole metadata dict* of each ID (keys absent from
  the new metadata do not survive; a key whose value is ``None`` counts as absent); with
  ``keep_newer`` naming an integer metadata key, an ID whose stored value of that key is
  greater than the new one's keeps what it has (an older version never replaces a newer);
- ``shared`` says whether other processes may write the same collections (a server), so one
  process at a time should (the indexer's relay);
- ``delete`` ignores unknown IDs, ``drop`` ignores unknown collections;
- ``query`` returns ``(id, similarity)`` pairs, similarity = 1 - cosine distance, sorted by
  similarity descending then ID ascending; asking for more than the collection holds is fine;
- operations other than ``ensure_collection``, ``delete`` and ``drop`` raise
  :class:`~dmf_hybrid._internal.errors.NotFound` for an unknown collection.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dmf_hybrid._internal.errors import ValidationError

MetadataValue = str | int | float | bool
Metadata = dict[str, MetadataValue]

#: Chroma's limits on collection names; every backend uses the same names.
MIN_COLLECTION_NAME = 3
MAX_COLLECTION_NAME = 512
#: Separator between the parts of a collection name (see :func:`collection_name`).
NAME_SEPARATOR = "__"

_CLEAN_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_HASH_HEX = 16
_RESERVED_KEY_PREFIXES = ("#", "$", "chroma:")


@dataclass(frozen=True)
class VectorRecord:
    """One stored entry of a collection: the entity ID and its metadata."""

    id: str
    metadata: Metadata = field(default_factory=dict)


@runtime_checkable
class VectorIndex(Protocol):
    """A store of named cosine-space collections of (id, vector, metadata)."""

    #: Whether other processes may write the same collections (a server, not a local copy).
    shared: bool

    def ensure_collection(self, name: str, dim: int) -> None:
        """Create the collection if missing; SchemaError if it exists with another dim."""
        ...

    def upsert(
        self,
        name: str,
        ids: Sequence[str],
        vectors: npt.ArrayLike,
        metadatas: Sequence[Mapping[str, MetadataValue | None]],
        keep_newer: str | None = None,
    ) -> None:
        """Insert or fully replace vector and metadata of each ID (with ``keep_newer``: of
        each ID whose stored value of that key is not greater than the new one's)."""
        ...

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Remove the IDs; unknown IDs and an unknown collection are ignored."""
        ...

    def query(self, name: str, vector: npt.ArrayLike, n: int) -> list[tuple[str, float]]:
        """Top ``n`` (id, cosine similarity), sorted by similarity desc then id asc."""
        ...

    def records(self, name: str) -> dict[str, Metadata]:
        """Every ID of the collection with its metadata."""
        ...

    def count(self, name: str) -> int:
        """Number of vectors in the collection."""
        ...

    def drop(self, name: str) -> None:
        """Delete the collection; an unknown one is ignored."""
        ...

    def collections(self) -> list[str]:
        """Names of all collections, sorted."""
        ...


def collection_name(*parts: str) -> str:
    """A valid, deterministic collection name built from ``parts``.

    Clean parts (``[A-Za-z0-9._-]``, starting and ending alphanumeric, without ``__`` or
    ``..``) are joined with ``__`` unchanged, e.g. ``collection_name("acme", "note", "text")
    == "acme__note__text"``; such names map back to their parts, so distinct part tuples give
    distinct names. Anything else (other characters, empty parts, too short or long, an IPv4
    look-alike) is sanitised and suffixed with ``-h`` plus 16 hex digits of a BLAKE2b hash of
    the original parts, which keeps the result distinct from other inputs in practice.
    """
    if not parts:
        raise ValidationError("collection_name needs at least one part", field="name")
    joined = NAME_SEPARATOR.join(parts)
    clean = all(
        _CLEAN_PART.fullmatch(p) and NAME_SEPARATOR not in p and ".." not in p for p in parts
    )
    if (
        clean
        and MIN_COLLECTION_NAME <= len(joined) <= MAX_COLLECTION_NAME
        and not _IPV4.fullmatch(joined)
    ):
        return joined
    digest = hashlib.blake2b(
        "\x1f".join(parts).encode("utf-8"), digest_size=_HASH_HEX // 2
    ).hexdigest()
    base = _INVALID_CHARS.sub("_", joined)
    base = re.sub(r"\.{2,}", ".", base).strip("._-")
    base = base[: MAX_COLLECTION_NAME - _HASH_HEX - 2].rstrip("._-")
    return f"{base}-h{digest}" if base else f"h{digest}"


def check_collection_name(name: str) -> str:
    """``name`` if it is a valid collection name (see :func:`collection_name`), else an error."""
    if (
        not isinstance(name, str)
        or not MIN_COLLECTION_NAME <= len(name) <= MAX_COLLECTION_NAME
        or not _CLEAN_PART.fullmatch(name)
        or ".." in name
        or _IPV4.fullmatch(name)
    ):
        raise ValidationError(
            f"invalid collection name {name!r}: use 3-512 characters from [A-Za-z0-9._-], "
            "starting and ending alphanumeric, no '..', not an IPv4 address "
            "(collection_name() builds valid names)",
            field="name",
        )
    return name


def validate_metadata(metadata: Mapping[str, object], index: int = 0) -> Metadata:
    """A copy of ``metadata`` checked to be flat str/int/float/bool values with legal keys.

    A ``None`` value means "no value": the key is left out of the copy.
    """
    if not isinstance(metadata, Mapping):
        raise ValidationError(
            f"metadata at position {index} must be a dict", field="metadatas", position=index
        )
    out: Metadata = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or key.startswith(_RESERVED_KEY_PREFIXES):
            raise ValidationError(
                f"metadata key {key!r} at position {index} is empty or reserved "
                f"(keys may not start with {', '.join(_RESERVED_KEY_PREFIXES)})",
                field="metadatas",
                position=index,
            )
        if value is None:
            continue  # "no value": the key is simply absent, as after a full replace
        if not isinstance(value, str | int | float | bool):
            raise ValidationError(
                f"metadata value for {key!r} at position {index} must be str, int, float or "
                f"bool, not {type(value).__name__}",
                field="metadatas",
                position=index,
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(
                f"metadata value for {key!r} at position {index} must be finite",
                field="metadatas",
                position=index,
            )
        out[key] = value
    return out


def check_batch(
    ids: Sequence[str],
    vectors: npt.ArrayLike,
    metadatas: Sequence[Mapping[str, object]],
    dim: int,
) -> tuple[list[str], npt.NDArray[np.float32], list[Metadata]]:
    """The batch as (ids, float32 matrix, validated metadatas), or a ValidationError.

    IDs must be non-empty strings without duplicates; the matrix must be ``(len(ids), dim)``
    with finite values.
    """
    id_list = list(ids)
    for pos, id_ in enumerate(id_list):
        if not isinstance(id_, str) or not id_:
            raise ValidationError(
                f"id at position {pos} must be a non-empty string", field="ids", position=pos
            )
    if len(set(id_list)) != len(id_list):
        raise ValidationError("ids in one upsert must be unique", field="ids")
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1 and len(id_list) == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[0] != len(id_list) or matrix.shape[1] != dim:
        raise ValidationError(
            f"vectors must have shape ({len(id_list)}, {dim}), got {matrix.shape}",
            field="vectors",
            expected_dim=dim,
        )
    if not np.isfinite(matrix).all():
        raise ValidationError("vectors must be finite (no NaN or inf)", field="vectors")
    if len(metadatas) != len(id_list):
        raise ValidationError(
            f"got {len(metadatas)} metadatas for {len(id_list)} ids", field="metadatas"
        )
    clean = [validate_metadata(md, pos) for pos, md in enumerate(metadatas)]
    return id_list, matrix, clean


def check_query_vector(vector: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    """The query vector as a 1-d float32 array of length ``dim``, or a ValidationError."""
    vec = np.asarray(vector, dtype=np.float32)
    if vec.ndim == 2 and vec.shape[0] == 1:
        vec = vec[0]
    if vec.ndim != 1 or vec.shape[0] != dim:
        raise ValidationError(
            f"query vector must have {dim} dimensions, got shape {vec.shape}",
            field="vector",
            expected_dim=dim,
        )
    if not np.isfinite(vec).all():
        raise ValidationError("query vector must be finite (no NaN or inf)", field="vector")
    return vec


def check_n(n: int) -> int:
    """``n`` if it is a non-negative int, else a ValidationError."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValidationError(f"n must be a non-negative integer, got {n!r}", field="n")
    return n


def check_dim(dim: int) -> int:
    """``dim`` if it is a positive int, else a ValidationError."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
        raise ValidationError(f"dim must be a positive integer, got {dim!r}", field="dim")
    return dim


def rank_hits(hits: Sequence[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """The first ``n`` hits sorted by similarity descending, then ID ascending."""
    return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:n]


def older_than_stored(stored: Mapping[str, Mapping[str, object]], ids: Sequence[str],
                      metadatas: Sequence[Mapping[str, object]], key: str) -> set[int]:
    """Positions of the batch whose ``key`` is below the stored entry's (``keep_newer``)."""
    older = set()
    for i, (id_, md) in enumerate(zip(ids, metadatas, strict=True)):
        have, new = stored.get(id_, {}).get(key), md.get(key)
        if isinstance(have, int) and isinstance(new, int) and have > new:
            older.add(i)
    return older
