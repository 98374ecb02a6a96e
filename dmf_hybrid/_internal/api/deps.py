"""Dependencies of the routes: the service state, the caller, their tenant's Memory, audit context.

Routes take ``ReaderMemory`` / ``WriterMemory`` / ``AdminMemory`` (a Memory confined to the
caller's tenant, after checking their role) and ``Audit`` (actor, reason, trace id).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Request, Response, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from .. import checks
from ..config import Settings
from ..errors import ServiceUnavailable, ValidationError
from ..memory import Memory
from .auth import KeyRing, Principal, Role
from .fair import FairPool
from .headers import HEADER_TEXT, decode_header_text
from .kept import KeptAnswers

log = logging.getLogger(__name__)

StartupTask = Callable[[Memory], object]
T = TypeVar("T")


@dataclass
class ServiceState:
    """What the app holds: settings, the root Memory, the keys, the warm-up progress and the
    threads searches run in."""

    settings: Settings
    memory: Memory
    keys: KeyRing
    owns_memory: bool = False
    startup_tasks: Sequence[StartupTask] = ()
    warming_up: bool = False
    warmup_error: str | None = None
    #: searches :mod:`.fast_search` answered without FastAPI's routing
    fast_searches: int = 0
    _thread: threading.Thread | None = field(default=None, repr=False)
    _sweeper: threading.Thread | None = field(default=None, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    _search_pool: FairPool | None = field(default=None, repr=False)
    #: GET /tools answers, built once per state of the schema (``routes.tools``)
    tool_answers: KeptAnswers = field(default_factory=KeptAnswers, repr=False)
    _pool_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _closed: bool = field(default=False, repr=False)

    async def run_search(self, search: Callable[..., T], memory: Memory, *args: Any) -> T:
        """``search(memory, *args)`` in one of the service's search threads, in the caller's
        context (its principal); when all ``search_threads`` are busy it waits its turn, and
        the tenants' turns alternate (:class:`~.fair.FairPool`): a tenant that queues many
        searches delays another tenant's by at most one of its own.

        A pool of its own, bounded by the cores, instead of the framework's 40 threads:
        searches are CPU work that holds the GIL for part of the time, and with more of them
        running than there are cores the threads mostly take the GIL from each other
        (docs/benchmarks.md, "HTTP search threads").
        """
        context = contextvars.copy_context()
        future = self._searches().submit(memory.tenant,
                                         partial(context.run, search, memory, *args))
        return await asyncio.wrap_future(future)

    def _searches(self) -> FairPool:
        with self._pool_lock:
            if self._closed:
                raise ServiceUnavailable("the service is shutting down")
            if self._search_pool is None:
                self._search_pool = FairPool(self.settings.search_thread_count(),
                                             name="dmf-search")
            return self._search_pool

    def start_warmup(self) -> None:
        """Run the startup tasks, load the model, drain the outbox and load the search
        mirrors in the background."""
        self.warming_up = True
        self._thread = threading.Thread(target=self._warm_up, name="dmf-warmup", daemon=True)
        self._thread.start()
        if self.settings.expiry_sweep_seconds > 0:
            self._sweeper = threading.Thread(target=self._sweep, name="dmf-expiry",
                                             daemon=True)
            self._sweeper.start()

    def _sweep(self) -> None:
        """Every ``expiry_sweep_seconds``, soft-delete what has expired (every tenant)."""
        while not self._stopping.wait(self.settings.expiry_sweep_seconds):
            try:
                swept = self.memory.sweep_every_tenant()
                if swept:
                    log.info("expiry sweep: %d entities soft-deleted", swept)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("expiry sweep failed")

    def _warm_up(self) -> None:
        try:
            for task in self.startup_tasks:
                task(self.memory)
            load = getattr(self.memory.engine.embedder, "load", None)
            if callable(load):
                load()
            self.memory.engine.catch_up()
            self.memory.flush()
            self.memory.engine.warm()
        except Exception as exc:  # noqa: BLE001 - reported by /readyz, the process stays alive
            log.exception("warm-up failed")
            self.warmup_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.warming_up = False

    def stop_warmup(self, timeout: float = 30.0) -> None:
        """Wait (bounded) for the warm-up thread before the memory closes."""
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Stop the warm-up, let running searches finish (queued ones are cancelled) and
        close the memory if this service opened it (idempotent)."""
        self.stop_warmup()
        self._stopping.set()
        if self._sweeper is not None:
            self._sweeper.join(30.0)
        with self._pool_lock:
            self._closed = True
            pool, self._search_pool = self._search_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self.owns_memory:
            self.owns_memory = False
            self.memory.close()

    def readiness(self) -> dict[str, Any]:
        """Whether the model is loaded and the outbox drained, and what is missing if not."""
        engine = self.memory.engine
        loaded = bool(getattr(engine.embedder, "loaded", True))
        try:
            pending = int(engine.indexer.pending())
        except Exception as exc:  # noqa: BLE001 - a closed or broken store is "not ready"
            log.warning("readiness: cannot count outbox rows: %s", exc)
            pending = -1
        problems = []
        if self.warming_up:
            problems.append("warming up (loading example data, model or index)")
        if self.warmup_error:
            problems.append(f"warm-up failed: {self.warmup_error}")
        if not loaded:
            problems.append("embedding model not loaded yet")
        if pending and not engine.indexer.relayed:  # (relayed: the relay's backlog, which
            # searches cover from the outbox; not this process's readiness)
            problems.append(f"{pending} outbox rows not yet indexed" if pending > 0
                            else "cannot read the outbox")
        return {"ready": not problems, "model_loaded": loaded, "outbox_pending": pending,
                "warming_up": self.warming_up, "problems": problems}


async def get_state(request: Request) -> ServiceState:
    """The ServiceState of the app serving ``request``.

    This and the other dependencies that neither block nor wait are ``async``: FastAPI runs a
    plain ``def`` dependency in its thread pool, a hop to a worker thread and back per
    dependency and request (0.6-0.8 ms of server CPU per search, measured at 1 and 16 clients).
    """
    state: ServiceState = request.app.state.dmf
    return state


State = Annotated[ServiceState, Depends(get_state)]

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <API key>")


#: The principal audit events record for writes of a service running open (without keys).
OPEN_PRINCIPAL = "open"


def resolve_principal(state: ServiceState, bearer_token: str | None,
                      api_key: str | None) -> Principal:
    """The caller of a request, from its bearer token or else its ``X-API-Key`` (open mode: the
    default principal); the one place a request's caller is resolved, for the routes and the
    search fast path alike.
    """
    return state.keys.authenticate(bearer_token if bearer_token is not None else api_key)


def tenant_memory(state: ServiceState, principal: Principal, role: Role) -> Memory:
    """The caller's tenant's memory, once the caller is known to hold ``role``; its writes
    record the caller's key (its label, or ``open`` without keys) as their principal."""
    principal.require(role)
    return state.memory.for_tenant(principal.tenant,
                                   principal=principal.key_label or OPEN_PRINCIPAL)


async def get_principal(
    state: State,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    api_key: Annotated[str | None, Security(_api_key)],
) -> Principal:
    """The caller, from ``Authorization: Bearer`` or ``X-API-Key``."""
    return resolve_principal(state, None if bearer is None else bearer.credentials, api_key)


Caller = Annotated[Principal, Depends(get_principal)]


def _memory_for(role: Role) -> Callable[[ServiceState, Principal], Awaitable[Memory]]:
    async def dependency(state: State, principal: Caller) -> Memory:
        return tenant_memory(state, principal, role)

    dependency.__name__ = f"{role.name.lower()}_memory"
    return dependency


ReaderMemory = Annotated[Memory, Depends(_memory_for(Role.READER))]
WriterMemory = Annotated[Memory, Depends(_memory_for(Role.WRITER))]
AdminMemory = Annotated[Memory, Depends(_memory_for(Role.ADMIN))]


@dataclass(frozen=True)
class AuditContext:
    """Who does a write and why, recorded in its audit event."""

    actor: str | None
    reason: str | None
    trace_id: str | None

    def kwargs(self) -> dict[str, Any]:
        """``actor``, ``reason`` and ``trace_id`` as keyword arguments of a Memory write."""
        return {"actor": self.actor, "reason": self.reason, "trace_id": self.trace_id}


def _header_text(value: str | None, header: str, name: str) -> str | None:
    # the Memory write checks type and length and names the field (actor, reason, trace_id)
    return None if value is None else decode_header_text(value, header, name)


async def get_audit_context(
    principal: Caller,
    x_actor: Annotated[str | None, Header(description="Who makes the change. " + HEADER_TEXT
                                          )] = None,
    x_reason: Annotated[str | None, Header(description="Why. " + HEADER_TEXT)] = None,
    x_trace_id: Annotated[str | None, Header(description="Trace ID to correlate events. "
                                             + HEADER_TEXT)] = None,
) -> AuditContext:
    """The audit context of a write; with API keys the actor defaults to the key's label."""
    actor = _header_text(x_actor, "X-Actor", "actor") or principal.key_label
    return AuditContext(actor, _header_text(x_reason, "X-Reason", "reason"),
                        _header_text(x_trace_id, "X-Trace-Id", "trace_id"))


Audit = Annotated[AuditContext, Depends(get_audit_context)]


def parse_as_of(value: str | None) -> int | dt.datetime | None:
    """An ``as_of`` query parameter: an audit seq or an ISO-8601 time (naive = UTC)."""
    return checks.parse_as_of(value)


def parse_if_match(value: str | None) -> int | None:
    """The expected version an ``If-Match`` header carries (``"3"``, ``W/"3"``, ``3``; * = any)."""
    if value is None:
        return None
    text = value.strip()
    if text == "*":
        return None
    if text.startswith("W/"):
        text = text[2:]
    text = text.strip('"')
    if not text.isdigit() or len(text) > 18:
        raise ValidationError(f'If-Match must be an entity version ETag like "3", not {value!r}',
                              field="If-Match")
    return int(text)


IfMatch = Annotated[str | None, Header(description='ETag of the expected version, e.g. "3".')]


def etag(version: int) -> str:
    """The ETag of an entity version."""
    return f'"{version}"'


def model_response(model: BaseModel) -> Response:
    """``model`` as a 200 JSON response, serialised once, by pydantic, in the calling thread.

    For a returned model FastAPI dumps it to Python objects, validates those against the
    route's response model and serialises that, the validation in a worker thread of its
    own; a route on a hot path returns this instead and names its model in
    ``response_model`` for the OpenAPI schema. The bytes are the same (tested); the server
    spends about 0.7 ms less CPU per vector search (measured).
    """
    return Response(model.model_dump_json(), media_type="application/json")
