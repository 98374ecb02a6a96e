"""The peer ``bench_http`` measures the service against: a ``chroma run`` server, queried over
HTTP by a client that embeds each query itself with the same model.

That is what a user would otherwise deploy: Chroma's own server process holding the same
vectors (the rows embedded once here, with the service's model), and in the agent's process the
model plus ``chromadb.HttpClient``. Each request embeds its query (no cache: the query texts are
distinct) and asks the server for the ``k`` nearest, like ``POST /search`` with mode "vector"
does, minus filters, keyword leg, resolution and audit.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .chromaserver import ChromaServer, chroma_executable

log = logging.getLogger("bench_http")

COLLECTION = "bench_notes"
#: Rows per ``collection.add`` call while loading.
LOAD_BATCH = 500


class ChromaPeer:
    """A running ``chroma run`` server, its collection and the query-side model."""

    def __init__(self, server: ChromaServer, embedder: Any) -> None:
        import chromadb

        self.server, self.embedder = server, embedder
        self.proc = server.proc
        self.client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
        self.collection: Any = None

    def load(self, ids: Sequence[str], texts: Sequence[str],
             metadatas: Sequence[Mapping[str, Any]]) -> float:
        """Embed ``texts`` here and add them to a fresh cosine collection; seconds taken."""
        start = time.perf_counter()
        self.collection = self.client.get_or_create_collection(
            COLLECTION, metadata={"hnsw:space": "cosine"})
        for i in range(0, len(ids), LOAD_BATCH):
            part = list(texts[i:i + LOAD_BATCH])
            vectors = self.embedder.embed(part)
            self.collection.add(ids=list(ids[i:i + LOAD_BATCH]), embeddings=vectors,
                                documents=part, metadatas=[dict(m) for m in
                                                           metadatas[i:i + LOAD_BATCH]])
        return time.perf_counter() - start

    def search(self, text: str, k: int) -> list[str]:
        """The IDs of the ``k`` nearest notes to ``text`` (embedded here, queried there)."""
        vector = self.embedder.embed([text])
        found = self.collection.query(query_embeddings=vector, n_results=k,
                                      include=["distances", "documents", "metadatas"])
        return list(found["ids"][0])

def stop_process(proc: subprocess.Popen[bytes], log_file: Any, timeout: float) -> int:
    """Stop a child by its PID (SIGTERM, then SIGKILL after ``timeout``), close its log file;
    its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("process %d ignored SIGTERM for %.0f s: killing it", proc.pid, timeout)
            proc.kill()
            proc.wait(timeout)
    if log_file is not None:
        log_file.close()
    return int(proc.returncode)


@contextmanager
def running_peer(embedder: Any) -> Iterator[tuple[ChromaPeer, float]]:
    """A started ``chroma run`` server (:class:`~evaluation.chromaserver.ChromaServer`) and
    the seconds it took to answer its heartbeat."""
    started = time.perf_counter()
    exe = chroma_executable()
    if exe is None:
        raise RuntimeError("the chroma command is not installed (pip install chromadb)")
    server = ChromaServer(exe)
    try:
        yield ChromaPeer(server, embedder), time.perf_counter() - started
    finally:
        server.stop()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used (Linux ``/proc``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """The resident memory of a process in MB (Linux ``/proc``), or None.

    ``field``: "VmRSS" (now) or "VmHWM" (the peak since the process started).
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None
