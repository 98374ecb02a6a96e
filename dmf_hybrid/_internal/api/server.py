"""Serve the HTTP API with uvicorn: ``run(settings)``.

The server owns its data directory (DuckDB locks it per process); on PostgreSQL,
``settings.workers`` processes may serve one store behind one port (:func:`run_workers`).
The example domains of ``indexes/*.toml`` and, when the store is empty, their dataset are
loaded only when asked (``settings.load_examples``, ``dmf serve --demo``); the model loads in
the background (see ``/readyz``). The start-up log says which, where the API, its docs and the
inspector are once the port is bound, how a first start's model build is going, and when the
service is ready.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ..config import Settings, redact
from ..errors import DMFError, ValidationError
from ..examples import seed_examples
from ..memory import Memory
from ..vector.exact import ExactIndex
from ..version import __version__
from .app import create_app
from .auth import KeyRing, check_bind
from .deps import ServiceState, StartupTask

log = logging.getLogger(__name__)
#: How often ``run`` looks whether the warm-up has finished, to say so in the log.
READY_POLL_SECONDS = 0.5


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server that logs the URLs of the API, ``/docs`` and ``/ui`` once bound."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        bound = [s.getsockname() for server in getattr(self, "servers", [])
                 for s in (server.sockets or [])]
        port = bound[0][1] if bound else self.config.port
        for what, url in service_urls(self.config.host, port):
            log.info("%-9s %s", what, url)


def service_urls(host: str, port: int) -> list[tuple[str, str]]:
    """(what, URL) of the API, its OpenAPI docs and the web inspector on ``host:port``."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else \
        f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    return [("API", base), ("docs", f"{base}/docs"), ("inspector", f"{base}/ui")]


def log_to_stderr(level: int = logging.INFO) -> None:
    """Show the package's log records on stderr the way uvicorn shows its own (``dmf serve``)."""
    logger = logging.getLogger("dmf_hybrid")
    if any(isinstance(h, _StderrHandler) for h in logger.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(_LevelPrefix())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``log_to_stderr`` adds (recognised so it is added once). It writes to
    whatever ``sys.stderr`` is when a record comes, not the stream of the first ``dmf serve``
    in the process (which a harness running the CLI in-process closes afterwards)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass  # StreamHandler sets it; sys.stderr is read at each record instead


class _LevelPrefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname + ':':<9} {super().format(record)}"


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
    if settings.load_examples:
        log.info("example data: on (--demo): the example domains of indexes/*.toml, "
                 "and their dataset when the store is empty")
    else:
        log.info("example data: off (dmf serve --demo loads the example domains and data)")
    return AnnouncingServer(config)


#: The environment variable that hands a worker process the service's settings.
WORKER_SETTINGS_ENV = "DMF_WORKER_SETTINGS"


def run_workers(settings: Settings) -> None:
    """Serve with ``settings.workers`` processes behind one port (uvicorn's supervisor starts
    them and starts again one that dies); each opens the shared store itself."""
    if settings.store_url is None:
        raise ValidationError(
            f"workers={settings.workers} needs the shared engine: set store_url (dmf serve "
            "--store postgresql://..., DMF_STORE_URL); an embedded DuckDB file is one "
            "process's", field="store_url")
    keys = KeyRing.from_settings(settings)
    check_bind(settings.host, keys)
    log.info("dmf-hybrid %s: %d workers on %s, embedder %s, vectors %s", __version__,
             settings.workers, redact(settings.store_url), settings.embedder,
             settings.chroma_url or "in each worker's memory")
    os.environ[WORKER_SETTINGS_ENV] = settings.model_dump_json()
    uvicorn.run(f"{__name__}:worker_app", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, log_level="info", access_log=False)


def worker_app() -> Any:
    """The app of one worker process (:func:`run_workers`): the service's settings from the
    environment, its own connections, mirrors and (without a Chroma server) an in-memory
    vector index, filled from the store's embedding cache as it starts."""
    settings = Settings.model_validate_json(os.environ[WORKER_SETTINGS_ENV])
    vectors = None if settings.chroma_url else ExactIndex()
    memory = Memory.open(settings.data_dir, settings=settings, replay=False,
                         vector_index=vectors)
    tasks: list[StartupTask] = [_seed] if settings.load_examples else []
    return create_app(settings, memory, keys=KeyRing.from_settings(settings),
                      startup_tasks=tasks, owns_memory=True)


def run(settings: Settings) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM); the memory is closed on the way out."""
    if settings.workers > 1:
        run_workers(settings)
        return
    log.info("dmf-hybrid %s: memory %s, embedder %s", __version__, settings.data_dir.resolve(),
             settings.embedder)
    server = create_server(settings)
    state: ServiceState = server.config.app.state.dmf
    watcher = threading.Thread(target=_say_when_ready, args=(state, server), daemon=True,
                               name="dmf-ready-log")
    watcher.start()
    try:
        server.run()
    finally:
        state.close()


def _say_when_ready(state: ServiceState, server: Any) -> None:
    """Log once the warm-up (example data, model, index) has finished, or how it failed."""
    start = time.monotonic()
    log.info("loading the embedding model in the background; GET /readyz answers 200 once "
             "the service is ready")
    while not server.should_exit:
        if not server.started:  # the warm-up starts with the app, before the port is bound
            time.sleep(READY_POLL_SECONDS)
            continue
        if not state.warming_up and state.warmup_error is None and state.readiness()["ready"]:
            log.info("ready after %.1f s", time.monotonic() - start)
            return
        if state.warmup_error is not None:
            log.error("not ready: %s (GET /readyz)", state.warmup_error)
            return
        time.sleep(READY_POLL_SECONDS)


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


# python -m dmf_hybrid._internal.api.server (settings from DMF_* variables)
if __name__ == "__main__":
    log_to_stderr()
    try:
        run(Settings())
    except DMFError as exc:
        log.error("%s", exc)
        sys.exit(2)
