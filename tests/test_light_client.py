"""The light SDK: a fresh virtual environment with ``pip install <checkout>`` (no extras).

It gets the HTTP client and nothing of the server: no duckdb, chromadb or torch. The client
from that environment talks to a real server this test runs on 127.0.0.1, and importing the
embedded ``Memory`` there names the extra to install. Its ``dmf`` command says which extra it
needs instead of failing, and it installs no top-level package but ``dmf_hybrid`` (the
repository's ``evaluation/`` stays out of the wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

from dmf_hybrid import SERVER_EXTRA_HINT, HashEmbedder, Memory, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.command import MISSING_EXTRA
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = ("duckdb", "chromadb", "torch", "numpy", "fastapi", "sentence-transformers")
INSTALL_TIMEOUT = 900

CLIENT_SCRIPT = textwrap.dedent('''
    import json, sys
    from dmf_hybrid import MemoryClient, NotFound, Page, SearchResult

    with MemoryClient(sys.argv[1]) as mem:
        poi = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai", "cost": 40})
        again = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"})
        page = mem.query("Poi", where={"city": "Shanghai"})
        hits = mem.search("Poi", "garden in Shanghai", k=1)
        try:
            mem.get("Poi_missing")
            missing = "found"
        except NotFound as exc:
            missing = exc.code
        print(json.dumps({
            "id": poi.id, "created": [poi.created, again.created], "name": poi.data.name,
            "page": isinstance(page, Page) and [e.id for e in page.items],
            "hit": isinstance(hits, SearchResult) and hits.hits[0].entity.id,
            "missing": missing, "verified": mem.verify_audit().ok,
        }))
''')

MEMORY_SCRIPT = textwrap.dedent('''
    try:
        from dmf_hybrid import Memory
    except ImportError as exc:
        print(str(exc))
    else:
        print("imported")
''')


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    # without PYTHONPATH: the fresh environment must see its own install, not a checkout
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(args, capture_output=True, text=True, check=False, env=env,
                          timeout=INSTALL_TIMEOUT, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def light_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv with only ``pip install <checkout>``."""
    env_dir = tmp_path_factory.mktemp("light") / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "-q", str(ROOT)])
    assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.mark.slow
def test_the_base_install_has_no_server_dependencies(light_python: Path) -> None:
    listed = _run([str(light_python), "-m", "pip", "list", "--format", "json"])
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "dmf-hybrid" in installed
    assert not installed & set(SERVER_ONLY), sorted(installed & set(SERVER_ONLY))


@pytest.mark.slow
def test_memory_without_the_extra_names_it(light_python: Path) -> None:
    done = _run([str(light_python), "-c", MEMORY_SCRIPT], cwd="/")
    assert done.returncode == 0, done.stderr
    assert SERVER_EXTRA_HINT in done.stdout


@pytest.mark.slow
def test_the_dmf_command_names_the_extra_it_needs(light_python: Path) -> None:
    done = _run([str(light_python.parent / "dmf"), "serve"], cwd="/")
    assert done.returncode == MISSING_EXTRA and "Traceback" not in done.stderr
    assert SERVER_EXTRA_HINT in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_only_the_package_is_installed(light_python: Path) -> None:
    script = ("import importlib.metadata as m, importlib.util as u, json; "
              "files = m.files('dmf-hybrid'); "
              "print(json.dumps({'tops': sorted({f.parts[0] for f in files "
              "if f.suffix == '.py'}), 'evaluation': u.find_spec('evaluation') is not None, "
              "'bundled': sorted(__import__('importlib').import_module("
              "'dmf_hybrid._internal.bundled').bundled_types())}))")
    done = _run([str(light_python), "-c", script], cwd="/")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["tops"] == ["dmf_hybrid"] and answer["evaluation"] is False
    assert answer["bundled"] == ["Constraint", "MemorySummary", "Message"]  # package data


@pytest.mark.slow
def test_the_light_client_talks_to_a_real_server(light_python: Path, tmp_path: Path) -> None:
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(mem)
    settings = Settings(data_dir=tmp_path / "data", embedder="hash", load_examples=False)
    try:
        with serve_in_thread(create_app(settings, mem), timeout=10.0) as url:
            done = _run([str(light_python), "-c", CLIENT_SCRIPT, url], cwd="/")
        assert done.returncode == 0, done.stderr[-3000:]
        answer = json.loads(done.stdout)
        assert answer["created"] == [True, False] and answer["name"] == "Yu Garden"
        assert answer["page"] == [answer["id"]] and answer["hit"] == answer["id"]
        assert answer["missing"] == "not_found" and answer["verified"] is True
        assert mem.get(answer["id"]).data.city == "Shanghai"  # it wrote to this server
    finally:
        mem.close()
