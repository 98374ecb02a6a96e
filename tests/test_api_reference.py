"""The API reference is built from the docstrings (``make api-docs``, pdoc), here into a
temporary directory: every public name of ``dmf_hybrid.__all__`` and of the framework adapters
has its entry, no internal module gets a page, and no rendered text names a path outside the
repository."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

import dmf_hybrid
from dmf_hybrid.integrations import langchain, langgraph

#: the modules the reference documents: the package (its ``__all__``) and the two adapters
MODULES = ("dmf_hybrid", "dmf_hybrid.integrations.langgraph",
           "dmf_hybrid.integrations.langchain")
FOREIGN_PATHS = ("/work/", "../shared", "/tmp/", "/home/", "/root/")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api")
    subprocess.run([sys.executable, "-m", "pdoc", "--no-show-source", "-o", str(out), *MODULES],
                   check=True, capture_output=True, timeout=300)
    return out


def _text(page: Path) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def test_every_public_name_has_an_entry(reference: Path) -> None:
    page = (reference / "dmf_hybrid.html").read_text(encoding="utf-8")
    missing = [name for name in dmf_hybrid.__all__ if f'id="{name}"' not in page]
    assert missing == []
    for module, names in ((langgraph, ("DMFStore",)),
                          (langchain, ("DMFVectorStore", "DMFRetriever"))):
        adapter = (reference / "dmf_hybrid" / "integrations" /
                   f"{module.__name__.rsplit('.', 1)[1]}.html").read_text(encoding="utf-8")
        assert all(f'id="{name}"' in adapter for name in names), module.__name__


def test_no_internal_module_has_a_page(reference: Path) -> None:
    pages = sorted(p.relative_to(reference).as_posix() for p in reference.rglob("*.html"))
    assert pages == ["dmf_hybrid.html", "dmf_hybrid/integrations/langchain.html",
                     "dmf_hybrid/integrations/langgraph.html", "index.html"]


def test_no_docstring_names_a_path_outside_the_repository(reference: Path) -> None:
    found = [(page.name, path) for page in reference.rglob("*.html")
             for path in FOREIGN_PATHS if path in _text(page)]
    assert found == []
