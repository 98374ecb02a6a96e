"""The package declares ranges; the exact versions live in one constraints file.

A library user installs ``dmf-hybrid`` beside their own packages, so ``pyproject.toml`` asks
for ranges that work (no ``==``); the Makefile (and so CI) installs with ``-c constraints.txt``,
which pins every requirement, of every extra, to one set known to pass the suite.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found.extend(Requirement(r) for r in extra)
    return found


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{req.name} pinned twice"
        pins[name] = specs[0].version
    return pins


def test_the_package_asks_for_ranges_not_exact_versions() -> None:
    exact = [str(r) for r in _requirements()
             if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []


def test_every_requirement_is_pinned_once_within_its_range() -> None:
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside {req.specifier}")


def test_the_makefile_installs_through_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [line.strip() for line in makefile.splitlines()
                if re.search(r"\bpip install\b|\$\(PIP\)", line)]
    assert installs
    for line in installs:
        assert "--upgrade pip" in line or "$(PIP)" in line or "-c constraints.txt" in line, line
