"""Serve the HTTP API with uvicorn: ``run(settings)``.

The server owns its data directory (DuckDB locks it per process). On start it loads the
example domains of ``indexes/*.toml`` and, when the store is empty, the example dataset
(``settings.load_examples``); the model loads in the background (see ``/readyz``).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ..config import Settings
from ..errors import DMFError
from ..examples import seed_examples
from ..memory import Memory
from .app import create_app
from .auth import KeyRing, check_bind
from .deps import StartupTask

log = logging.getLogger(__name__)


def _seed(memory: Memory) -> None:
    counts = seed_examples(memory)
    if counts is not None:
        log.info("seeded the empty store with %s", counts)


def create_server(settings: Settings, memory: Memory | None = None, **uvicorn_options: Any
                  ) -> Any:
    """A ``uvicorn.Server`` for the app on settings.host:settings.port (not started yet).

    Refuses (ValidationError) an open service on a non-loopback address before opening
    anything. ``memory`` defaults to ``settings.data_dir``, closed when the server stops.
    """
    keys = KeyRing.from_settings(settings)
    check_bind(settings.host, keys)
    tasks: list[StartupTask] = [_seed] if settings.load_examples else []
    app = create_app(settings, memory, keys=keys, startup_tasks=tasks)
    options: dict[str, Any] = {"log_level": "info", "access_log": False, **uvicorn_options}
    config = uvicorn.Config(app, host=settings.host, port=settings.port, **options)
    if keys.open:
        log.warning("no API keys configured: serving tenant %r without authentication on %s",
                    settings.tenant, settings.host)
    return uvicorn.Server(config)


def run(settings: Settings) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM); the memory is closed on the way out."""
    server = create_server(settings)
    log.info("serving dmf-hybrid on http://%s:%d (docs at /docs)", settings.host, settings.port)
    try:
        server.run()
    finally:
        server.config.app.state.dmf.close()


@contextmanager
def serve_in_thread(app: Any, *, timeout: float = 30.0, **uvicorn_options: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn on a free 127.0.0.1 port in a thread; yields its base URL.

    For tests and benchmarks. RuntimeError if the server does not start, or does not stop
    within ``timeout`` seconds once the block ends.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           **uvicorn_options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
    if thread.is_alive():
        raise RuntimeError("uvicorn did not stop")


if __name__ == "__main__":  # python -m dmf_hybrid.api.server (settings from DMF_* variables)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    try:
        run(Settings())
    except DMFError as exc:
        log.error("%s", exc)
        sys.exit(2)
