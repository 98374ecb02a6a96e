"""``POST /search`` without FastAPI's routing and dependency solving, for requests that need
neither.

Most of the server's CPU for a search that does not embed went to the framework, not the search:
matching the path against every route, solving the dependencies (state, caller, role) and the
request's wrappers. This middleware sits inside :class:`~.errors.GuardMiddleware` (so the body limit
and the text checks still apply) and answers a plain search itself, with the same functions the
route's dependencies call: the key ring authenticates the caller, the principal needs the reader
role (:func:`~.deps.resolve_principal` and :func:`~.deps.tenant_memory`, the routes' own), the body
is parsed as JSON and validated as :class:`~dmf_hybrid._internal.requests.SearchRequest`, and the
route's own :func:`~.routes.search.answer` searches and serialises in the service's search threads
(:meth:`~.deps.ServiceState.run_search`).

Anything else goes the normal way, which then answers it: another path or method, a body that
is not JSON or does not validate, an ``Authorization`` header that is not one well-formed bearer
token, a key that does not authenticate or lacks the role, a repeated header this path reads, a
``root_path``. The body read so far is handed on unchanged, so those answers (and their errors)
are the normal path's. An error of the search itself is answered by the same handler the app
registers for it.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import DMFError
from ..memory import Memory
from ..requests import SearchRequest
from .auth import Role
from .deps import ServiceState, resolve_principal, tenant_memory
from .errors import dmf_error_response
from .routes.search import answer

PATH = "/search"


class SearchFastPath:
    """Serves well-formed, permitted ``POST /search`` requests; hands on everything else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or scope.get("path") != PATH or scope.get("root_path")):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the normal path sees it too
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        found = self._plan(scope, messages, bytes(body))
        if found is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        state, memory, request = found
        try:
            # searched and serialised in one search thread, as the route does
            response = await state.run_search(answer, memory, request)
        except DMFError as exc:
            await dmf_error_response(exc)(scope, receive, send)
            return
        state.fast_searches += 1
        await response(scope, receive, send)

    def _plan(self, scope: Scope, messages: list[Message], body: bytes
              ) -> tuple[ServiceState, Memory, SearchRequest] | None:
        """The caller's memory and the validated request, or None to go the normal way."""
        if messages[-1]["type"] != "http.request" or not body:
            return None
        headers = _headers(scope)
        if headers is None or not _is_json(headers.get("content-type")):
            return None
        bearer = None
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, credentials = get_authorization_scheme_param(authorization)
            if scheme.lower() != "bearer" or not credentials:
                return None
            bearer = credentials
        state: ServiceState = scope["app"].state.dmf
        try:
            principal = resolve_principal(state, bearer, headers.get("x-api-key"))
            memory = tenant_memory(state, principal, Role.READER)
            request = SearchRequest.model_validate(json.loads(body))
        except Exception:  # noqa: BLE001 - the normal path answers it, with its own error
            return None
        return state, memory, request


def _headers(scope: Scope) -> dict[str, str] | None:
    """The request's headers by lower-case name (None if a header the path reads repeats)."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        if name in out and name in ("authorization", "x-api-key", "content-type"):
            return None
        out[name] = raw_value.decode("latin-1")
    return out


def _is_json(content_type: str | None) -> bool:
    """Whether the body is declared as plain ``application/json`` (parameters allowed)."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives the messages already read, then the connection's own."""
    pending = list(messages)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
