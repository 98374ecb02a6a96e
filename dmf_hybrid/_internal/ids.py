"""Deterministic IDs and content hashes (SHA-256 over canonical JSON)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal
from enum import Enum
from typing import Any

DEFAULT_TENANT = "default"  # the tenant of an embedded Memory unless told otherwise
ID_HASH_HEX = 20  # 80 bits of SHA-256: collisions are negligible below ~10^11 entities.
#: Joins the tenant to the entity ID in the vector ID of an entity outside the default tenant.
#: Entity IDs never contain it (they match ``checks.ID_RE``), so the last one splits a vector ID
#: back unambiguously, whatever the tenant's name holds.
VECTOR_ID_SEPARATOR = "\x1f"


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """The one JSON text for a value: sorted keys, no spaces, UTF-8, UTC datetimes."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default,
        allow_nan=False,
    )


def sha256_hex(text: str | bytes) -> str:
    """Hex SHA-256 of a text (UTF-8) or bytes."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """Hex SHA-256 of a value's canonical JSON."""
    return sha256_hex(canonical_json(value))


def entity_id(type_name: str, identity: dict[str, Any], tenant: str = DEFAULT_TENANT) -> str:
    """``<type>_<hash>``: the ID derived from a type's identity fields (and a tenant).

    In the default tenant the hash covers the type and identity only; in any other tenant it
    also covers the tenant, so two tenants with the same fact never share (or probe) an ID.
    """
    content: dict[str, Any] = {"type": type_name, "identity": identity}
    if tenant != DEFAULT_TENANT:
        content["tenant"] = tenant
    return f"{type_name}_{content_hash(content)[:ID_HASH_HEX]}"


def type_key(tenant: str, name: str) -> str:
    """The storage key of a tenant's type: its name in the default tenant (so stores made
    before types belonged to tenants keep their tables), else a prefix of the name and a tag
    of (tenant, name), short enough for any engine's identifiers and for collection names."""
    if tenant == DEFAULT_TENANT:
        return name
    return f"{name[:40]}.{sha256_hex(canonical_json([tenant, name]))[:12]}"


def derived_id(prefix: str, *parts: Any) -> str:
    """A deterministic ID for a derived object (constraint, summary) from its parts."""
    return f"{prefix}_{content_hash(list(parts))[:ID_HASH_HEX]}"


def vector_id(tenant: str, eid: str) -> str:
    """The vector-index ID of an entity: its own ID in the default tenant, else tenant-qualified.

    Two tenants may each hold an entity with the same caller-given ID; a vector collection
    holds both, under distinct vector IDs.
    """
    return eid if tenant == DEFAULT_TENANT else f"{tenant}{VECTOR_ID_SEPARATOR}{eid}"


def split_vector_id(vid: str) -> tuple[str, str]:
    """The (tenant, entity ID) a vector ID stands for (the inverse of :func:`vector_id`)."""
    tenant, sep, eid = vid.rpartition(VECTOR_ID_SEPARATOR)
    return (tenant, eid) if sep else (DEFAULT_TENANT, vid)
