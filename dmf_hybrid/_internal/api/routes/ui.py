"""The web inspector: static pages at ``/ui`` that read and edit through the HTTP API.

These routes serve only the HTML, CSS and JavaScript files of ``dmf_hybrid/_internal/api/ui``
(package data), by exact name, without a key: they carry no data. The pages ask the API for
everything, with the key the user entered (kept in the browser's sessionStorage), so every read and
write passes the same authentication, role and tenant checks as any other client. The
Content-Security-Policy lets the pages load and call nothing but this origin."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from ..assets import PackagedAssets

UI_URL = "/ui"
INDEX = "index.html"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

ASSETS = PackagedAssets(files("dmf_hybrid._internal.api").joinpath("ui"), headers={
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
})

router = APIRouter(prefix=UI_URL, include_in_schema=False)


@router.get("")
def ui_root() -> RedirectResponse:
    """``/ui`` → ``/ui/`` (the pages load their modules relative to it)."""
    return RedirectResponse(f"{UI_URL}/", status_code=307)


@router.get("/")
def ui_index(request: Request) -> Response:
    """The inspector's single page."""
    return ASSETS.response(INDEX, request)


@router.get("/{name:path}")
def ui_asset(name: str, request: Request) -> Response:
    """One of the inspector's files (404 for any other path)."""
    return ASSETS.response(name, request)
