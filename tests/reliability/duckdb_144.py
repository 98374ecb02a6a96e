"""duckdb 1.4.4, the release before the upgrade, installed beside the pinned one for tests.

The tests that use it write a store (or reproduce its index bug) in a subprocess running
duckdb 1.4.4 and read the result with the pinned duckdb in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OLD_DUCKDB = "1.4.4"
TIMEOUT = 300


def install_old_duckdb(target: Path) -> Path:
    """``pip install --target target duckdb==1.4.4``; the directory to put on PYTHONPATH."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         f"duckdb=={OLD_DUCKDB}"], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def run_python(script: str, *args: str, old_duckdb: Path | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter: this checkout first on the path, then duckdb
    1.4.4 when ``old_duckdb`` is given, then whatever this process has."""
    paths = [str(ROOT)] + ([str(old_duckdb)] if old_duckdb else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [*paths, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          cwd=cwd or ROOT, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON object a script printed last (its exit status must be 0)."""
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
