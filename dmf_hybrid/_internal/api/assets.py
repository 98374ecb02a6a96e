"""Static files shipped inside installed packages, served by name from a fixed list.

The web inspector (``/ui``) and the offline API docs (``/docs``, ``/redoc``) serve only files
that exist in a package directory when the app starts: a request names one of them exactly or
gets 404, so no path can reach anything else and no route of this kind reads any data.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Iterable, Mapping
from importlib.resources.abc import Traversable

from fastapi import Request, Response

from ..errors import NotFound

#: The suffixes an asset directory may serve, and their media types.
MEDIA_TYPES: Mapping[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class PackagedAssets:
    """The files under one package directory (recursively) with a known suffix, by name.

    ``headers`` are added to every response (e.g. a Content-Security-Policy). Contents are read
    once, on first use; the ETag is a hash of the bytes, so a browser revalidates cheaply.
    """

    def __init__(self, root: Traversable, *, headers: Mapping[str, str] | None = None,
                 only: Iterable[str] | None = None) -> None:
        wanted = None if only is None else set(only)
        self._files = {name: item for name, item in _walk(root, "")
                       if wanted is None or name in wanted}
        self._cache: dict[str, tuple[bytes, str]] = {}
        self._headers = dict(headers or {})

    @property
    def names(self) -> list[str]:
        """Every servable name (a path relative to the root, with ``/``), sorted."""
        return sorted(self._files)

    def read(self, name: str) -> bytes:
        """The bytes of asset ``name``; NotFound if it is not one of :attr:`names`."""
        return self._load(name)[0]

    def _load(self, name: str) -> tuple[bytes, str]:
        if name not in self._files:
            raise NotFound(f"no such file: {name}")
        if name not in self._cache:
            body = self._files[name].read_bytes()
            self._cache[name] = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        return self._cache[name]

    def response(self, name: str, request: Request) -> Response:
        """Asset ``name`` (304 when the request's If-None-Match names its ETag); else NotFound."""
        body, tag = self._load(name)
        headers = {**self._headers, "ETag": tag, "Cache-Control": "no-cache",
                   "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=media_type(name), headers=headers)


def media_type(name: str) -> str:
    """The Content-Type an asset is served with."""
    suffix = name[name.rfind("."):] if "." in name else ""
    return MEDIA_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _walk(node: Traversable, prefix: str) -> Iterable[tuple[str, Traversable]]:
    for item in sorted(node.iterdir(), key=lambda t: t.name):
        name = prefix + item.name
        if item.is_dir():
            if not item.name.startswith(("_", ".")):
                yield from _walk(item, name + "/")
        elif any(item.name.endswith(s) for s in MEDIA_TYPES):
            yield name, item
