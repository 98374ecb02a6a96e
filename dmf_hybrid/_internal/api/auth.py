"""API keys: hashed at rest, each mapped to one tenant and one role (reader < writer < admin).

Keys come from ``Settings.api_keys`` (``"key:tenant:role,..."``, plain keys hashed on load) or
``Settings.keys_file`` (one ``sha256hex:tenant:role`` per line, ``#`` comments). Make the hash
of a key without dmf-hybrid installed::

    python -c "import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())" KEY

An admin key is store-wide: admin routes (reconcile, reindex, snapshot, archive, types, rules)
and the audit head and verify act on the whole store; its tenant is only where its own entity
writes go. Reader and writer keys see their tenant alone, the audit head and verify included
(the chain is still checked store-wide). Each write's audit event records the key's label
(``key:<first 8 hex of its hash>``) as ``principal``; ``X-Actor`` is a caller-chosen label.

With no keys at all the service runs open, as the single tenant ``Settings.tenant`` with every
role, and :func:`check_bind` refuses any address but loopback.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..checks import KEY_HASH_RE, TENANT_RE, full_match
from ..config import Settings
from ..errors import Forbidden, Unauthorized, ValidationError


class Role(enum.IntEnum):
    """What a key may do; each role includes the ones below it."""

    READER = 1  # reads and search
    WRITER = 2  # + entity and relation writes
    ADMIN = 3  # + admin routes and type definitions

    @classmethod
    def parse(cls, text: str, where: str) -> Role:
        """The role named ``text`` or a ValidationError naming ``where``."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValidationError(f"{where}: unknown role {text!r} (use reader, writer or admin)",
                                  field=where) from None


@dataclass(frozen=True)
class Principal:
    """Who is calling: their tenant, role and (with keys) a short non-secret key label."""

    tenant: str
    role: Role
    key_label: str | None = None

    def require(self, role: Role) -> None:
        """Return if this principal has ``role``; Forbidden otherwise."""
        if self.role < role:
            raise Forbidden(f"this operation needs the {role.name.lower()} role; the key has "
                            f"{self.role.name.lower()}", required=role.name.lower())


@dataclass(frozen=True)
class KeyEntry:
    """One configured key: the SHA-256 of the key, its tenant and role."""

    key_hash: str
    tenant: str
    role: Role


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key (what a keys file stores)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _entry(parts: list[str], where: str, hashed: bool) -> KeyEntry:
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise ValidationError(f"{where}: expected key:tenant:role", field=where)
    secret, tenant, role = (p.strip() for p in parts)
    if hashed and not full_match(KEY_HASH_RE, secret.lower()):
        raise ValidationError(f"{where}: the key must be a 64-digit hex SHA-256", field=where)
    if not full_match(TENANT_RE, tenant):
        raise ValidationError(f"{where}: invalid tenant {tenant!r}", field=where)
    return KeyEntry(secret.lower() if hashed else hash_key(secret), tenant,
                    Role.parse(role, where))


class KeyRing:
    """The configured API keys; empty means the service runs open (single tenant)."""

    def __init__(self, entries: list[KeyEntry], default_tenant: str) -> None:
        self.entries = list(entries)
        self.default_tenant = default_tenant

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        """The keys of ``settings.api_keys`` and ``settings.keys_file``; ValidationError if bad."""
        entries: list[KeyEntry] = []
        if settings.api_keys:
            for i, item in enumerate(settings.api_keys.split(",")):
                if item.strip():
                    entries.append(_entry(item.split(":"), f"api_keys[{i}]", hashed=False))
        if settings.keys_file is not None:
            path = Path(settings.keys_file)
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise ValidationError(f"cannot read keys_file {path}: {exc.strerror}",
                                      field="keys_file") from None
            for n, line in enumerate(lines, 1):
                text = line.split("#", 1)[0].strip()
                if text:
                    entries.append(_entry(text.split(":"), f"keys_file:{n}", hashed=True))
        return cls(entries, settings.tenant)

    @property
    def open(self) -> bool:
        """True when no keys are configured (no authentication)."""
        return not self.entries

    def authenticate(self, key: str | None) -> Principal:
        """The principal of ``key``; Unauthorized if it is missing or unknown."""
        if self.open:
            return Principal(self.default_tenant, Role.ADMIN)
        if not key:
            raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>' "
                               "or 'X-API-Key: <key>'")
        digest = hash_key(key)
        found: KeyEntry | None = None
        for entry in self.entries:  # compare with every entry: time does not depend on which
            if hmac.compare_digest(digest, entry.key_hash) and found is None:
                found = entry
        if found is None:
            raise Unauthorized("unknown API key")
        return Principal(found.tenant, found.role, key_label=f"key:{found.key_hash[:8]}")


def is_loopback(host: str) -> bool:
    """True when ``host`` is a loopback address or ``localhost``."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: KeyRing) -> None:
    """Return if serving on ``host`` is safe; ValidationError for an open non-loopback bind."""
    if keys.open and not is_loopback(host):
        raise ValidationError(
            f"refusing to bind {host}: no API keys are configured, so anyone who can reach "
            "that address could read and change every entity. Configure keys (DMF_API_KEYS or "
            "DMF_KEYS_FILE) or bind 127.0.0.1.", field="host")
