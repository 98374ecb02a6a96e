"""The embedding cache: vectors by (model, text hash), shared by every writer and reload.

A text is embedded once per model: writes, drains, reconciles and reindexes look their texts
up here first and add what they embedded. The cache is derived (a text's vector is a pure
function of the text and the model) but kept in the store, so a rebuild of the vector index
never embeds again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .sql import LOOKUP_CHUNK, POINT_LOOKUP_MAX
from .txn import SHARED, Reader, Transactions

#: Text hashes per lookup of :meth:`EmbeddingCache.by_index`.
INDEXED_CHUNK = 1500


class EmbeddingCache:
    """Cached vectors of the store's database."""

    def __init__(self, db: Transactions) -> None:
        self._db = db

    def vectors(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors of ``model`` for those text hashes (the others are absent)."""
        found: dict[str, np.ndarray] = {}
        unique = sorted(set(hashes))
        reader = self._db.reader()
        if len(unique) <= POINT_LOOKUP_MAX:  # a write's few texts: through the hash index
            return self._few(reader, model, unique) if unique else found
        for i in range(0, len(unique), LOOKUP_CHUNK):
            part = unique[i:i + LOOKUP_CHUNK]
            # which hashes are cached: a scan of the hash column only; new texts (the common
            # case on writes) never make DuckDB read the vector column
            present = [r[0] for r in reader.execute(
                "SELECT text_hash FROM embeddings WHERE model_id = ? AND text_hash IN "
                "(SELECT unnest(CAST(? AS VARCHAR[])))", [model, part]).fetchall()]
            if not present:
                continue
            # it may start here because the execute() above was read to its end
            names, matrix = self._db.dialect.vectors(
                reader, "SELECT text_hash, vector FROM embeddings WHERE model_id = ? AND "
                "text_hash IN (SELECT unnest(CAST(? AS VARCHAR[])))", [model, present])
            for h, vec in zip(names, matrix, strict=True):
                found[h] = vec
        return found

    @staticmethod
    def _present(reader: Reader, model: str, hashes: list[str]) -> list[str]:
        """Which of a few hashes have a vector of ``model``: `text_hash IN (...)` alone uses
        the index on text_hash; the model is checked on the rows found."""
        return [h for h, m in reader.execute(
            "SELECT text_hash, model_id FROM embeddings WHERE text_hash IN "
            f"({', '.join('?' * len(hashes))})", hashes).fetchall() if m == model]

    def _few(self, reader: Reader, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        """:meth:`vectors` of a few hashes, through the index on text_hash."""
        present = self._present(reader, model, hashes)
        if not present:  # new texts, a write's usual case: the vector column is never read
            return {}
        found: dict[str, np.ndarray] = {}
        for h, m, vector in reader.execute(
                "SELECT text_hash, model_id, vector FROM embeddings WHERE text_hash IN "
                f"({', '.join('?' * len(present))})", present).fetchall():
            if m == model:
                found[h] = self._db.dialect.vector(vector)
        return found

    def by_index(self, model: str, hashes: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """The cached vectors of ``model`` for those text hashes (hashes, matrix), looked up
        through the text-hash index :data:`INDEXED_CHUNK` at a time: for a few thousand (a
        scan of the hash column, then the vectors' segments, costs more below that)."""
        found: list[str] = []
        parts: list[np.ndarray] = []
        reader = self._db.reader()
        for i in range(0, len(hashes), INDEXED_CHUNK):
            part = list(hashes[i:i + INDEXED_CHUNK])
            # `text_hash IN (...)` alone is answered from the index; the model is told by
            # the first column (null: another model's vector of the same text)
            names, matrix = self._db.dialect.vectors(
                reader, "SELECT CASE WHEN model_id = ? THEN text_hash END, vector FROM "
                f"embeddings WHERE text_hash IN ({', '.join('?' * len(part))})", [model, *part])
            mine = [n is not None for n in names]
            found += [n for n in names if n is not None]
            if any(mine):
                parts.append(matrix[np.asarray(mine)])
        return found, np.vstack(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    def models(self) -> list[str]:
        """The models with cached vectors."""
        return [r[0] for r in self._db.reader().execute(
            "SELECT DISTINCT model_id FROM embeddings ORDER BY model_id").fetchall()]

    def every(self, model: str) -> tuple[list[str], np.ndarray]:
        """Every cached (text hash, vector) of ``model``: the hashes, the matrix."""
        return self._db.dialect.vectors(
            self._db.reader(), "SELECT text_hash, vector FROM embeddings WHERE model_id = ? "
            "ORDER BY text_hash", [model])

    def put(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        """Cache (text hash, vector) pairs of ``model`` in one transaction; pairs cached
        meanwhile are kept as they are."""
        if not items:
            return
        with self._db.write(SHARED) as con:
            few = len(items) <= POINT_LOOKUP_MAX
            if few:  # a write's few vectors: drop those cached meanwhile, insert the rest plain
                # (ON CONFLICT took 18 ms for one row at 100,000 cached vectors; this, 5 ms)
                cached = set(self._present(con, model, [h for h, _ in items]))
                items = [item for item in items if item[0] not in cached]
                if not items:
                    return
            matrix = np.ascontiguousarray(np.stack([v for _, v in items]), dtype=np.float32)
            self._db.dialect.insert_vectors(con, model, [h for h, _ in items], matrix,
                                            skip_existing=not few)
