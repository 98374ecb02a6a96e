"""A PostgreSQL server of our own for the tests and the benchmarks: Debian's binaries, a
temporary directory, a free loopback port, stopped at the end.

``initdb`` and ``postgres`` refuse to run as root; as root, they run as the ``postgres`` user
(the directory is made theirs). Each test gets a database of its own (:meth:`PgServer.fresh`).
``durable=False`` (the tests) turns fsync off; a benchmark keeps PostgreSQL's defaults.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .ports import free_port

#: Where Debian puts the server's binaries (one directory per major version).
BIN_GLOB = "/usr/lib/postgresql/*/bin"


def binaries() -> Path | None:
    """The newest PostgreSQL bin directory with initdb, pg_ctl and postgres (None: none)."""
    found = sorted(glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name)
                   if Path(p).parent.name.isdigit() else 0)
    for directory in reversed(found):
        if all(os.access(Path(directory) / b, os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(directory)
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


class PgServer:
    """A running PostgreSQL server in a temporary directory (``stop()`` removes it)."""

    def __init__(self, bin_dir: Path, durable: bool = False) -> None:
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="dmf-pg-"))
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        self._names = itertools.count()
        if self._as_postgres:
            shutil.chown(self.dir, "postgres")
        data = self.dir / "data"
        self._run([str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                   "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=200")
        if not durable:
            options += " -c fsync=off -c full_page_writes=off"
        self._options = options
        self.data = data
        self._pg_ctl("start")

    def _pg_ctl(self, action: str) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self._options, "-w",
                   "-t", "60", "-m", "fast", "-l", str(self.dir / "log"), action])

    def restart(self) -> None:
        """Restart the server (a fast shutdown: every connection is closed by the server)."""
        self._pg_ctl("restart")

    def _run(self, argv: list[str]) -> None:
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       cwd=self.dir, timeout=120)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def fresh(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                       "-w", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
