"""How errors leave the service: every error is ``{"error": code, "message", "details"}``.

- a :class:`DMFError` keeps its own status and code;
- request validation errors become 422 ``validation_error`` naming the field;
- a body over ``max_body_bytes`` is 413 ``limit_exceeded`` (rejected before it is read whole);
- anything else is a bug: logged with its traceback, answered 500 ``internal_error``.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import DMFError, LimitExceeded, Unauthorized, field_of, raised_check

log = logging.getLogger(__name__)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type"}
_LOC_PREFIXES = ("body", "query", "path", "header", "cookie")


def error_response(status: int, payload: dict[str, Any],
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON error response."""
    return JSONResponse(payload, status_code=status, headers=headers)


def dmf_error_response(exc: DMFError) -> JSONResponse:
    """The response of a DMFError: its status code and payload."""
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return error_response(exc.status_code, exc.to_payload(), headers)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def validation_payload(exc: RequestValidationError) -> dict[str, Any]:
    """The 422 body of a request validation error, naming the first bad field."""
    errors = list(exc.errors())
    if not errors:
        return {"error": "validation_error", "message": "invalid request", "details": {}}
    first = errors[0]
    field = field_of(first.get("loc", ()), _LOC_PREFIXES)
    msg = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        field, msg = "body", f"invalid JSON: {first.get('ctx', {}).get('error', msg)}"
    items = [{"field": field_of(e.get("loc", ()), _LOC_PREFIXES), "msg": str(e.get("msg")),
              "type": e.get("type")} for e in errors[:20]]
    return {"error": "validation_error", "message": f"{field}: {msg}",
            "details": {"field": field, "errors": _jsonable(items)}}


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every error into the one JSON shape."""

    async def on_dmf_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DMFError)
        return dmf_error_response(exc)

    async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        raised = raised_check(errors[0]) if errors else None
        if raised is not None:  # one of our checks: the error Memory raises for it
            return dmf_error_response(raised)
        return error_response(422, validation_payload(exc))

    async def on_http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if isinstance(exc, BodyTooLarge):
            return error_response(413, LimitExceeded(str(exc.detail), field="body",
                                                     limit=exc.limit).to_payload())
        if isinstance(exc, InvalidText):
            return error_response(422, {"error": "validation_error", "message": str(exc.detail),
                                        "details": {"field": "body"}})
        if exc.status_code == 400:  # FastAPI could not parse the body (e.g. nested too deep)
            return error_response(422, {"error": "validation_error",
                                        "message": f"body: {exc.detail}",
                                        "details": {"field": "body"}})
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code,
                              {"error": code, "message": str(exc.detail), "details": {}},
                              dict(exc.headers) if exc.headers else None)

    app.add_exception_handler(DMFError, on_dmf_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)


class InvalidText(StarletteHTTPException):
    """Raised inside ``receive`` when a JSON body escapes a lone UTF-16 surrogate (``\\ud800``).

    Python's JSON parser accepts those escapes, but the string cannot be encoded as UTF-8, so
    it could be neither hashed, stored nor returned: refuse it before anything reads it.
    """

    def __init__(self) -> None:
        super().__init__(422, "body: text must be valid Unicode (a \\u escape names a lone "
                              "surrogate)")


_ESCAPE = re.compile(rb"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


def has_lone_surrogate(body: bytes) -> bool:
    """True when a JSON text escapes a UTF-16 surrogate that is not part of a valid pair."""
    if b"\\u" not in body:
        return False
    pending_high: int | None = None  # end offset of an unpaired high surrogate escape
    for match in _ESCAPE.finditer(body):
        code = match.group(1)
        unit = int(code[1:], 16) if code[:1] == b"u" else None
        if pending_high is not None:
            if unit is not None and 0xDC00 <= unit <= 0xDFFF and match.start() == pending_high:
                pending_high = None
                continue
            return True
        if unit is None:
            continue
        if 0xD800 <= unit <= 0xDBFF:
            pending_high = match.end()
        elif 0xDC00 <= unit <= 0xDFFF:
            return True
    return pending_high is not None


class BodyTooLarge(StarletteHTTPException):
    """Raised inside ``receive`` when a streamed body passes the limit (FastAPI re-raises it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")
        self.limit = limit


class GuardMiddleware:
    """Limits request bodies to ``max_body_bytes`` (413) and turns uncaught bugs into 500 JSON."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self) -> JSONResponse:
        err = LimitExceeded(f"request body is larger than {self.max_body_bytes} bytes",
                            field="body", limit=self.max_body_bytes)
        return error_response(413, err.to_payload())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_large = int(value) > self.max_body_bytes
                except ValueError:
                    too_large = False
                if too_large:
                    await self._too_large()(scope, receive, send)
                    return
        received = 0
        started = False
        escaped: list[bytes] = []  # the body so far, kept only once it has a backslash

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received += len(chunk)
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
                if escaped or b"\\" in chunk:
                    escaped.append(chunk)
                if escaped and not message.get("more_body", False) \
                        and has_lone_surrogate(b"".join(escaped)):
                    raise InvalidText()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._too_large()(scope, receive, send)
        except InvalidText as exc:
            if not started:
                await error_response(422, {"error": "validation_error",
                                           "message": str(exc.detail),
                                           "details": {"field": "body"}})(scope, receive, send)
        except Exception:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if not started:
                response = error_response(500, {"error": "internal_error",
                                                "message": "internal server error (logged)",
                                                "details": {}})
                await response(scope, receive, send)


class ResponseHeaders:
    """Every answer carries ``X-Content-Type-Options: nosniff`` (a browser never reads a JSON
    body or an error as HTML or script), and JSON answers ``Cache-Control: no-store`` unless
    the route chose a cache policy (memory contents never sit in a shared or browser cache;
    the inspector's static files keep theirs)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if b"x-content-type-options" not in names:
                    headers.append((b"x-content-type-options", b"nosniff"))
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), b"")
                if content_type.startswith(b"application/json") and b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
