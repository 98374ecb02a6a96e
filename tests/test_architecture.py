"""The house: one direction of imports (import-linter contracts), no cycles, small modules, and one
owner of the database (only ``dmf_hybrid._internal.store`` imports a driver or holds SQL)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dmf_hybrid"
#: the implementation (every module but the public package and its framework adapters)
INTERNAL = PACKAGE / "_internal"
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


#: A SQL statement in a string (f-strings read with their placeholders as "{}").
SQL_TEXT = re.compile(
    r"\bSELECT\b.+\bFROM\b|\bINSERT INTO\b|\bUPDATE\s+\S+\s+SET\b|\bDELETE FROM\b|"
    r"\bCREATE (OR REPLACE )?(TEMP )?(TABLE|VIEW|INDEX|SEQUENCE)\b|"
    r"\b(ALTER|DROP) (TABLE|VIEW|INDEX)\b|\b(EXPORT|IMPORT) DATABASE\b|\bCOPY \(|"
    r"\bBEGIN TRANSACTION\b", re.S)
DRIVERS = ("duckdb", "psycopg", "psycopg_pool")


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}"
                                       for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _outside_store() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if not p.is_relative_to(INTERNAL / "store")]


def test_no_module_outside_the_store_holds_sql() -> None:
    found = [f"{p.relative_to(ROOT)}:{line}: {text[:60]!r}" for p in _outside_store()
             for line, text in _strings(ast.parse(p.read_text(encoding="utf-8")))
             if SQL_TEXT.search(text)]
    assert not found, "SQL outside dmf_hybrid/_internal/store:\n" + "\n".join(found)


def test_the_sql_check_finds_sql_as_the_store_writes_it() -> None:
    # the store's own modules are full of it: the check above is not blind
    store = [p for p in INTERNAL.joinpath("store").rglob("*.py")
             if any(SQL_TEXT.search(t) for _, t in _strings(ast.parse(p.read_text("utf-8"))))]
    assert len(store) >= 10
    assert SQL_TEXT.search('SELECT {} FROM {} WHERE id = ?')
    assert not SQL_TEXT.search("DELETE") and not SQL_TEXT.search("select a mode from the list")


def test_no_module_outside_the_store_imports_a_database_driver() -> None:
    # lazy imports inside functions too (the import contract sees those as well)
    found = []
    for path in _outside_store():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names
                      if n.split(".")[0] in DRIVERS]
    assert not found, found


def test_events_are_numbered_and_chained_in_one_place() -> None:
    # every append of an audit event, single or in bulk, goes through AuditLog.append_many;
    # the one other maker of events is the migration that re-chains a store's log per tenant
    callers = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                     for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                     if isinstance(node, ast.Call) and (
                         getattr(node.func, "attr", None) == "make_event"
                         or getattr(node.func, "id", None) == "make_event"))
    assert callers == ["dmf_hybrid/_internal/store/chain.py",
                       "dmf_hybrid/_internal/store/rechain.py"]


def test_the_store_is_composed_not_inherited() -> None:
    """The store's parts get their collaborators as arguments: none inherits another (the
    mixin tower they replaced shared every attribute implicitly)."""
    from dmf_hybrid._internal.store.store import Store

    store = Store(None)
    try:
        parts = [store.rows, store.timetravel, store.queries, store.writes, store.bulk,
                 store.relations, store.hooks, store.log, store.registry]
        for part in [store, *parts]:
            assert type(part).__bases__ == (object,), type(part)
        assert store.writes.rows is store.rows and store.bulk.writes is store.writes
        assert store.relations.timetravel is store.timetravel
    finally:
        store.close()


def test_the_driver_contract_covers_every_module_but_the_store() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["id"] == "store-owns-the-database")
    def modules(package: Path) -> set[str]:
        return {p.stem if p.is_file() else p.name for p in package.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__")
                or (p.is_dir() and (p / "__init__.py").is_file())}

    assert set(contract["source_modules"]) == (
        {f"dmf_hybrid.{m}" for m in modules(PACKAGE) - {"_internal"}}
        | {f"dmf_hybrid._internal.{m}" for m in modules(INTERNAL) - {"store"}})
    assert set(DRIVERS) <= set(contract["forbidden_modules"])


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
