"""A Chroma server of our own for the tests and the benchmarks: the ``chroma`` CLI of the
chromadb package (``chroma run``), a temporary directory, a free loopback port, no telemetry,
stopped (its whole process group) at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .ports import free_port

#: Seconds a server may take to answer its heartbeat (it imports chromadb first).
START_TIMEOUT = 60.0
#: Seconds it may take to stop before it is killed.
STOP_TIMEOUT = 10.0


def chroma_executable() -> str | None:
    """The ``chroma`` CLI beside this interpreter, else the one on PATH (None: neither)."""
    beside = Path(sys.executable).parent / "chroma"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("chroma")


class ChromaServer:
    """A running ``chroma run`` on 127.0.0.1 (``stop()`` stops it and removes its files;
    ``stop(remove=False)`` then ``start()`` is a restart on the same port and data)."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.dir = Path(tempfile.mkdtemp(prefix="dmf-chroma-"))
        self.port = free_port()
        self.log = self.dir / "server.log"
        self.start()

    def start(self) -> None:
        """Start the server and wait for its heartbeat."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.executable, "run", "--path", str(self.dir / "data"), "--host", "127.0.0.1",
                 "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chroma run exited with {self.proc.returncode}:\n"
                                   f"{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chroma run gave no heartbeat in {START_TIMEOUT:.0f} s:\n"
                                   f"{self.log.read_text()}")
            time.sleep(0.2)

    def stop(self, remove: bool = True) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and, with ``remove``, its directory."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT)
            except ProcessLookupError:
                pass
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)
