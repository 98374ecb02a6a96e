"""Bundles: a whole store written as engine-neutral JSON Lines, and read back verified.

A bundle holds what the store knows, not how one engine lays it out: the type definitions
(every version), the rules, the entity IDs, each type's entity rows, the relations and every
audit event with its hashes (archived ones too), one JSON object per line, gzip-compressed
when the file name ends in ``.gz``. The first line is the header: the format, the chain's last
seq and hash, and how many records of each kind follow. Values are JSON: times and dates as
ISO 8601 text, lists as arrays; the columns a record names are read back by name.

Import reads a bundle twice. The first pass checks everything before anything is written:
each line's shape, the counts in the header (a truncated bundle is refused), the whole hash
chain (a tampered event is refused naming the first bad seq), and each entity row against the
last event of that entity (its version, and its fields and system values as the event's
snapshot recorded them). The second pass writes a new database file in one transaction. The
derived parts (vector index, embedding cache, outbox) are not in a bundle: the memory that
opens the imported file rebuilds them.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import duckdb

from ..errors import Conflict, NotFound, ValidationError
from ..ids import DEFAULT_TENANT, type_key
from ..models import BundleManifest
from ..schema import EntityType, TypeDef, build_model
from . import audit
from .chain import EVENT_ARCHIVE_DDL
from .db import ZSTD_MIN_STRING_LENGTH
from .dialect import dialect_of, redact
from .sql import field_values, q
from .store import Store
from .tables import (
    ENTITY_OPS,
    EVENTS_ALL,
    EXPIRES_COLUMN,
    STORE_FORMAT,
    create_fixed,
    create_type_table,
    flag_shared_types,
    table_name,
)
from .txn import Connection

BUNDLE_FORMAT = 1
_TS = audit.EVENT_COLUMNS.index("ts")
#: Record kinds, in the order a bundle holds them, and the table each is read into.
KINDS = {"type": "schema_types", "rule": "dmf_rules", "id": "entity_index",
         "entity": None, "relation": "relations", "event": "events"}
#: The store's ``meta`` keys a bundle carries (the cursor secret stays with its store).
META_KEYS = ("embedding_model",)
_BATCH = 10_000


def _encode(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _literal(text: str) -> str:
    """A SQL string literal (tenant names are checked: letters, digits, ``_.:-``)."""
    return "'" + text.replace("'", "''") + "'"


def _gzipped(path: Path) -> bool:
    return path.name.endswith(".gz")


@contextmanager
def _open(path: Path, mode: str, gz: bool) -> Iterator[IO[str]]:
    if gz:
        with gzip.open(path, mode + "t", encoding="utf-8") as fh:
            yield cast(IO[str], fh)
    else:
        with path.open(mode, encoding="utf-8") as fh:
            yield fh


# ---------------------------------------------------------------- export


def export_bundle(store: Store, dest: Path, tenant: str | None = None) -> BundleManifest:
    """Write the whole store, or only ``tenant``'s part (its types, rules, entities, relations
    and chain), to the bundle file ``dest`` (one consistent state: writes wait while it is
    read)."""
    if dest.exists():
        raise Conflict(f"{dest} exists; a bundle is written to a new file", field="dest")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with store.db.no_writes():
        if tenant is not None and store.log.head(tenant) == 0:
            raise NotFound(f"tenant {tenant} has nothing in this store", field="tenant")
        reader = store.db.reader()
        tables = set(store.db.tables())
        mine = "" if tenant is None else f" WHERE tenant = {_literal(tenant)}"
        types = reader.execute(
            f"SELECT DISTINCT tenant, name FROM schema_types{mine} ORDER BY tenant, name"
        ).fetchall()
        sources: list[tuple[str, str, str | None]] = [
            ("type", f"SELECT * FROM schema_types{mine} ORDER BY tenant, name, version", None),
            ("rule", f"SELECT * FROM dmf_rules{mine} ORDER BY tenant, name, version", None)
            if "dmf_rules" in tables else ("rule", "", None),
            ("id", f"SELECT * FROM entity_index{mine} ORDER BY tenant, id", None),
            *[("entity", f"SELECT * FROM {table_name(type_key(owner, name))} "
               "ORDER BY tenant, id", name) for owner, name in types],
            ("relation", f"SELECT * FROM relations{mine} ORDER BY created_seq, tenant, "
                         "from_id, relation, to_id", None),
            ("event", f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL}{mine} "
                      "ORDER BY pos", None),
        ]
        counts = {kind: 0 for kind in KINDS}
        for kind, sql, _ in sources:
            if sql:
                counts[kind] += int(reader.execute(f"SELECT count(*) FROM ({sql}) AS s").fetchall()
                                    [0][0])
        last = "pos" if tenant is None else "seq"  # a tenant's: its chain's head
        head = reader.execute(f"SELECT {last}, hash FROM {EVENTS_ALL}{mine} ORDER BY {last} "
                              "DESC LIMIT 1").fetchall()
        meta = dict(reader.execute(
            f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(META_KEYS))})",
            list(META_KEYS)).fetchall())
        manifest = BundleManifest(format=BUNDLE_FORMAT, store_format=STORE_FORMAT,
                                  last_seq=int(head[0][0]) if head else 0,
                                  last_hash=str(head[0][1]) if head else audit.GENESIS_HASH,
                                  counts=counts, meta=meta, tenant=tenant)
        partial = dest.with_name(dest.name + ".partial")
        try:
            with _open(partial, "w", _gzipped(dest)) as out:
                out.write(json.dumps({"bundle": "dmf-hybrid", **manifest.model_dump()},
                                     ensure_ascii=False) + "\n")
                for kind, sql, type_name in sources:
                    if sql:
                        _write_records(reader, out, kind, sql, type_name)
            partial.replace(dest)
        finally:
            partial.unlink(missing_ok=True)
    return manifest


def _write_records(reader: Connection, out: IO[str], kind: str, sql: str,
                   type_name: str | None) -> None:
    cursor = reader.execute(sql)
    names = [d[0] for d in cursor.description]
    while rows := cursor.fetchmany(_BATCH):
        for row in rows:
            record: dict[str, Any] = {"k": kind}
            if type_name is not None:
                record["type"] = type_name
            record["row"] = {n: _encode(v) for n, v in zip(names, row, strict=True)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- import


def _bad(line: int, message: str, **details: Any) -> ValidationError:
    return ValidationError(f"bundle line {line}: {message}", field="bundle", line=line,
                           **details)


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every line after the header, shape-checked."""
    with _open(path, "r", _gzipped(path)) as fh:
        next(fh, None)
        for number, text in enumerate(fh, start=2):
            try:
                record = json.loads(text)
            except ValueError:
                raise _bad(number, "not a JSON object") from None
            if (not isinstance(record, dict) or record.get("k") not in KINDS
                    or not isinstance(record.get("row"), dict)):
                raise _bad(number, "not a bundle record (k, row)")
            if record["k"] == "entity" and not isinstance(record.get("type"), str):
                raise _bad(number, "an entity record names its type")
            yield number, record


def read_manifest(path: Path) -> BundleManifest:
    """The header of a bundle; ValidationError if it is not one this version reads."""
    if not path.is_file():
        raise ValidationError(f"{path} is not a file", field="bundle")
    try:
        with _open(path, "r", _gzipped(path)) as fh:
            head = json.loads(fh.readline())
        if head.pop("bundle") != "dmf-hybrid":
            raise ValueError
        manifest = BundleManifest.model_validate(head)
    except (ValueError, KeyError, TypeError, AttributeError, OSError, EOFError):
        raise ValidationError(f"{path} is not a dmf-hybrid bundle (no header line)",
                              field="bundle") from None
    if manifest.format != BUNDLE_FORMAT or manifest.store_format > STORE_FORMAT:
        raise ValidationError(f"{path}: bundle format {manifest.format} (store format "
                              f"{manifest.store_format}) is not one this version reads",
                              field="bundle")
    return manifest


def check_bundle(path: Path) -> BundleManifest:
    """Read a whole bundle and check it (counts, the hash chain, every entity row against its
    last event) without writing anything; its manifest, or ValidationError naming the first
    problem (the first bad event's seq for the chain). Two streaming passes: nothing but the
    types and each entity's last snapshot is held in memory."""
    manifest = read_manifest(path)
    counts = {kind: 0 for kind in KINDS}
    legacy = manifest.store_format < 4  # one set of types, shared by every tenant
    one_chain = manifest.store_format < 5  # one hash chain over every tenant's events
    types: dict[tuple[str, str], EntityType] = {}
    erased: dict[tuple[str, str], int] = {}  # (tenant, id) -> the seq of its erase
    last: dict[tuple[str, str], tuple[int | None, Any]] = {}  # (tenant, id) -> (version, after)
    created: dict[tuple[str, str], str] = {}  # (tenant, id) -> its type
    # (tenant, seq) -> (op, tenant, from, relation, to)
    links: dict[tuple[str, int], tuple[Any, ...]] = {}
    for number, record in _records(path):
        kind, row = record["k"], record["row"]
        counts[kind] += 1
        if manifest.tenant is not None and row.get("tenant", manifest.tenant) != manifest.tenant:
            raise _bad(number, f"a record of tenant {row.get('tenant')} in the bundle of "
                       f"tenant {manifest.tenant}")
        if kind == "type":
            try:
                typedef = TypeDef.model_validate_json(row["definition"])
                owner = DEFAULT_TENANT if legacy else str(row["tenant"])
                types[(owner, typedef.name)] = EntityType(typedef, int(row["version"]),
                                                          build_model(typedef), owner)
            except (KeyError, TypeError, ValueError):
                raise _bad(number, "a type record without a valid definition") from None
        elif kind == "event":
            key = (str(row.get("tenant")), str(row.get("entity_id")))
            op = row.get("op")
            if op == "erase":
                erased[key] = int(row.get("seq") or 0)
            elif op == "create":
                created.setdefault(key, str(row.get("type")))
            elif op in ("link", "unlink"):
                try:
                    link = json.loads(row.get("meta") or "{}")
                    links[(str(row["tenant"]), int(row["seq"]))] = (
                        op, row["tenant"], link["from"], link["relation"], link["to"])
                except (TypeError, ValueError, KeyError):
                    pass  # the chain check below names the event
            if op in ENTITY_OPS and row.get("entity_id") is not None:
                try:
                    after = None if row.get("after") is None else json.loads(row["after"])
                except (TypeError, ValueError):
                    after = None  # the chain check below names the event
                last[key] = (row.get("version_after"), after)
    for kind, expected in manifest.counts.items():
        if counts.get(kind, 0) != expected:
            raise ValidationError(f"bundle holds {counts.get(kind, 0)} {kind} records, its "
                                  f"header says {expected} (truncated or edited)",
                                  field="bundle", kind=kind)

    def events() -> Iterator[tuple[Any, ...]]:
        for number, record in _records(path):
            row = record["row"]
            if record["k"] == "entity":
                owner = DEFAULT_TENANT if legacy else str(row.get("tenant"))
                _check_entity(number, types.get((owner, record["type"])), row, last)
            elif record["k"] == "id":
                _check_id(number, row, created, erased)
            elif record["k"] == "relation":
                _check_relation(number, row, links, erased)
            if record["k"] != "event":
                continue
            try:
                values = [row[c] if c != "pos" or not one_chain else row["seq"]
                          for c in audit.EVENT_COLUMNS]
                values[_TS] = dt.datetime.fromisoformat(values[_TS])
            except (KeyError, TypeError, ValueError):
                raise _bad(number, "an event record lacks its columns") from None
            yield tuple(values)

    # a tenant's bundle holds its chain, not the store's positions (renumbered on import)
    report = audit.ChainCheck(set(erased), positions=not one_chain and manifest.tenant is None,
                              one_chain=one_chain).run(events())
    if not report.ok:
        where = "" if one_chain else f" of tenant {report.tenant}"
        raise ValidationError(f"bundle event seq {report.first_bad_seq}{where}: "
                              f"{report.problem}", field="bundle",
                              first_bad_seq=report.first_bad_seq, tenant=report.tenant)
    if (report.last_seq, report.last_hash) != (manifest.last_seq, manifest.last_hash):
        raise ValidationError(f"the bundle's chain ends at seq {report.last_seq}, its header "
                              f"says {manifest.last_seq} (truncated or edited)", field="bundle")
    return manifest


def _check_entity(number: int, etype: EntityType | None, row: dict[str, Any],
                  last: dict[tuple[str, str], tuple[int | None, Any]]) -> None:
    """An entity row must be what its entity's last event left (fields and system values)."""
    if etype is None:
        raise _bad(number, "an entity of a type the bundle does not define")
    try:
        key = (row["tenant"], row["id"])
        version, snap = last[key]
    except (KeyError, TypeError):
        raise _bad(number, "an entity row no event created") from None
    if snap is None or row.get("version") != version or snap.get("version") != version:
        raise _bad(number, f"entity {key[1]} is not at the version its events reached",
                   entity_id=key[1])
    # text_hash is left out: it is derived, and a type's new embedded text re-hashes its rows
    # without an event per entity
    system = {"created_at": row.get("created_at"), "updated_at": row.get("updated_at"),
              "deleted_at": row.get("deleted_at")}
    recorded = {k: snap.get(k) for k in system}
    expires = row.get(EXPIRES_COLUMN)
    try:
        data = field_values(etype, [row.get(n) for n in etype.fields])
        same = (system == recorded and expires == snap.get("expires_at")
                and etype.model.model_validate(data).model_dump(mode="json")
                == etype.model.model_validate(snap["data"]).model_dump(mode="json"))
    except (ValueError, TypeError, KeyError):
        same = False
    if not same:
        raise _bad(number, f"entity {key[1]} differs from its last event's snapshot "
                   "(edited)", entity_id=key[1])


def _check_id(number: int, row: dict[str, Any], created: dict[tuple[str, str], str],
              erased: dict[tuple[str, str], int]) -> None:
    """An ID must be one an event created, of its type, erased at its erase event if at all."""
    key = (str(row.get("tenant")), str(row.get("id")))
    if created.get(key) != row.get("type") or erased.get(key) != row.get("erased_seq"):
        raise _bad(number, f"ID {row.get('id')} is not as its events left it (edited)",
                   entity_id=row.get("id"))


def _check_relation(number: int, row: dict[str, Any],
                    links: dict[tuple[str, int], tuple[Any, ...]],
                    erased: dict[tuple[str, str], int]) -> None:
    """A link must have been made by the link event at its ``created_seq``, and ended (if it
    was) by an unlink of it or an erase of one of its ends at its ``deleted_seq``."""
    link = tuple(str(row.get(c)) for c in ("tenant", "from_id", "relation", "to_id"))
    ended = row.get("deleted_seq")
    ends = {erased.get((link[0], link[1])), erased.get((link[0], link[3]))}
    if (links.get((link[0], int(row.get("created_seq") or 0))) != ("link", *link)
            or (ended is not None and links.get((link[0], ended)) != ("unlink", *link)
                and ended not in ends)):
        raise _bad(number, f"the link {link[1]} -{link[2]}-> {link[3]} is not as its events "
                   "left it (edited)")


def import_bundle(path: Path, db_file: Path | str,
                  also: Callable[[Connection], None] | None = None) -> BundleManifest:
    """Check the bundle (:func:`check_bundle`), then write it into the new database file
    ``db_file`` (or the empty PostgreSQL database at that URL) in one transaction, with what
    ``also`` writes (a snapshot's archives and cache); nothing is written when the check, or
    ``also``, fails."""
    manifest = check_bundle(path)
    if isinstance(db_file, str):
        _import_into_postgres(path, db_file, manifest, also)
        return manifest
    if db_file.exists():
        raise Conflict(f"{db_file} exists; a bundle is imported into a new memory",
                       field="path")
    con = duckdb.connect(str(db_file), config={"zstd_min_string_length": ZSTD_MIN_STRING_LENGTH})
    try:
        con.execute("BEGIN TRANSACTION")
        _fill(con, path, manifest)
        if also is not None:
            also(con)
        con.execute("COMMIT")
    except BaseException:
        con.close()
        db_file.unlink(missing_ok=True)
        db_file.with_name(db_file.name + ".wal").unlink(missing_ok=True)
        raise
    con.close()
    return manifest


def _import_into_postgres(path: Path, url: str, manifest: BundleManifest,
                          also: Callable[[Connection], None] | None) -> None:
    """:func:`import_bundle` into an empty PostgreSQL database (DDL is transactional there:
    a failure leaves the database empty)."""
    from .postgres import PgDatabase  # psycopg is only needed for PostgreSQL

    db = PgDatabase(url)  # the owner's lock: no service may have the store open meanwhile
    try:
        if db.tables():
            raise Conflict(f"the PostgreSQL database at {redact(url)} is not empty; a bundle is "
                           "imported into a new store", field="store_url")
        with db.write() as con:
            _fill(con, path, manifest)
            if also is not None:
                also(con)
    finally:
        db.close()


def _fill(con: Connection, path: Path, manifest: BundleManifest) -> None:
    """Inside the importing transaction: the store's tables, the bundle's rows, its meta."""
    create_fixed(con)
    con.execute(EVENT_ARCHIVE_DDL)
    legacy = manifest.store_format < 4
    _write_all(con, path, legacy, renumber=manifest.tenant is not None)
    if legacy:
        flag_shared_types(con)
    if manifest.store_format < 5:  # one chain: re-chained per tenant when the store opens
        con.execute("UPDATE meta SET value = '4' WHERE key = 'store_format'")
    for key, value in sorted(manifest.meta.items()):
        if key in META_KEYS:
            con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])


def _write_all(con: Connection, path: Path, legacy: bool, renumber: bool) -> None:
    """The second pass: every record into its table (a bundle lists the types first: their
    tables are made before the first record of another kind). The types and rules of a
    ``legacy`` bundle (store format 3 and older) are the default tenant's, shared by all.
    ``renumber``: the events (one tenant's) take the new store's positions 1, 2, 3..."""

    latest: dict[tuple[str, str], tuple[int, str]] = {}
    batches: dict[tuple[str, tuple[str, ...]], list[list[Any]]] = {}
    sql_types: dict[str, dict[str, str]] = {}
    tables_made = False

    def make_tables() -> None:
        for (tenant, _name), (version, definition) in latest.items():
            typedef = TypeDef.model_validate_json(definition)
            create_type_table(con, EntityType(typedef, version, build_model(typedef), tenant))

    dialect = dialect_of(con)

    def flush() -> None:
        for (table, names), rows in batches.items():
            if table not in sql_types:
                sql_types[table] = dialect.column_types(con, table)
            types = sql_types[table]
            if any(n not in types for n in names):
                raise ValidationError(f"bundle rows of {table} name columns it does not have: "
                                      f"{', '.join(n for n in names if n not in types)}",
                                      field="bundle")
            # one bulk insert of the JSON values per batch, cast to the columns' types (ISO
            # text to times and dates too; an executemany wrote ~1,400 rows/s on DuckDB)
            dialect.insert_columns(
                con, table, {n: [row[i] for row in rows] for i, n in enumerate(names)},
                select=", ".join(f"CAST({q(n)} AS {types[n]})" for n in names))
        batches.clear()

    pending = positions = 0
    for _number, record in _records(path):
        kind, row = record["k"], record["row"]
        if legacy and kind in ("type", "rule"):
            row = {"tenant": DEFAULT_TENANT, **row}
        if kind == "event" and "pos" not in row:  # store format 4 and older
            row = {"pos": row["seq"], **row}
        elif kind == "event" and renumber:
            positions += 1
            row = {**row, "pos": positions}
        if kind == "type":
            key = (row["tenant"], row["name"])
            if int(row["version"]) >= latest.get(key, (0, ""))[0]:
                latest[key] = (int(row["version"]), row["definition"])
        elif not tables_made:
            make_tables()
            tables_made = True
        if kind == "entity":
            owner = DEFAULT_TENANT if legacy else str(row["tenant"])
            table = table_name(type_key(owner, record["type"]))
        else:
            table = str(KINDS[kind])
        batches.setdefault((table, tuple(row)), []).append(list(row.values()))
        pending += 1
        if pending >= _BATCH:
            flush()
            pending = 0
    if not tables_made:
        make_tables()
    flush()
