"""The bundled example domains (``indexes/*.toml``) and their small dataset (``indexes/examples``).

A dataset file is JSON Lines; each line is an entity or a link, entities first::

    {"key": "poi_bund", "type": "PointOfInterest", "data": {"name": "The Bund", ...}}
    {"link": ["trip_lin_sh", "includes", "poi_bund"]}

``key`` is a local name that later lines use instead of the (content-derived) entity ID: in a
link, and as ``{"$ref": "key"}`` anywhere inside ``data``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from .errors import ValidationError
from .memory import Memory
from .schema import EntityType

log = logging.getLogger(__name__)

INDEXES_DIR = Path(__file__).resolve().parents[2] / "indexes"
EXAMPLES_DIR = INDEXES_DIR / "examples"
EXAMPLES_ACTOR = "dmf-examples"


def load_example_types(memory: Memory, directory: Path = INDEXES_DIR) -> list[EntityType]:
    """Register the types of every ``*.toml`` in ``directory`` (unchanged types are no-ops)."""
    types: list[EntityType] = []
    for path in sorted(directory.glob("*.toml")):
        types.extend(memory.load_definitions(path, actor=EXAMPLES_ACTOR))
    return types


def is_empty(memory: Memory) -> bool:
    """True when the memory's tenant holds no live entity of any type."""
    return all(memory.count(t.name) == 0 for t in memory.types())


def _resolve(value: Any, ids: dict[str, str], where: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            key = value["$ref"]
            if key not in ids:
                raise ValidationError(f"{where}: unknown $ref {key!r}", field=where)
            return ids[key]
        return {k: _resolve(v, ids, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, ids, where) for v in value]
    return value


def read_dataset(path: Path) -> list[dict[str, Any]]:
    """The lines of a dataset file as objects; ValidationError naming the bad line."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path.name}:{n}: invalid JSON: {exc.msg}",
                                  field=f"{path.name}:{n}") from None
        if not isinstance(row, dict) or not ({"key", "type", "data"} <= set(row)
                                             or "link" in row):
            raise ValidationError(f"{path.name}:{n}: expected an entity or a link line",
                                  field=f"{path.name}:{n}")
        rows.append({**row, "_where": f"{path.name}:{n}"})
    return rows


def load_example_data(memory: Memory, directory: Path = EXAMPLES_DIR) -> dict[str, int]:
    """Ingest every ``*.jsonl`` of ``directory`` in one transaction; entity and link counts."""
    rows = [row for path in sorted(directory.glob("*.jsonl")) for row in read_dataset(path)]
    ids: dict[str, str] = {}
    links = 0
    with memory.transaction():
        for row in rows:
            where = row["_where"]
            if "link" in row:
                link = row["link"]
                if not (isinstance(link, list) and len(link) == 3
                        and link[0] in ids and link[2] in ids):
                    raise ValidationError(f"{where}: a link is [from_key, relation, to_key] "
                                          "of keys defined above", field=where)
                memory.link(ids[link[0]], link[1], ids[link[2]], actor=EXAMPLES_ACTOR,
                            reason="example data")
                links += 1
            else:
                if row["key"] in ids:
                    raise ValidationError(f"{where}: duplicate key {row['key']!r}", field=where)
                data = _resolve(row["data"], ids, where)
                entity = memory.create(row["type"], data, actor=EXAMPLES_ACTOR,
                                       reason="example data")
                ids[row["key"]] = entity.id
    return {"entities": len(ids), "links": links}


def seed_examples(memory: Memory, indexes: Path = INDEXES_DIR) -> dict[str, int] | None:
    """Load the example types, and the example data when the store is empty (else None)."""
    if not indexes.is_dir():
        log.warning("no example definitions at %s; nothing loaded", indexes)
        return None
    load_example_types(memory, indexes)
    if not is_empty(memory):
        return None
    examples = indexes / "examples"
    if not examples.is_dir():
        return None
    counts = load_example_data(memory, examples)
    log.info("loaded example data: %(entities)d entities, %(links)d links", counts)
    return counts
