"""The server: bind refusal, API keys (settings and keys file), a real start with example data."""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dmf_hybrid import Memory, Settings, Unauthorized, ValidationError
from dmf_hybrid._internal.api.auth import KeyRing, Role, check_bind, hash_key, is_loopback
from dmf_hybrid._internal.api.server import create_server, service_urls
from dmf_hybrid._internal.client import MemoryClient
from evaluation.ports import free_port
from tests.doors import open_memory

WAIT = 20.0


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_open_service_refuses_non_loopback(tmp_path: Path, host: str) -> None:
    settings = Settings(data_dir=tmp_path / "data", host=host, embedder="hash")
    with pytest.raises(ValidationError) as err:
        create_server(settings)
    assert err.value.details["field"] == "host" and "no API keys" in err.value.message
    assert not (tmp_path / "data").exists(), "nothing may be opened before the refusal"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, KeyRing([], "default"))


def test_keys_allow_any_address(settings_for: Callable[..., Settings]) -> None:
    mem = open_memory(None)
    try:
        server = create_server(settings_for(host="0.0.0.0"), memory=mem)
        assert server.config.host == "0.0.0.0"
    finally:
        mem.close()


def test_key_ring_from_settings_and_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    digest = hashlib.sha256(b"s3cret").hexdigest()
    keys_file.write_text(f"# team keys\n{digest}:acme:writer  # ci\n\n")
    ring = KeyRing.from_settings(Settings(api_keys="plain:beta:reader", keys_file=keys_file))
    assert hash_key("s3cret") == digest
    writer = ring.authenticate("s3cret")
    assert (writer.tenant, writer.role) == ("acme", Role.WRITER)
    assert ring.authenticate("plain").tenant == "beta"
    assert "s3cret" not in repr(ring.entries) and "plain" not in repr(ring.entries)
    for key in (None, "", "nope"):
        with pytest.raises(Unauthorized):
            ring.authenticate(key)


@pytest.mark.parametrize(("api_keys", "line"), [
    ("k:t", None), ("k:t:root", None), ("k::admin", None), (None, "short:t:admin"),
    (None, "a" * 64 + ":t"), (None, "a" * 64 + ":bad tenant:reader"),
])
def test_bad_keys_are_clear_errors(tmp_path: Path, api_keys: str | None,
                                   line: str | None) -> None:
    keys_file = None
    if line is not None:
        keys_file = tmp_path / "keys.txt"
        keys_file.write_text(line + "\n")
    with pytest.raises(ValidationError) as err:
        KeyRing.from_settings(Settings(api_keys=api_keys, keys_file=keys_file))
    assert err.value.details["field"].startswith(("api_keys", "keys_file"))


def test_missing_keys_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as err:
        KeyRing.from_settings(Settings(keys_file=tmp_path / "absent.txt"))
    assert err.value.details["field"] == "keys_file"


@contextmanager
def serving(settings: Settings, api_key: str | None = None) -> Iterator[MemoryClient]:
    """A client of ``create_server(settings)`` running in a thread, once it is ready."""
    server = create_server(settings, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{settings.port}"
        with MemoryClient(url, api_key=api_key, timeout=WAIT) as client:
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    if client.readiness()["ready"]:
                        break
                except Exception:  # noqa: BLE001 - not listening yet
                    pass
                assert time.monotonic() < deadline and thread.is_alive(), "server not ready"
                time.sleep(0.05)
            yield client
    finally:
        server.should_exit = True
        thread.join(WAIT)
    assert not thread.is_alive()


def test_serve_seeds_examples_and_answers(tmp_path: Path) -> None:
    key_hash = hash_key("reader-key")
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"{key_hash}:default:reader\n")
    settings = Settings(data_dir=tmp_path / "data", port=free_port(), embedder="hash",
                        keys_file=keys_file, load_examples=True)
    with serving(settings, "reader-key") as client:
        names = {t.name for t in client.types()}
        assert {"User", "Trip", "PointOfInterest", "Constraint", "Customer", "Order",
                "Product", "ShippingEvent"} <= names
        assert client.count("PointOfInterest", {"city": "Shanghai"}) >= 15
        assert client.count("Customer") >= 5
        hits = client.search("PointOfInterest", "Buddhist temple", k=3,
                             where={"city": "Shanghai", "category": "temple"}).hits
        assert len(hits) == 3 and all(h.entity.data.category == "temple" for h in hits)
        trip = client.query("Trip", {"user": "linwei"}).items[0]
        assert len(client.related(trip.id, "includes")) == 5
        assert client.verify_audit().ok
    with Memory.open(settings.data_dir, settings=settings) as reopened:  # the lock was released
        assert reopened.count("Order") == 8


#: A shop of one's own: names the example domains also use, other definitions.
SHOP = [
    {"name": "User", "identity": ["email"], "embed": "{name} <{email}>",
     "fields": {"email": {"type": "str", "required": True, "nullable": False},
                "name": {"type": "str"}, "address": {"type": "str"}}},
    {"name": "Product", "identity": ["sku"], "embed": "{title} ({color})",
     "fields": {"sku": {"type": "str", "required": True, "nullable": False},
                "title": {"type": "str"}, "color": {"type": "str"}}},
    {"name": "Order", "identity": ["number"], "embed": "order {number}: {status}",
     "fields": {"number": {"type": "str", "required": True, "nullable": False},
                "status": {"type": "enum", "values": ["paid", "shipped", "delivered"]}},
     "relations": {"of": {"target": "Product"}, "by": {"target": "User", "cardinality": "one"}}},
]


def test_a_fresh_served_store_takes_ones_own_shop(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dmf_hybrid")
    settings = Settings(data_dir=tmp_path / "data", port=free_port(), embedder="hash")
    with serving(settings) as client:
        assert client.types() == []  # no example data unless asked for (dmf serve --demo)
        for typedef in SHOP:
            assert client.define_type(typedef).version == 1
        user = client.create("User", {"email": "li@example.com", "name": "Li Lei"})
        shirt = client.create("Product", {"sku": "SH-1", "title": "衬衫 shirt", "color": "blue"})
        order = client.create("Order", {"number": "A-1001", "status": "shipped"})
        client.link(order.id, "of", shirt.id)
        client.link(order.id, "by", user.id)
        assert [r.entity.id for r in client.related(order.id, "of")] == [shirt.id]
        assert client.search("Product", "blue shirt", k=1).hits[0].entity.id == shirt.id
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("example data: off (dmf serve --demo") for m in logged)
    port = settings.port
    for url in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/docs",
                f"http://127.0.0.1:{port}/ui"):
        assert any(m.endswith(f" {url}") for m in logged), url


@pytest.mark.parametrize(("host", "base"), [
    ("127.0.0.1", "http://127.0.0.1:8000"), ("0.0.0.0", "http://127.0.0.1:8000"),
    ("::1", "http://[::1]:8000"), ("example.com", "http://example.com:8000")])
def test_service_urls(host: str, base: str) -> None:
    assert service_urls(host, 8000) == [("API", base), ("docs", f"{base}/docs"),
                                        ("inspector", f"{base}/ui")]


def test_the_log_handler_writes_to_the_stderr_of_the_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``dmf serve`` run in-process (a test harness, a notebook) gets a stderr that is closed
    afterwards; a later record goes to the stderr of its own moment, not to "--- Logging
    error ---" on a closed stream."""
    import io

    from dmf_hybrid._internal.api.server import log_to_stderr

    logging.getLogger("dmf_hybrid").handlers = []  # (tests/conftest.py puts it back after)
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    log_to_stderr()
    logging.getLogger("dmf_hybrid.test").info("one")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("dmf_hybrid.test").info("two")
    assert second.getvalue() == "INFO:     two\n"
