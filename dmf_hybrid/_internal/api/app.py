"""The FastAPI application: ``create_app(settings, memory)``.

To serve another resource, write ``routes/<name>.py`` with a ``router`` and add it to
:data:`ROUTERS` (one line).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from ..config import Settings
from ..memory import Memory
from ..version import __version__
from ..wire import ErrorBody
from .auth import KeyRing
from .deps import ServiceState, StartupTask
from .errors import GuardMiddleware, ResponseHeaders, install_error_handlers
from .fast_search import SearchFastPath
from .routes import (
    admin,
    audit,
    conversations,
    docs,
    entities,
    health,
    lifecycle,
    plans,
    relations,
    search,
    tools,
    types,
    ui,
    whoami,
)
from .seqs import SeqHeaders

log = logging.getLogger(__name__)

ROUTERS: list[APIRouter] = [
    health.router,
    types.router,
    entities.router,
    conversations.router,
    relations.router,
    search.router,
    audit.router,
    admin.router,
    plans.router,
    tools.router,
    lifecycle.router,
    whoami.router,
    docs.router,
    ui.router,
]

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in ((401, "No or unknown API key"), (403, "The key's role does not allow it"),
                       (404, "Unknown ID or type (also for another tenant's IDs)"),
                       (409, "Conflicts with the current state"),
                       (412, "If-Match names a stale version"),
                       (413, "Request body too large"),
                       (422, "Invalid input; details.field names it"),
                       (503, "Model or index not ready, or X-DMF-Min-Seq not reached"))
}

DESCRIPTION = """A deterministic memory for AI agents: typed entities, relations, search and
an audit log. DuckDB is the truth; the vector index only proposes IDs.

Authenticate with `Authorization: Bearer <key>` or `X-API-Key: <key>` when the service has
keys. Writes take optional `X-Actor`, `X-Reason` and `X-Trace-Id` headers that are recorded
in the audit event; non-ASCII text in them is percent-encoded UTF-8 (`%E6%94%B9`), RFC 8187
(`UTF-8''%E6%94%B9`) or raw UTF-8 bytes, and anything else is refused (422). Every answer
carries `X-DMF-Seq` (the audit seq its process had reached; after a write, at least the
write's); a request with `X-DMF-Min-Seq: N` is answered from a state at or past seq N, or 503
after `min_seq_wait_seconds`. Errors are `{"error": code, "message", "details"}`."""


def create_app(settings: Settings, memory: Memory | None = None, *,
               keys: KeyRing | None = None,
               startup_tasks: Sequence[StartupTask] = (),
               owns_memory: bool | None = None) -> FastAPI:
    """The HTTP service over ``memory`` (default: open ``settings.data_dir``, closed on shutdown;
    ``owns_memory``: close a given one too).

    ``keys`` defaults to the keys of ``settings``. On startup (lifespan) a background thread runs
    ``startup_tasks``, loads the embedding model and drains the outbox; ``/readyz`` reports it.
    """
    keys = keys if keys is not None else KeyRing.from_settings(settings)
    owns = memory is None if owns_memory is None else owns_memory
    if memory is None:
        # the warm-up replays the outbox: a crash's backlog must not delay /healthz
        memory = Memory.open(settings.data_dir, settings=settings, replay=False)
    state = ServiceState(settings=settings, memory=memory, keys=keys, owns_memory=owns,
                         startup_tasks=tuple(startup_tasks))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state.start_warmup()
        try:
            yield
        finally:
            state.close()

    app = FastAPI(title="dmf-hybrid", version=__version__, description=DESCRIPTION,
                  lifespan=lifespan, responses=ERROR_RESPONSES,
                  docs_url=None, redoc_url=None)  # served offline by routes/docs.py
    app.state.dmf = state
    install_error_handlers(app)
    # added first, so it runs inside the guard (body limit, text checks, 500s)
    app.add_middleware(SearchFastPath)
    app.add_middleware(GuardMiddleware, max_body_bytes=settings.max_body_bytes)
    # around both: fast searches wait for a seq too, and the guard's answers carry the seq
    app.add_middleware(SeqHeaders)
    app.add_middleware(ResponseHeaders)  # outermost: the guard's own answers get them too
    for router in ROUTERS:
        app.include_router(router)
    return app
