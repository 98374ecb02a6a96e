"""The bundled types: what dmf-hybrid itself writes, there in every memory without a file.

``bundled.toml``, shipped inside the package, declares them: ``Message`` (the conversation
log of ``add_messages``), ``Constraint`` (what rules raise; ``open_constraints``) and
``MemorySummary`` (``summarize``). The store defines one in a tenant the first time a call of
that tenant names it (:meth:`dmf_hybrid._internal.store.registry.TypeRegistry.type_of`), audited as
``define`` by :data:`BUNDLED_ACTOR`; a type of the same name that the tenant defined before
that is its own and is kept as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .schema import EntityType, TypeDef, build_model, load_toml

BUNDLED_FILE = Path(__file__).with_name("bundled.toml")
#: The actor of the audit event that defines a bundled type on first use.
BUNDLED_ACTOR = "dmf"
BUNDLED_REASON = "bundled type, defined on first use"


@functools.cache
def bundled_types() -> dict[str, TypeDef]:
    """Every bundled type's definition, by name."""
    return {t.name: t for t in load_toml(BUNDLED_FILE)}


def bundled_type(name: Any) -> TypeDef | None:
    """The bundled definition of that name, or None."""
    return bundled_types().get(name) if isinstance(name, str) else None


@functools.cache
def _unregistered(name: str) -> EntityType:
    typedef = bundled_types()[name]
    return EntityType(typedef, 0, build_model(typedef))


def lookup_type(types: Sequence[EntityType], name: Any) -> EntityType | None:
    """The type of that name among ``types``, else the bundled one as it will be defined
    (version 0), else None: what a check that must not write (a plan's validation) sees."""
    found = [t for t in types if t.name == name]
    if found:
        return found[0]
    return _unregistered(name) if bundled_type(name) is not None else None
