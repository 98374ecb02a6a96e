"""The README and docs/*.md are part of the product: their examples run, the README's curl
walk-through answers on a fresh server, and together they document every setting, command
and route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dmf_hybrid._internal.cli import app
from dmf_hybrid._internal.config import Settings
from evaluation.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The long-form documentation the README links to.
DOC_FILES = sorted((ROOT / "docs").glob("*.md"))
#: The README and every docs/*.md: where a setting, a command or a route must be documented.
DOCS = "\n\n".join([README, *(p.read_text(encoding="utf-8") for p in DOC_FILES)])


def python_blocks() -> list[tuple[str, str]]:
    """(file, code) of every python block of the README and docs/*.md."""
    return [(path.name, code) for path in [ROOT / "README.md", *DOC_FILES]
            for code in re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"),
                                   flags=re.S)]


@pytest.mark.parametrize(("name", "code"), python_blocks(),
                         ids=[f"{name}-{i}" for i, (name, _) in enumerate(python_blocks())])
def test_python_blocks_run(name: str, code: str, tmp_path: Path) -> None:
    """Each python block runs as a script from the repository root (test embedder)."""
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "DMF_EMBEDDER": "hash", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_examples_import_only_public_names() -> None:
    """The README's, the docs' and examples/'s code imports the public package and its
    framework adapters, never the implementation (``dmf_hybrid._internal``)."""
    sources = [(f"{name} block", code) for name, code in python_blocks()]
    sources += [(p.name, p.read_text(encoding="utf-8"))
                for p in sorted((ROOT / "examples").glob("*.py"))]
    found = [f"{where}: {line.strip()}" for where, code in sources
             for line in code.splitlines()
             if re.search(r"^\s*(from|import)\s+dmf_hybrid\._", line)]
    assert not found, found
    assert len(sources) >= 10


def test_docs_document_every_setting() -> None:
    for name in Settings.model_fields:
        assert f"`DMF_{name.upper()}`" in DOCS, f"the docs lack DMF_{name.upper()}"


def test_readme_names_every_cli_command() -> None:
    commands = {c.name or (c.callback.__name__ if c.callback else "")
                for c in app.registered_commands}
    for command in commands:
        assert re.search(rf"\b{command}\b", README), f"README lacks the {command} command"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci and "make test" in README


def test_readme_curl_examples_answer(tmp_path: Path) -> None:
    """The README's curl lines, in order, work against a real server on a fresh store (as
    ``make serve`` starts it: no example data), twice (they are safe to run again)."""
    import threading
    import time

    import httpx

    from dmf_hybrid._internal.api.server import create_server

    port = free_port()
    settings = Settings(data_dir=tmp_path / "data", port=port, embedder="hash")
    server = create_server(settings, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and thread.is_alive(), "server not ready"
            time.sleep(0.1)
        shell = "".join(re.findall(r"```bash\n(.*?)```", README, flags=re.S))
        commands = re.findall(r"^(curl .*?)(?<!\\)\n(?!  )", shell, flags=re.M | re.S)
        assert len(commands) >= 10
        for command in commands * 2:
            command = command.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            done = subprocess.run(["bash", "-c", command + " -w '\\n%{http_code}'"],
                                  capture_output=True, text=True, timeout=60)
            status = done.stdout.strip().splitlines()[-1]
            assert status in ("200", "201"), (command, done.stdout[-2000:])
            if "/search" in command:  # "has my blue shirt shipped?", in English and Chinese
                hits = json.loads(done.stdout.strip().rsplit("\n", 1)[0])["hits"]
                assert [h["entity"]["data"]["status"] for h in hits] == ["shipped"], command
            if command.endswith("/history"):
                events = json.loads(done.stdout.strip().rsplit("\n", 1)[0])
                assert "改成公司" in [e["reason"] for e in events]
    finally:
        server.should_exit = True
        thread.join(60)


def test_readme_names_every_route() -> None:
    """Every path of the OpenAPI document has each of its literal segments in the README's
    route list (which writes ``/entities/{id}/append|restore|erase`` for three routes)."""
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.api import create_app

    routes = DOCS[DOCS.index("Routes (one router per resource"):]
    routes = routes[:routes.index("\n\n")]
    with Memory.open(None, embedder=HashEmbedder()) as mem:
        paths = create_app(Settings(load_examples=False), mem).openapi()["paths"]
    for path in paths:
        for segment in path.strip("/").split("/"):
            if not segment.startswith("{"):
                assert re.search(rf"[/|]{re.escape(segment)}\b", routes), \
                    f"the README's route list lacks {path}"
