"""DDL: the fixed tables and one typed table per entity type."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from ..clock import to_naive_utc, utcnow
from ..errors import DMFError
from ..ids import DEFAULT_TENANT, sha256_hex
from ..schema import EntityType, FieldSpec, TypeDef
from .audit import EVENTS_DDL, EVENTS_MIGRATION
from .dialect import dialect_of
from .rechain import rechain
from .sql import bind_field, q, sql_type
from .txn import Connection

log = logging.getLogger(__name__)

#: The view of the whole audit log: the hot ``events`` table plus the archived Parquet files
#: listed in ``event_archive`` (see dmf_hybrid._internal.store.archive). Every reader reads it.
EVENTS_ALL = "events_all"

#: 1: entity_index keyed by ID alone; 2: keyed by (tenant, ID), so that every tenant has its
#: own namespace of caller-given IDs; 3: every entity table has the ``_expires_at`` column;
#: 4: types belong to tenants (``schema_types`` keyed by tenant, name and version); 5: each
#: tenant has its own seqs and hash chain, events a store-wide ``pos`` (:mod:`.rechain`).
STORE_FORMAT = 5
#: A meta key present while the vector index must be reconciled with DuckDB (a migration
#: changed how vectors are keyed); the next reconcile removes it.
RECONCILE_PENDING = "reconcile_pending"
#: A meta key present while the types a format-3 store shared between tenants must be given
#: to each tenant that used them (:mod:`.type_split`, run by the registry when it opens).
SPLIT_PENDING = "split_types_pending"
#: An entity's expiry (naive UTC, NULL: none; see :mod:`.expiry`). A field name cannot begin
#: with "_", so no type's field can take it (the LangGraph item type has a field ``expires_at``).
EXPIRES_COLUMN = "_expires_at"
#: The columns every entity table has besides its fields. Tables made before a column existed
#: got it appended after their fields, so statements name columns, never rely on positions.
SYSTEM_COLUMNS = (
    "id", "tenant", "version", "created_at", "updated_at", "deleted_at", "deleted_seq",
    "text_hash", EXPIRES_COLUMN,
)
#: The SQL type of each system column.
SYSTEM_TYPES = ("VARCHAR", "VARCHAR", "INTEGER", "TIMESTAMP", "TIMESTAMP", "TIMESTAMP", "BIGINT",
                "VARCHAR", "TIMESTAMP")
ENTITY_OPS = ("create", "update", "append", "delete", "restore", "erase")

# Point lookups read `WHERE id = ?` through the index on id and check the tenant of the few
# rows found: DuckDB (1.4 and 2.0) answers neither the two-column key nor `id = ? AND
# tenant = ?` from an index (both scan: 3.3 ms against 0.6 ms at 100,000 rows on 2.0.1).
ENTITY_INDEX_DDL = """CREATE TABLE IF NOT EXISTS {name} (
        id VARCHAR NOT NULL, type VARCHAR NOT NULL, tenant VARCHAR NOT NULL,
        erased_seq BIGINT, PRIMARY KEY (tenant, id))"""
ENTITY_INDEX_ID_DDL = "CREATE INDEX IF NOT EXISTS entity_index_id ON entity_index (id)"
META_DDL = "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)"
# The same for the embedding cache: a write looks its new texts up with `text_hash IN (...)`
# alone, through this index (0.75 ms at 100,000 cached vectors on DuckDB 2.0.1), and checks
# the model of the rows found; `model_id = ? AND text_hash IN (...)` costs 0.97 ms on 2.0.1
# (DuckDB 1.4 scanned for it: 6-9 ms).
EMBEDDINGS_HASH_DDL = ("CREATE INDEX IF NOT EXISTS embeddings_text_hash "
                       "ON embeddings (text_hash)")
SCHEMA_TYPES_DDL = """CREATE TABLE IF NOT EXISTS {name} (
        tenant VARCHAR NOT NULL, name VARCHAR NOT NULL, version INTEGER NOT NULL,
        definition VARCHAR NOT NULL, seq BIGINT NOT NULL, created_at TIMESTAMP NOT NULL,
        PRIMARY KEY (tenant, name, version))"""
RULES_DDL = """CREATE TABLE IF NOT EXISTS {name} (
    tenant VARCHAR NOT NULL, name VARCHAR NOT NULL, version INTEGER NOT NULL,
    definition VARCHAR NOT NULL, seq BIGINT NOT NULL, created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (tenant, name, version))"""
FIXED_DDL = [
    EVENTS_DDL,
    EVENTS_MIGRATION,
    META_DDL,
    SCHEMA_TYPES_DDL.format(name="schema_types"),
    RULES_DDL.format(name="dmf_rules"),
    ENTITY_INDEX_DDL.format(name="entity_index"),
    ENTITY_INDEX_ID_DDL,
    """CREATE TABLE IF NOT EXISTS relations (
        tenant VARCHAR NOT NULL, from_id VARCHAR NOT NULL, relation VARCHAR NOT NULL,
        to_id VARCHAR NOT NULL, created_seq BIGINT NOT NULL, deleted_seq BIGINT)""",
    """CREATE TABLE IF NOT EXISTS outbox (
        seq BIGINT PRIMARY KEY, tenant VARCHAR NOT NULL, entity_id VARCHAR NOT NULL,
        type VARCHAR NOT NULL, op VARCHAR NOT NULL, done BOOLEAN NOT NULL DEFAULT FALSE)""",
    """CREATE TABLE IF NOT EXISTS embeddings (
        model_id VARCHAR NOT NULL, text_hash VARCHAR NOT NULL, dim INTEGER NOT NULL,
        vector {vector} NOT NULL, PRIMARY KEY (model_id, text_hash))""",
    EMBEDDINGS_HASH_DDL,
]


def table_name(key: str) -> str:
    """The quoted name of the table of the type with that storage key (``EntityType.key``)."""
    return q(f"ent_{key}")


def insert_definition(con: Connection, tenant: str, typedef: TypeDef, version: int,
                      seq: int) -> None:
    """Record one version of a tenant's type (the define event ``seq`` audits it)."""
    con.execute("INSERT INTO schema_types (tenant, name, version, definition, seq, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [tenant, typedef.name, version, typedef.model_dump_json(), seq,
                 to_naive_utc(utcnow())])


def create_fixed(con: Connection, directory: Path | None = None) -> None:
    """Create the fixed tables if missing, and migrate an older store to STORE_FORMAT
    (``directory``: the store's data directory, where relative archive paths point)."""
    con.execute(META_DDL)  # its store_format says how the other tables look
    row = con.execute("SELECT value FROM meta WHERE key = 'store_format'").fetchone()
    found = STORE_FORMAT if row is None else int(row[0])
    if found > STORE_FORMAT:
        raise DMFError(f"this store has format {found}, newer than the {STORE_FORMAT} this "
                       "version of dmf-hybrid reads; upgrade dmf-hybrid to open it",
                       store_format=found)
    if found < 2:
        _migrate_entity_index(con)
    if found < 4:
        _own_types(con)
    for ddl in FIXED_DDL:
        con.execute(ddl.replace("{vector}", dialect_of(con).vector_type))
    if found < 5:
        rechain(con, directory, found, STORE_FORMAT)
    for ddl in dialect_of(con).log_indexes:
        con.execute(ddl)
    if found < 3:
        _add_expiry_columns(con)
    if row is None:
        con.execute("INSERT INTO meta VALUES ('store_format', ?)", [str(STORE_FORMAT)])
    elif found != STORE_FORMAT:
        con.execute("UPDATE meta SET value = ? WHERE key = 'store_format'", [str(STORE_FORMAT)])


def cursor_secret(con: Connection) -> bytes:
    """The store's own key for query cursors (made once, kept in ``meta``; snapshots keep it)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'cursor_secret'").fetchone()
    if row is None:
        row = (secrets.token_hex(64),)
        con.execute("INSERT INTO meta VALUES ('cursor_secret', ?)", [row[0]])
    return bytes.fromhex(str(row[0]))


def _migrate_entity_index(con: Connection) -> None:
    """Format 1 -> 2: rebuild entity_index keyed by (tenant, id) (in the caller's transaction).

    DuckDB cannot change a primary key in place: a new table is filled, the old one dropped
    and the new one renamed (before its index on id exists: DuckDB refuses to rename a table
    an index depends on). Vectors of entities outside the default tenant get tenant-qualified
    IDs from now on (``ids.vector_id``), so the vector index is marked for a reconcile.
    """
    con.execute(ENTITY_INDEX_DDL.format(name="entity_index_v2"))
    con.execute("INSERT INTO entity_index_v2 SELECT id, type, tenant, erased_seq "
                "FROM entity_index")
    con.execute("DROP TABLE entity_index")
    con.execute("ALTER TABLE entity_index_v2 RENAME TO entity_index")
    con.execute(ENTITY_INDEX_ID_DDL)
    other = con.execute("SELECT 1 FROM entity_index WHERE tenant <> ? LIMIT 1",
                        [DEFAULT_TENANT]).fetchone()
    if other is not None:
        con.execute("INSERT INTO meta VALUES (?, 'tenant-qualified vector ids') "
                    "ON CONFLICT DO NOTHING", [RECONCILE_PENDING])
    log.info("store migrated to format 2: entity IDs are unique per tenant")


def _own_types(con: Connection) -> None:
    """Format 3 -> 4: ``schema_types`` and ``dmf_rules`` gain their tenant column (new
    tables, as for entity_index). Every type and rule defined so far is the default tenant's;
    when other tenants have used them, SPLIT_PENDING asks the registry to give each its own
    copy (audited, :mod:`.type_split`)."""
    for table, ddl in (("schema_types", SCHEMA_TYPES_DDL), ("dmf_rules", RULES_DDL)):
        if con.execute("SELECT 1 FROM information_schema.tables WHERE table_name = ? AND "
                       "table_schema = current_schema()", [table]).fetchone() is None:
            continue  # a store that never defined a rule has no dmf_rules yet
        con.execute(ddl.format(name=f"{table}_v4"))
        con.execute(f"INSERT INTO {table}_v4 (tenant, name, version, definition, seq, "
                    f"created_at) SELECT ?, name, version, definition, seq, created_at "
                    f"FROM {table}", [DEFAULT_TENANT])
        con.execute(f"DROP TABLE {table}")
        con.execute(f"ALTER TABLE {table}_v4 RENAME TO {table}")
    flag_shared_types(con)
    log.info("store migrated to format 4: types belong to tenants")


def flag_shared_types(con: Connection) -> None:
    """Set SPLIT_PENDING when tenants other than the default one used the types (format 3 and
    older: every type the default tenant's, shared by all)."""
    other = con.execute(
        "SELECT 1 FROM entity_index WHERE tenant <> ? UNION ALL SELECT 1 FROM events "
        "WHERE tenant <> ? AND op = 'define' LIMIT 1", [DEFAULT_TENANT, DEFAULT_TENANT]
    ).fetchone()
    if other is not None:
        con.execute("INSERT INTO meta VALUES (?, 'types belong to tenants') "
                    "ON CONFLICT DO NOTHING", [SPLIT_PENDING])


def _add_expiry_columns(con: Connection) -> None:
    """Format 2 -> 3: every entity table gains the (empty) expiry column."""
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM schema_types ORDER BY name")
             .fetchall()]
    for name in names:
        con.execute(f"ALTER TABLE {table_name(name)} ADD COLUMN IF NOT EXISTS "
                    f"{EXPIRES_COLUMN} TIMESTAMP")
    if names:
        log.info("store migrated to format 3: entities may expire")


def _column_ddl(con: Connection, name: str, spec: FieldSpec) -> str:
    return f"{q(name)} {sql_type(spec, dialect_of(con))}"


def create_type_table(con: Connection, etype: EntityType) -> None:
    """Create the typed table of an entity type."""
    cols = ", ".join(_column_ddl(con, n, s) for n, s in etype.fields.items())
    # No PRIMARY KEY here: (tenant, id) pairs are unique through entity_index's primary key,
    # and DuckDB 1.4 failed to commit an UPDATE of a list column of a keyed table while any
    # reader held an older snapshot ("write-write conflict on key"; 2.0.1 commits it). A
    # plain index keeps lookups by ID fast (two tenants may hold rows with the same ID).
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {table_name(etype.key)} (
            id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, version INTEGER NOT NULL,
            created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, deleted_at TIMESTAMP,
            deleted_seq BIGINT, text_hash VARCHAR, {EXPIRES_COLUMN} TIMESTAMP, {cols})"""
    )
    con.execute(f"CREATE INDEX IF NOT EXISTS {q(f'ent_{etype.key}_id')} "
                f"ON {table_name(etype.key)} (id)")
    sync_field_indexes(con, etype)


def field_index_name(etype: EntityType, field: str) -> str:
    """The name of the index of a field's column: ``ix_<type key>_<field>`` (a type key has no
    "_", so no two pairs share a name); past PostgreSQL's 63 bytes, a prefix and a hash."""
    name = f"ix_{etype.key}_{field}"
    return name if len(name) <= 63 else f"ix_{etype.key[:24]}_{sha256_hex(name)[:24]}"


def indexed_fields(typedef: TypeDef | None) -> set[str]:
    """The fields a type's definition marks ``indexed`` (none for no type)."""
    return set() if typedef is None else {n for n, s in typedef.fields.items() if s.indexed}


def sync_field_indexes(con: Connection, etype: EntityType, before: EntityType | None = None
                       ) -> None:
    """Index the columns of the fields ``etype`` marks ``indexed`` (where the engine indexes
    them: PostgreSQL), and drop the indexes of those its previous version ``before`` marked
    and it no longer does."""
    dialect, table = dialect_of(con), table_name(etype.key)
    now = indexed_fields(etype.typedef)
    then = indexed_fields(None if before is None else before.typedef)
    for name in sorted(now - then):
        ddl = dialect.field_index(field_index_name(etype, name), table, name,
                                  etype.fields[name].type)
        if ddl is not None:
            con.execute(ddl)
    for name in sorted(then - now):
        con.execute(f"DROP INDEX IF EXISTS {q(field_index_name(etype, name))}")


def add_columns(con: Connection, etype: EntityType, added: list[str]) -> None:
    """Add new fields to a type's table; existing rows get the field's default."""
    typedef = etype.typedef
    # every ALTER before any UPDATE: DuckDB 1.4 refused to commit a transaction that alters a
    # table after updating or deleting rows of it ("another transaction has altered this table")
    for name in added:
        spec = typedef.fields[name]
        con.execute(f"ALTER TABLE {table_name(etype.key)} ADD COLUMN "
                    f"{_column_ddl(con, name, spec)}")
    for name in added:
        spec = typedef.fields[name]
        if spec.default is not None:
            con.execute(
                f"UPDATE {table_name(etype.key)} SET {q(name)} = "
                f"CAST(? AS {sql_type(spec, dialect_of(con))})",
                [bind_field(spec, spec.default)],
            )
