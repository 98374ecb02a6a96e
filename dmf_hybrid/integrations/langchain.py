"""LangChain over dmf-hybrid: ``DMFVectorStore`` (a ``VectorStore``) and ``DMFRetriever``.

``DMFVectorStore`` keeps each document as one entity of a type named after its collection
(``"langchain"`` -> ``Langchain``: ``text`` and ``metadata``, a ``json`` field): adding is
an audited create (or an update of the same ID; a deleted ID is restored), ``delete`` a soft
delete, similarity search the vector leg with the cosine as score. ``filter`` is this
project's filter language over metadata keys (``{"source": "a"}``,
``{"year": {"$gte": 2020}}``, ``$and`` / ``$or``), or a function of a ``Document``, as
LangChain's ``InMemoryVectorStore`` takes it (the search reads further until ``k`` pass).
``max_marginal_relevance_search`` (and so ``as_retriever(search_type="mmr")``) reranks the
``fetch_k`` most similar documents with LangChain's ``maximal_marginal_relevance`` over the
vectors of ``embedding``; searching by a vector is not offered (the memory embeds).

Vectors come from the memory's embedder: with ``memory=None`` an in-memory ``Memory`` embeds
with ``embedding`` (a ``CallerEmbedder`` with its own model ID); given a memory, ``embedding``
must be that memory's model (checked at start) or None to use the memory's own.

``DMFRetriever`` runs a type's search (hybrid by default) with ``k`` and ``where``; each
``Document`` holds the entity's embedded text and its data as metadata.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .._internal.errors import Conflict, NotFound, ValidationError
from .._internal.protocol import MemoryAPI
from .._internal.schema import FieldSpec, TypeDef
from .common import MAX_K, check_model, ensure_type, missing_extra, private_memory, scan
from .embedder import CallerEmbedder

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from langchain_core.vectorstores.utils import maximal_marginal_relevance
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise missing_extra("LangChain", "langchain") from exc

BOOL_OPS = ("$and", "$or")

DocumentFilter = Mapping[str, Any] | Callable[[Document], bool]


def collection_type(collection: str) -> str:
    """The entity type of a collection: ``"langchain"`` -> ``Langchain``, ``"my-docs"`` ->
    ``MyDocs``; ValidationError for a name that makes no type name."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", collection) if p] if isinstance(
        collection, str) else []
    name = "".join(p[0].upper() + p[1:] for p in parts)
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]{0,63}", name):
        raise ValidationError(f"collection {collection!r} must start with a letter and hold "
                              "letters, digits and separators", field="collection")
    return name


def document_typedef(type_name: str) -> TypeDef:
    """The entity type that holds a collection's documents."""
    return TypeDef(
        name=type_name, embed="{text}",
        description="LangChain documents (dmf_hybrid.integrations.langchain).",
        fields={"text": FieldSpec(type="str", required=True, nullable=False),
                "metadata": FieldSpec(type="json")},
    )


def metadata_filter(flt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A filter over metadata keys as a filter of the document type."""
    if not flt:
        return None
    if not isinstance(flt, Mapping):
        raise ValidationError("filter must be a mapping of metadata keys", field="filter")
    out: dict[str, Any] = {}
    for key, cond in flt.items():
        if key in BOOL_OPS and isinstance(cond, list):
            out[key] = [metadata_filter(c) or {} for c in cond]
        else:
            out[f"metadata.{key}"] = cond
    return out


def _document(entity: Any) -> Document:
    return Document(id=entity.id, page_content=entity.data.text,
                    metadata=dict(entity.data.metadata or {}))


class DMFVectorStore(VectorStore):
    """A LangChain ``VectorStore`` whose documents are audited dmf-hybrid entities."""

    def __init__(self, embedding: Embeddings | None = None, *, memory: MemoryAPI | None = None,
                 collection: str = "langchain") -> None:
        self.type_name = collection_type(collection)
        self._embedding = embedding
        embedder = None if embedding is None else CallerEmbedder(embedding)
        self._owned = memory is None
        self.memory: MemoryAPI = private_memory(embedder) if memory is None else memory
        ensure_type(self.memory, document_typedef(self.type_name))
        if memory is not None and embedder is not None:
            check_model(self.memory, self.type_name, embedder)

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embedding

    def close(self) -> None:
        """Close the memory if this store opened it."""
        if self._owned:
            self.memory.close()

    # ---------------------------------------------------------------- writes

    def _upsert(self, text: str, metadata: Mapping[str, Any], eid: str | None) -> str:
        data = {"text": text, "metadata": dict(metadata)}
        try:
            entity = self.memory.create(self.type_name, data, id=eid or str(uuid.uuid4()))
        except Conflict as exc:
            gone = exc.details.get("entity_id")
            if not isinstance(gone, str) or "restore" not in exc.message:
                raise
            self.memory.restore(gone)  # a deleted ID added again comes back with the new text
            return str(self.memory.update(gone, data).id)
        if not entity.created:
            entity = self.memory.update(entity.id, data)
        return str(entity.id)

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Add or replace documents; an ID that is None (or no ``ids``) gets a new UUID."""
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        given: Sequence[str | None] = list(ids) if ids is not None else [None] * len(texts)
        if not len(metadatas) == len(given) == len(texts):
            raise ValidationError("texts, metadatas and ids must be as many", field="ids")
        return [self._upsert(t, m or {}, i) for t, m, i in zip(texts, metadatas, given,
                                                                strict=True)]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Soft-delete documents by ID (a missing ID is skipped); ``None``: every document."""
        if ids is None:
            ids = [e.id for e in self._all()]
        for eid in ids:
            try:
                self.memory.delete(eid)
            except NotFound:
                continue
        return True

    def _all(self) -> list[Any]:
        return list(scan(self.memory, self.type_name, None))

    # ---------------------------------------------------------------- reads

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        found = []
        for eid in ids:
            try:
                entity = self.memory.get(eid)
            except (NotFound, ValidationError):
                continue
            if entity.type == self.type_name:
                found.append(_document(entity))
        return found

    def similarity_search_with_score(self, query: str, k: int = 4,
                                     filter: DocumentFilter | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        if not callable(filter):
            hits = self.memory.search(self.type_name, query, where=metadata_filter(filter),
                                      k=k, mode="vector").hits
            return [(_document(h.entity), h.score) for h in hits]
        depth = k
        while True:  # a function is applied to the ranking, read until k documents pass
            hits = self.memory.search(self.type_name, query, k=depth, mode="vector").hits
            passing = [(d, h.score) for h in hits if filter(d := _document(h.entity))]
            if len(passing) >= k or len(hits) < depth or depth >= MAX_K:
                return passing[:k]
            depth = min(MAX_K, depth * 4)

    def similarity_search(self, query: str, k: int = 4,
                          filter: DocumentFilter | None = None,
                          **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter)]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20,
                                      lambda_mult: float = 0.5,
                                      filter: DocumentFilter | None = None,
                                      **kwargs: Any) -> list[Document]:
        """``k`` of the ``fetch_k`` documents most similar to ``query``, chosen by maximal
        marginal relevance (``lambda_mult``: 1 similarity alone, 0 diversity alone)."""
        if self._embedding is None:
            raise ValidationError("max marginal relevance compares document vectors: open "
                                  "the store with the embedding its memory uses",
                                  field="embedding")
        docs = [d for d, _ in self.similarity_search_with_score(query, fetch_k, filter)]
        if not docs:
            return []
        vectors = self._embedding.embed_documents([d.page_content for d in docs])
        chosen = maximal_marginal_relevance(
            np.asarray(self._embedding.embed_query(query), dtype=np.float32), vectors,
            lambda_mult=lambda_mult, k=k)
        return [docs[i] for i in chosen]

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: (score + 1.0) / 2.0  # cosine in [-1, 1] -> [0, 1]

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings,
                   metadatas: list[dict] | None = None, *, ids: list[str] | None = None,
                   memory: MemoryAPI | None = None, collection: str = "langchain",
                   **kwargs: Any) -> DMFVectorStore:
        store = cls(embedding, memory=memory, collection=collection)
        store.add_texts(texts, metadatas, ids=ids)
        return store


class DMFRetriever(BaseRetriever):
    """A LangChain retriever over any dmf-hybrid type's search (hybrid by default).

    Each Document's ``page_content`` is the entity's embedded text; its metadata the entity's
    data with ``id``, ``type`` and ``score``. ``invoke(query, k=..., where=...)`` overrides
    the constructor's ``k`` and ``where``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any
    type_name: str
    k: int = 4
    where: dict[str, Any] | None = None
    mode: str = "hybrid"

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        k = kwargs.get("k", self.k)
        where = kwargs.get("where", self.where)
        result = self.memory.search(self.type_name, query, where=where, k=k, mode=self.mode)
        etype = self.memory.get_type(self.type_name)
        docs = []
        for hit in result.hits:
            data = hit.entity.data.model_dump(mode="json")
            docs.append(Document(
                id=hit.entity.id, page_content=etype.embed_text(hit.entity.data.model_dump())
                or "", metadata={**data, "id": hit.entity.id, "type": hit.entity.type,
                                 "score": hit.score}))
        return docs
