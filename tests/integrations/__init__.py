"""Tests of the framework adapters; shared: a memory and the front door it is reached by."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmf_hybrid import Memory, MemoryAPI, MemoryClient, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.store import _BEHIND

START_TIMEOUT = 10.0


@contextmanager
def door(kind: str, path: Path, embedder: Any) -> Iterator[tuple[MemoryAPI, Memory]]:
    """(front door, the memory behind it): a memory in ``path`` embedding with ``embedder``,
    itself (``kind="memory"``) or a MemoryClient on a real uvicorn server serving it."""
    memory = Memory.open(path, embedder=embedder, vector_index=ExactIndex())
    try:
        if kind == "memory":
            yield memory, memory
            return
        settings = Settings(data_dir=path.parent / f"{path.name}-server", embedder="hash",
                            load_examples=False)
        with serve_in_thread(create_app(settings, memory), timeout=START_TIMEOUT) as url, \
                MemoryClient(url, timeout=START_TIMEOUT * 3) as client:
            _BEHIND[id(client)] = memory  # so tests.store.dump reads the memory behind it
            try:
                yield client, memory
            finally:
                _BEHIND.pop(id(client), None)
    finally:
        memory.close()


def import_error(module: str, *blocked: str) -> str:
    """The ImportError message of importing ``module`` in a fresh interpreter where the
    packages ``blocked`` cannot be imported."""
    code = (f"import sys; sys.modules.update(dict.fromkeys({list(blocked)!r}))\n"
            f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True).stdout
