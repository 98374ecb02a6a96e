"""The client's HTTP exchange: one request, its answer or the error it carries, and the audit
seq the answers have told of (``X-DMF-Seq``; see :mod:`dmf_hybrid._internal.api.seqs`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from .errors import DMFError, ServiceUnavailable, ValidationError, error_from_payload
from .version import __version__
from .wire import MIN_SEQ_HEADER, SEQ_HEADER


class Exchange:
    """Requests to one service over one connection pool, as ``MemoryClient`` sends them."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float | None,
                 transport: httpx.BaseTransport | None, read_your_writes: bool) -> None:
        headers = {"User-Agent": f"dmf-hybrid-client/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url
        self.read_your_writes = read_your_writes
        self.seen_seq = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def send(self, method: str, path: str, *, json: Any = None,
             params: Mapping[str, Any] | None = None,
             headers: Mapping[str, str] | None = None) -> httpx.Response:
        """The answer to one request (a body as compact UTF-8 JSON); an answer of 400 or more
        is raised as the error it carries, a transport failure as ``ServiceUnavailable``."""
        all_headers = dict(headers or {})
        if self.read_your_writes and self.seen_seq:
            all_headers[MIN_SEQ_HEADER] = str(self.seen_seq)
        content = None
        if json is not None:
            content = _json_body(json)
            all_headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(
                method, path, content=content,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=all_headers)
        except httpx.TimeoutException as exc:
            raise ServiceUnavailable(f"{method} {path}: timed out ({exc})",
                                     url=self.base_url) from exc
        except httpx.TransportError as exc:
            raise ServiceUnavailable(f"cannot reach {self.base_url}: {exc}",
                                     url=self.base_url) from exc
        self._saw(response)
        if response.status_code >= 400:
            raise answer_error(response)
        return response

    def _saw(self, response: httpx.Response) -> None:
        text = response.headers.get(SEQ_HEADER, "")
        if text.isascii() and text.isdigit():
            with self._lock:
                self.seen_seq = max(self.seen_seq, int(text))


def _json_body(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")
    except ValueError:
        raise ValidationError("numbers must be finite (NaN and Infinity are not JSON)",
                              field="body") from None


def answer_error(response: httpx.Response) -> DMFError:
    """The error an answer of 400 or more carries (its JSON payload), else one quoting it."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "error" in payload:
        return error_from_payload(payload, response.status_code)
    text = response.text[:200]
    return DMFError(f"HTTP {response.status_code}: {text}", status=response.status_code)
