"""The audit seq on the wire (``dmf_hybrid._internal.api.seqs``): every answer says the seq its
process had reached (``X-DMF-Seq``), a request may ask for at least a seq (``X-DMF-Min-Seq``), and
``MemoryClient`` asks for the newest one it was told, so it reads its writes whichever process
answers. Two services on one PostgreSQL store stand for two processes (each its own store object,
its own idea of the log's head)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from dmf_hybrid import MemoryClient, ServiceUnavailable, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.wire import MIN_SEQ_HEADER, SEQ_HEADER
from tests.conftest import PgServer
from tests.doors import Front, open_memory, serve

ADMIN = {"Authorization": "Bearer key-admin"}
POI = {"name": "Yu Garden", "city": "Shanghai"}


def test_every_answer_says_the_seq_and_a_write_at_least_its_own(http_api: Front) -> None:
    with http_api.raw() as raw:
        before = int(raw.get("/audit/head").headers[SEQ_HEADER])
        created = raw.post("/entities/Poi", json={"data": POI})
        assert created.status_code == 201
        seq = int(created.headers[SEQ_HEADER])
        events = raw.get(f"/entities/{created.json()['id']}/history").json()
        assert before < events[-1]["seq"] <= seq
        for answer in (raw.get("/healthz"), raw.post("/search", json={"type": "Nope",
                                                                       "text": "x"})):
            assert int(answer.headers[SEQ_HEADER]) >= seq  # errors and fast searches too


def test_a_bad_min_seq_is_refused_naming_it_and_changes_nothing(http_api: Front) -> None:
    with http_api.raw() as raw:
        head = raw.get("/audit/head").json()["last_seq"]
        for bad in ("-1", "x", "1.5", "", str(2**63), "٣".encode()):
            answer = raw.post("/entities/Poi", json={"data": POI},
                              headers={MIN_SEQ_HEADER: bad})
            assert answer.status_code == 422, bad
            body = answer.json()
            assert (body["error"], body["details"]["field"]) == ("validation_error", "min_seq")
        assert raw.get("/audit/head").json()["last_seq"] == head


def test_a_seq_the_service_does_not_reach_is_a_503_not_an_older_answer(
        tmp_path: Path) -> None:
    mem = open_memory(None)
    settings = Settings(data_dir=tmp_path / "d", embedder="hash", load_examples=False,
                        min_seq_wait_seconds=0.3)
    with serve(create_app(settings, mem)) as url, httpx.Client(base_url=url) as raw:
        head = int(raw.get("/audit/head").headers[SEQ_HEADER])
        started = time.monotonic()
        answer = raw.get("/types", headers={MIN_SEQ_HEADER: str(head + 5)})
        waited = time.monotonic() - started
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == "1"
        assert answer.json()["details"] == {"min_seq": head + 5, "seq": head}
        assert 0.3 <= waited < 5
        with MemoryClient(url) as client, pytest.raises(
                ServiceUnavailable, match=f"at seq {head}, not at the {head + 5}"):
            client._send("GET", "/types",  # noqa: SLF001 - one raw call through the client
                         headers={MIN_SEQ_HEADER: str(head + 5)})
        assert raw.get("/types", headers={MIN_SEQ_HEADER: str(head)}).status_code == 200
    mem.close()


def test_a_request_waits_for_a_seq_another_thread_is_about_to_commit(tmp_path: Path) -> None:
    mem = open_memory(None)
    settings = Settings(data_dir=tmp_path / "d", embedder="hash", load_examples=False,
                        min_seq_wait_seconds=10)
    with serve(create_app(settings, mem)) as url, httpx.Client(base_url=url) as raw:
        head = int(raw.get("/audit/head").headers[SEQ_HEADER])
        answers: list[httpx.Response] = []
        reader = threading.Thread(target=lambda: answers.append(raw.post(
            "/entities/Poi/query", json={"where": {"name": "Yu Garden"}},
            headers={MIN_SEQ_HEADER: str(head + 1)})))
        reader.start()
        time.sleep(0.3)
        assert answers == []  # still waiting: nothing has reached head + 1
        mem.create("Poi", POI)
        reader.join(10)
        assert answers[0].status_code == 200
        assert [e["data"]["name"] for e in answers[0].json()["items"]] == ["Yu Garden"]
        assert int(answers[0].headers[SEQ_HEADER]) >= head + 1
    mem.close()


@pytest.fixture
def two_services(pg_server: PgServer, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two services, each with a memory of its own, on one PostgreSQL store."""
    url = pg_server.fresh()
    with ExitStack() as stack:
        bases = []
        for name in ("a", "b"):
            mem = open_memory(None, settings=Settings(store_url=url))
            stack.callback(mem.close)
            settings = Settings(data_dir=tmp_path / name, embedder="hash",
                                load_examples=False, store_url=url)
            bases.append(stack.enter_context(serve(create_app(settings, mem))))
        yield bases[0], bases[1]


def test_a_client_reads_its_writes_through_another_process(
        two_services: tuple[str, str]) -> None:
    a, b = two_services
    sent: list[str | None] = []

    def record(request: httpx.Request) -> None:
        sent.append(request.headers.get(MIN_SEQ_HEADER))

    with MemoryClient(a) as writer:
        created = writer.create("Poi", POI)
        assert writer.seen_seq() >= writer.history(created.id)[-1].seq
        reader = MemoryClient(b)
        reader._exchange._http.event_hooks["request"].append(record)  # noqa: SLF001
        reader._exchange.seen_seq = writer.seen_seq()  # noqa: SLF001 - one session, two doors
        assert reader.get(created.id).id == created.id
        assert [e.id for e in reader.query("Poi").items] == [created.id]
        assert [h.entity.id for h in reader.search("Poi", "Yu Garden", k=1).hits
                ] == [created.id]
        assert len(sent) >= 3 and set(sent) == {str(writer.seen_seq())}  # and the type's
        updated = reader.update(created.id, {"rating": 4})
        assert reader.seen_seq() >= reader.history(created.id)[-1].seq > writer.seen_seq()
        assert writer.get(created.id, as_of=reader.seen_seq()).version == updated.version
        reader.close()


def test_a_client_that_does_not_ask_sends_no_min_seq(http_api: Front) -> None:
    assert http_api.base_url is not None
    sent: list[str | None] = []
    client = MemoryClient(http_api.base_url, api_key="key-admin", read_your_writes=False,
                          transport=http_api.transport)
    client._exchange._http.event_hooks["request"].append(  # noqa: SLF001
        lambda request: sent.append(request.headers.get(MIN_SEQ_HEADER)))
    client.create("Poi", POI)
    client.types()
    assert client.seen_seq() > 0 and len(sent) >= 2 and set(sent) == {None}
    client.close()


def test_min_seq_is_checked_before_anything_else(http_api: Front) -> None:
    """A bad header is refused even on a route that needs no key (nothing else is done)."""
    with http_api.raw(api_key=None) as raw:
        answer = raw.get("/healthz", headers={MIN_SEQ_HEADER: "soon"})
    assert answer.status_code == 422
    assert answer.json()["details"]["field"] == "min_seq"
    assert MIN_SEQ_HEADER in answer.json()["message"]
