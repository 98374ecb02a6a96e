"""One Settings object for dmf-hybrid; every setting has an environment variable ``DMF_<NAME>``.

Nothing else in the package reads ``os.environ``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .checks import MAX_DEFAULT_BYTES, MAX_TYPE_BYTES, MAX_TYPE_FIELDS, MAX_VALUE_BYTES, Limits
from .ids import DEFAULT_TENANT
from .profiles import FUSIONS

__all__ = ["DEFAULT_TENANT", "Settings"]

DEFAULT_DATA_DIR = Path("./dmf-data")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: The int8 ONNX build of the bundled MiniLM: the torch model's quality on SciFact, LoCoMo and
#: CrossWOZ, several times its query speed, and a vector that depends on the text only
#: (docs/retrieval.md).
DEFAULT_EMBEDDER = "minilm-onnx"
#: Measured by ``python -m evaluation.bench_search --sweep`` on 100k x 384: exact scoring wins
#: up to 10k candidates (17 ms vs 24 ms, ANN recall 0.96), ANN from 20k (17 ms vs 25 ms).
DEFAULT_EXACT_THRESHOLD = 15_000
DEFAULT_RRF_K = 60
#: How hybrid search fuses its legs by default (the methods: FUSIONS,
#: dmf_hybrid._internal.search.fusion); chosen on SciFact, LoCoMo and CrossWOZ together
#: (docs/retrieval.md, "Fusion").
DEFAULT_FUSION = "bm25max"
MAX_K = 1000
MAX_PAGE_SIZE = 1000
MAX_PLAN_OPS = 100
MAX_BODY_BYTES = 2 * 1024 * 1024
EMBED_BATCH_SIZE = 64
DEFAULT_TORCH_THREADS = 1
DEFAULT_ONNX_THREADS = 1
DEFAULT_ONNX_WORKERS = 2
QUERY_BATCH_SIZE = 32
QUERY_BATCH_WAIT_MS = 2.0
#: Row cache entries (dmf_hybrid._internal.search.row_cache); a row of a few short fields takes well
#: under a kilobyte, so the default bounds it to ~100 MB. It lets a type of up to that many rows be
#: copied whole while no commit comes (searches of distinct texts then read nothing either).
ROW_CACHE_SIZE = 200_000
#: MiB of gathered candidate vectors kept for repeated filters
#: (dmf_hybrid._internal.mirrors.vectors.Blocks): four candidate sets of 10,000 384-d vectors.
BLOCK_CACHE_MB = 64
#: DuckDB's own default is 80 % of RAM; a quarter (at most 4 GiB) leaves room for the model,
#: Chroma and other processes.
MAX_DUCKDB_MEMORY_MB = 4096


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API here
        return max(1, os.cpu_count() or 1)


def default_duckdb_memory_limit() -> str:
    """A DuckDB ``memory_limit`` that fits this machine: a quarter of RAM, at most 4 GiB."""
    try:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):  # not POSIX: take the cap
        total_mb = 4 * MAX_DUCKDB_MEMORY_MB
    return f"{max(256, min(MAX_DUCKDB_MEMORY_MB, total_mb // 4))}MB"


class Settings(BaseSettings):
    """Runtime configuration, read from ``DMF_*`` environment variables and keyword arguments."""

    model_config = SettingsConfigDict(env_prefix="DMF_", extra="forbid")

    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Memory directory (DuckDB + Chroma).")
    host: str = Field(DEFAULT_HOST, description="Address the HTTP service binds.")
    port: int = Field(DEFAULT_PORT, ge=1, le=65535, description="Port the HTTP service binds.")
    tenant: str = Field(DEFAULT_TENANT, description="Tenant of the embedded Memory.")
    embedder: str = Field(
        DEFAULT_EMBEDDER, description='"minilm-onnx" (the bundled English MiniLM as int8 '
        'ONNX, built from its weights on first use), "minilm" (the same model on torch), '
        '"m3e-small" (Chinese), "e5-small" (multilingual), "hash" (test embedder) or a model '
        'directory.'
    )
    model_path: str | None = Field(
        None, description="sentence-transformers model directory; default: the bundled MiniLM."
    )
    store_url: str | None = Field(
        None, description="postgresql://user:password@host:port/database of a PostgreSQL store; "
        "default: DuckDB, embedded, in data_dir."
    )
    chroma_url: str | None = Field(
        None, description="http://host:port of a Chroma server; default: embedded on disk."
    )
    workers: int = Field(
        1, ge=1, le=64, description="Service processes behind the port (dmf serve); above 1 "
        "needs store_url (PostgreSQL). Without chroma_url each keeps its vectors in memory."
    )
    exact_threshold: int = Field(
        DEFAULT_EXACT_THRESHOLD,
        ge=0,
        description="Filtered candidate sets up to this size are scored exactly.",
    )
    fusion: Literal[FUSIONS] = Field(  # type: ignore[valid-type]
        DEFAULT_FUSION, description="How hybrid search fuses its legs: " + ", ".join(FUSIONS)
        + " (dmf_hybrid._internal.search.fusion; measured in docs/retrieval.md).")
    rrf_k: int = Field(DEFAULT_RRF_K, ge=1, description="Reciprocal rank fusion constant.")
    torch_threads: int = Field(
        DEFAULT_TORCH_THREADS, ge=0,
        description="Threads torch may use to embed (0 = torch's default). One thread kept "
        "query embedding at ~25 ms on a busy 2-core machine where two spun up to 1.8 s.",
    )
    onnx_threads: int = Field(
        DEFAULT_ONNX_THREADS, ge=0,
        description="Threads ONNX Runtime may use to embed (0 = its default), like torch_threads.",
    )
    onnx_workers: int = Field(
        DEFAULT_ONNX_WORKERS, ge=1,
        description="Texts the ONNX embedder runs at once when one call embeds several (an "
        "ingest, a re-embed); each still runs alone, so vectors do not change. 1 = one by one.",
    )
    onnx_cache_dir: Path | None = Field(
        None, description="Where the ONNX embedder keeps its exported model; default "
        "~/.cache/dmf-hybrid/onnx.",
    )
    query_batch_size: int = Field(
        QUERY_BATCH_SIZE, ge=0,
        description="Most query texts of concurrent searches embedded in one model call "
        "(0 = each search embeds its own query).",
    )
    query_batch_wait_ms: float = Field(
        QUERY_BATCH_WAIT_MS, ge=0, le=1000,
        description="How long a search that finds the model idle waits for others to share "
        "its call, while searches arrive together (a lone client never waits).",
    )
    search_threads: int | None = Field(
        None, ge=1,
        description="Searches the HTTP service runs at once, each in a thread of its own; "
        "later ones wait their turn in arrival order. Default: the CPUs the process may use "
        "(more threads only fight over the GIL and the cores).",
    )
    row_cache_size: int = Field(
        ROW_CACHE_SIZE, ge=0,
        description="Rows (and filter outcomes) search resolution keeps in memory until a "
        "commit changes their entity, so a repeated search reads nothing from DuckDB, and a "
        "type of up to this many rows is copied whole once searches keep reading it (0 = off).",
    )
    block_cache_mb: int = Field(
        BLOCK_CACHE_MB, ge=0,
        description="MiB of candidates' vectors kept contiguous for repeated filters of at "
        "least 2,048 candidates, so the exact plan scores a copy instead of gathering rows "
        "(per type, dropped on any vector change; 0 = off).",
    )
    mirror_budget_mb: float = Field(
        0, ge=0,
        description="MiB the in-process mirrors of searched types (exact vectors, BM25 "
        "indexes) may hold; past it, the least recently searched types' are dropped and "
        "loaded again on their next search (0 = a quarter of the machine's memory).",
    )
    min_seq_wait_seconds: float = Field(
        2.0, ge=0, le=60,
        description="How long a request that asks for at least a seq (X-DMF-Min-Seq) waits "
        "for this process to reach it before a 503.",
    )
    embed_batch_size: int = Field(EMBED_BATCH_SIZE, ge=1, description="Texts per model call.")
    max_k: int = Field(MAX_K, ge=1, description="Largest k a search may ask for.")
    max_page_size: int = Field(MAX_PAGE_SIZE, ge=1, description="Largest query page.")
    max_plan_ops: int = Field(MAX_PLAN_OPS, ge=1, description="Longest agent plan.")
    max_body_bytes: int = Field(MAX_BODY_BYTES, ge=1024, description="Largest HTTP request body.")
    expiry_sweep_seconds: float = Field(
        60.0, ge=0,
        description="How often the service soft-deletes the entities whose expiry has come "
                    "(audited, actor system:expiry); 0: never (reads hide them anyway).")
    max_tools_bytes: int = Field(
        4 * 2**20, ge=1024,
        description="Largest GET /tools answer (bytes of JSON); larger is refused with a hint "
                    "(profile=compact describes each type once).")
    max_value_bytes: int = Field(MAX_VALUE_BYTES, ge=256, description="Largest value of one "
                                 "entity field (UTF-8 bytes); larger ones are refused.")
    max_type_fields: int = Field(MAX_TYPE_FIELDS, ge=1, description="Most fields per type.")
    max_type_bytes: int = Field(MAX_TYPE_BYTES, ge=1024, description="Largest type definition "
                                "(JSON bytes).")
    max_default_bytes: int = Field(MAX_DEFAULT_BYTES, ge=16, description="Largest default "
                                   "value of a field (bytes).")
    duckdb_memory_limit: str = Field(
        default_factory=default_duckdb_memory_limit,
        description="DuckDB memory_limit (e.g. '2GB'); default: a quarter of RAM, at most 4 GiB.")
    api_keys: str | None = Field(
        None,
        description='Comma-separated "key:tenant:role" entries (roles: reader, writer, admin).',
    )
    keys_file: Path | None = Field(None, description="File of API keys (one per line, hashed).")
    load_examples: bool = Field(
        False, description="Load indexes/*.toml and their example data into an empty store on "
                           "serve (dmf serve --demo).")

    def search_thread_count(self) -> int:
        """``search_threads``, or the CPUs the process may use when it is not set."""
        return self.search_threads or usable_cpus()

    def limits(self) -> Limits:
        """The size limits the store enforces before any write."""
        return Limits(max_value_bytes=self.max_value_bytes, max_type_fields=self.max_type_fields,
                      max_type_bytes=self.max_type_bytes,
                      max_default_bytes=self.max_default_bytes)


def is_postgres_url(value: Any) -> bool:
    """Whether ``value`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(value, str) and value.lower().startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """A URL with its password replaced (for errors and logs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
