"""The house: one direction of imports (import-linter contracts), no cycles, small modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dmf_hybrid"
#: A module a reader can take in one sitting: about 500 lines.
MAX_LINES = 550


def test_the_import_contracts_hold() -> None:
    # the contracts live in pyproject.toml ([tool.importlinter]) and are drawn in
    # docs/ARCHITECTURE.md: a lower stage importing a higher one breaks them
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("dmf_hybrid")
    modules = sorted(m for m in graph.modules if m != "dmf_hybrid")
    imports = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in graph.modules
                   and i != "dmf_hybrid" and not m.startswith(i + ".")} for m in modules}
    cycles = _cycles(imports)
    assert not cycles, f"import cycles: {cycles}"


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_result_is_a_validated_model() -> None:
    """No TypedDict in the package: a result crosses both doors as a pydantic model, which the
    client validates; a TypedDict would be an unchecked dict on the HTTP side."""
    import ast

    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.ImportFrom) else
                     [node.id] if isinstance(node, ast.Name) else
                     [node.attr] if isinstance(node, ast.Attribute) else [])
            if "TypedDict" in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"TypedDict used at {found}"
