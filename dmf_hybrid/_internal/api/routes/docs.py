"""API docs that work offline: Swagger UI at ``/docs`` and ReDoc at ``/redoc``.

FastAPI's own pages load their scripts from a CDN, so they are blank on a machine without
internet. These pages use the same HTML (FastAPI's ``get_swagger_ui_html`` / ``get_redoc_html``)
with the Swagger UI and ReDoc bundles that the ``fastapi-offline`` package ships, served from
``/docs/assets/``. The app is created with ``docs_url=None, redoc_url=None``.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

from ..assets import PackagedAssets

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"

ASSETS = PackagedAssets(files("fastapi_offline").joinpath("static"),
                        only=("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js",
                              "favicon.png"))

#: Swagger UI options: FastAPI's defaults, without the online spec validator badge (it would
#: send the document to validator.swagger.io).
SWAGGER_UI_PARAMETERS = {"dom_id": "#swagger-ui", "layout": "BaseLayout", "deepLinking": True,
                         "showExtensions": True, "showCommonExtensions": True,
                         "validatorUrl": None}

#: The docs pages may load and call nothing but this origin. ReDoc's side menu always shows a
#: logo from cdn.redoc.ly; this policy makes the browser refuse it instead of going online.
#: (FastAPI's pages start Swagger UI with an inline script; both bundles set inline styles.)
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

router = APIRouter(include_in_schema=False)


def _local_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return page


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get(DOCS_URL)
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI for the OpenAPI document, from local assets."""
    root = _root(request)
    return _local_only(get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    ))


@router.get(OAUTH2_REDIRECT_URL)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    """The page Swagger UI's OAuth2 flow returns to."""
    return _local_only(get_swagger_ui_oauth2_redirect_html())


@router.get(REDOC_URL)
def redoc(request: Request) -> HTMLResponse:
    """ReDoc for the OpenAPI document, from local assets and without web fonts."""
    root = _root(request)
    return _local_only(get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    ))


@router.get(ASSETS_URL + "/{name}")
def docs_asset(name: str, request: Request) -> Response:
    """One of the bundled Swagger UI / ReDoc files (404 for any other name)."""
    return ASSETS.response(name, request)
