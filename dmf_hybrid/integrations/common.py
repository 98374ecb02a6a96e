"""What the framework adapters share: the memory they run on, its embedder, their types."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .._internal.errors import DMFError, NotFound
from .._internal.protocol import MemoryAPI
from .._internal.schema import TypeDef
from .embedder import CallerEmbedder

#: Most rows one query page reads while an adapter scans.
PAGE = 500
#: Most hits one search asks for (the memory's default ``max_k``).
MAX_K = 1000


def missing_extra(what: str, extra: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(f"{what} is not installed: pip install 'dmf-hybrid[server,{extra}]' "
                       f"(or 'dmf-hybrid[{extra}]' for the HTTP client alone)")


def embedder_for(embed: Any, dims: int | None = None) -> Any:
    """The Embedder of a framework's ``embed``: a model name this project loads
    (``embedder_named``), else the caller's function or ``Embeddings`` as a CallerEmbedder."""
    from .._internal.embeddings import EMBEDDERS, embedder_named  # the embedded memory's extra

    if isinstance(embed, str) and embed in EMBEDDERS:
        return embedder_named(embed)
    return CallerEmbedder(embed, dim=dims)


def private_memory(embedder: Any) -> MemoryAPI:
    """An in-memory embedded Memory (exact vectors) that embeds with ``embedder``."""
    # the embedded memory is the "server" extra; a MemoryClient user never imports it
    from .._internal.embeddings import HashEmbedder
    from .._internal.memory import Memory
    from .._internal.vector.exact import ExactIndex

    return Memory.open(None, embedder=embedder or HashEmbedder(), vector_index=ExactIndex())


def ensure_type(memory: MemoryAPI, typedef: TypeDef) -> None:
    """Define ``typedef`` unless the memory already has it as it is."""
    try:
        if memory.get_type(typedef.name).typedef == typedef:
            return
    except (NotFound, DMFError):
        pass
    memory.define_type(typedef)


def check_model(memory: MemoryAPI, type_name: str, embedder: Any) -> None:
    """ValueError unless ``memory`` embeds with ``embedder``'s model (its recorded model)."""
    used = memory.search(type_name, "model probe", k=1, mode="vector").receipt.model_id
    if used != embedder.model_id:
        raise ValueError(
            f"this memory embeds with {used!r}, not {embedder.model_id!r}: open it with "
            "Memory.open(path, embedder=CallerEmbedder(embed)) (or the server with that "
            "embedder), or pass no embedding to use the memory's own")


def scan(memory: MemoryAPI, type_name: str, where: Mapping[str, Any] | None,
         order_by: str | list[str] | None = None, stop: int | None = None) -> Iterator[Any]:
    """The entities a query matches, page after page (at most ``stop``)."""
    cursor = None
    seen = 0
    while True:
        limit = PAGE if stop is None else max(1, min(PAGE, stop - seen))
        page = memory.query(type_name, where, order_by=order_by, limit=limit, cursor=cursor)
        for entity in page.items:
            yield entity
            seen += 1
            if stop is not None and seen >= stop:
                return
        cursor = page.next_cursor
        if cursor is None:
            return
