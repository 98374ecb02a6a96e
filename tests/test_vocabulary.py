"""Each vocabulary of the protocol is declared once in the package.

The search modes and the link directions are ``Literal`` types in ``checks`` whose values the
checks, the plans, the tool schemas and the wire models all read; the ID pattern is one string
there; the filter language's descriptions live beside the filter parser. A second literal copy
anywhere (a tuple, a list, a set or a ``Literal``) is what lets two doors drift apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dmf_hybrid
from dmf_hybrid._internal.checks import DIRECTIONS, ID_PATTERN, SEARCH_MODES

PACKAGE = Path(dmf_hybrid.__file__).parent
VOCABULARIES = {"search modes": set(SEARCH_MODES), "directions": set(DIRECTIONS)}


def _string_collections(tree: ast.AST) -> list[tuple[int, set[str]]]:
    """Every tuple, list, set or ``Literal[...]`` subscript made only of string constants."""
    found = []
    for node in ast.walk(tree):
        elts: list[ast.expr] | None = None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = list(node.elts)
        if elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
            found.append((node.lineno, {e.value for e in elts}))  # type: ignore[attr-defined]
    return found


def test_modes_and_directions_are_declared_once() -> None:
    places: dict[str, list[str]] = {name: [] for name in VOCABULARIES}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, values in _string_collections(tree):
            for name, vocabulary in VOCABULARIES.items():
                if values == vocabulary:
                    places[name].append(f"{path.relative_to(PACKAGE)}:{line}")
    assert {name: [p.split(":")[0] for p in found] for name, found in places.items()} == {
        "search modes": ["_internal/checks.py"], "directions": ["_internal/checks.py"]}


def test_the_id_pattern_and_the_filter_descriptions_are_written_once() -> None:
    id_pattern, filter_docs = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == ID_PATTERN:
                id_pattern.append(path.name)
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id.startswith("FILTER_DOC")
                    for t in node.targets):
                filter_docs.append(path.name)
    assert id_pattern == ["checks.py"]
    assert filter_docs == ["filters.py", "filters.py"]
