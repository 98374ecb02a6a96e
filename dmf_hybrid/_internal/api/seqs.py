"""The audit seq on the wire: every answer says how far its process had seen the caller's
tenant's log, and a request may ask for at least a seq.

Seqs are the tenant's own (each tenant's events are numbered 1, 2, 3...), so the caller is
resolved here from the request's key (:func:`.deps.resolve_principal`, the routes' own); a
request whose key is refused gets the route's 401, with no seq. ``X-DMF-Seq`` on every
answer: the newest seq of the tenant the answering process had seen committed when it
answered; after a write, at least the seq the write committed at (the request's own commit
is seen by then). ``X-DMF-Min-Seq`` on a request: answer from a state at or past that seq.
The process follows the log (the shared engine: other processes' commits too) and waits for
it, up to ``min_seq_wait_seconds``; a seq it still has not reached then is a 503
``unavailable`` naming both seqs (a seq of another store, or one not committed), never an
answer from an older state. ``MemoryClient`` sends the newest seq it has been told, so a
client reads its own writes, and never an older state than it has seen, whichever process
answers. Every read of the memory follows the log's head already; the header makes the
promise explicit and holds it for whatever answers from a process's own state.
"""

from __future__ import annotations

import time

import anyio
from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..checks import MAX_SEQ
from ..errors import DMFError, ServiceUnavailable, ValidationError
from ..memory import Memory
from ..wire import MIN_SEQ_HEADER, SEQ_HEADER
from .auth import Role
from .deps import ServiceState, resolve_principal, tenant_memory
from .errors import dmf_error_response

_MIN_SEQ = MIN_SEQ_HEADER.lower().encode("latin-1")
_SEQ = SEQ_HEADER.lower().encode("latin-1")
#: the first pause between two looks at the log while a request waits for a seq (doubling)
FIRST_PAUSE = 0.005


def min_seq_of(scope: Scope) -> int | None:
    """The seq a request asks for (``X-DMF-Min-Seq``), or None; a ValidationError naming
    ``min_seq`` when it is not one."""
    values = [v for name, v in scope.get("headers", []) if name.lower() == _MIN_SEQ]
    if not values:
        return None
    text = values[0].decode("latin-1").strip()
    if len(values) > 1 or not text.isascii() or not text.isdigit() or int(text) > MAX_SEQ:
        raise ValidationError(f"{MIN_SEQ_HEADER} must be one audit seq (an integer from 0 to "
                              f"{MAX_SEQ})", field="min_seq")
    return int(text)


def caller_memory(state: ServiceState, scope: Scope) -> Memory | None:
    """The memory of the request's tenant, or None if its key is refused (the route says so)."""
    bearer = api_key = None
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            text = value.decode("latin-1")
            scheme, credentials = get_authorization_scheme_param(text)
            if scheme.lower() == "bearer" and credentials:
                bearer = credentials
        elif name.lower() == b"x-api-key":
            api_key = value.decode("latin-1")
    try:
        return tenant_memory(state, resolve_principal(state, bearer, api_key), Role.READER)
    except DMFError:
        return None


async def reach(memory: Memory, wanted: int, wait_seconds: float) -> int:
    """The seq the process has reached, following the log until it is at least ``wanted``
    or ``wait_seconds`` have passed."""
    seen = memory.seen_seq()
    deadline = time.monotonic() + wait_seconds
    pause = FIRST_PAUSE
    while seen < wanted:
        seen = await anyio.to_thread.run_sync(memory.last_seq)  # looks at the log's head
        left = deadline - time.monotonic()
        if seen >= wanted or left <= 0:
            break
        await anyio.sleep(min(pause, left))
        pause *= 2
    return seen


class SeqHeaders:
    """Waits for a request's ``X-DMF-Min-Seq``; puts ``X-DMF-Seq`` on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(getattr(scope.get("app"), "state", None), "dmf", None)
        if scope["type"] != "http" or state is None:
            await self.app(scope, receive, send)
            return
        memory = None
        try:
            wanted = min_seq_of(scope)
            memory = caller_memory(state, scope)
            if memory is not None and wanted is not None:
                wait = state.settings.min_seq_wait_seconds
                seen = await reach(memory, wanted, wait)
                if seen < wanted:
                    raise ServiceUnavailable(
                        f"this service's state is at seq {seen}, not at the {wanted} the "
                        f"request asked for ({MIN_SEQ_HEADER}) after {wait:g} s: a seq of "
                        "another store, or one not committed", min_seq=wanted, seq=seen)
        except DMFError as exc:  # a bad header, a seq not reached, a store out of reach
            response = dmf_error_response(exc)
            if memory is not None:
                response.headers[SEQ_HEADER] = str(memory.seen_seq())
            if isinstance(exc, ServiceUnavailable):
                response.headers["Retry-After"] = "1"
            await response(scope, receive, send)
            return
        if memory is None:  # the route refuses the key (or needs none): no seq to tell
            await self.app(scope, receive, send)
            return
        told = memory

        async def with_seq(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(n, v) for n, v in message.get("headers", []) if n.lower() != _SEQ]
                headers.append((_SEQ, str(told.seen_seq()).encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_seq)
