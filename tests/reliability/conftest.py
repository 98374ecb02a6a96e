"""Fixtures of the reliability tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.duckdb_144 import install_old_duckdb


@pytest.fixture(scope="session")
def old_duckdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding duckdb 1.4.4, to put on a subprocess's PYTHONPATH."""
    return install_old_duckdb(tmp_path_factory.mktemp("duckdb-1.4.4"))
