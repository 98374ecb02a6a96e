"""The VectorIndex suite through ChromaIndex.http against a real ``chroma run`` server.

The server listens on 127.0.0.1 on a free port, stores into a temporary directory and is
stopped (its whole process group) when the module's tests finish.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dmf_hybrid.errors import ServiceUnavailable
from dmf_hybrid.vector import ChromaIndex, VectorIndex

from .test_vector_indexes import IndexContract

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def chroma_executable() -> str | None:
    """The ``chroma`` CLI of this venv, else the one on PATH."""
    beside = Path(sys.executable).parent / "chroma"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("chroma")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(host, port) of a fresh ``chroma run`` server."""
    exe = chroma_executable()
    if exe is None:
        pytest.skip("the `chroma` executable (from the chromadb package) is not installed")
    workdir = tmp_path_factory.mktemp("chroma_server")
    port = free_port()
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                exe,
                "run",
                "--path",
                str(workdir / "data"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group, killed as a whole below
            env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
        while True:
            if proc.poll() is not None:
                pytest.fail(f"chroma run exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"chroma run gave no heartbeat in {STARTUP_TIMEOUT_S} s:\n"
                    f"{log_path.read_text()}"
                )
            time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        stop_process_group(proc)


class TestChromaServer(IndexContract):
    @pytest.fixture
    def index(self, chroma_server: tuple[str, int]) -> Iterator[VectorIndex]:
        host, port = chroma_server
        index = ChromaIndex.http(host, port, batch_size=50)
        yield index
        index.close()

    def test_heartbeat(self, chroma_server: tuple[str, int]) -> None:
        index = ChromaIndex.http(*chroma_server)
        assert index.heartbeat()
        index.close()


def test_unreachable_server_is_service_unavailable() -> None:
    with pytest.raises(ServiceUnavailable):
        ChromaIndex.http("127.0.0.1", free_port())
