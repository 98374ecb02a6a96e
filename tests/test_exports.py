"""The public names: one sorted ``__all__``, and every name in it imports."""

from __future__ import annotations

import importlib

import dmf_hybrid


def test_all_is_sorted_and_unique() -> None:
    names = list(dmf_hybrid.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))


def test_every_exported_name_imports() -> None:
    module = importlib.import_module("dmf_hybrid")
    for name in dmf_hybrid.__all__:
        assert hasattr(module, name), name
        value = getattr(module, name)
        assert value is not None
        if isinstance(value, type):  # exported classes say where they live
            assert value.__module__.startswith("dmf_hybrid."), (name, value.__module__)


def test_public_classes_are_exported() -> None:
    """Every error class and result model defined in the core is reachable from the package."""
    from dmf_hybrid._internal import errors, models

    for module in (errors, models):
        for name, value in vars(module).items():
            if isinstance(value, type) and value.__module__ == module.__name__ and (
                    not name.startswith("_")):
                assert name in dmf_hybrid.__all__, f"{module.__name__}.{name} is not exported"


def test_version() -> None:
    assert isinstance(dmf_hybrid.__version__, str) and dmf_hybrid.__version__
