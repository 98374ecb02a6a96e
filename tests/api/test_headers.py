"""The audit headers keep any language intact: percent-encoded UTF-8 (what MemoryClient
sends), RFC 8187 ``UTF-8''...`` and raw UTF-8 bytes are stored as meant; bytes that are not
UTF-8 are refused with a message that says how to send them, and change nothing."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from dmf_hybrid import ValidationError
from dmf_hybrid._internal.api.headers import decode_header_text
from tests.doors import Front

REASON, ACTOR, TRACE = "改成公司", "客服小王", "工单-42 ✓"


def _poi(front: Front) -> str:
    return front.mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"}).id


def test_the_sdk_keeps_chinese_in_the_audit_log_through_every_door(api: Front) -> None:
    eid = _poi(api)
    api.mem.update(eid, {"cost": 40}, actor=ACTOR, reason=REASON, trace_id=TRACE)
    event = api.mem.history(eid)[-1]
    assert (event.actor, event.reason, event.trace_id) == (ACTOR, REASON, TRACE)
    assert api.mem.verify_audit().ok


@pytest.mark.parametrize("encode", [
    lambda text: quote(text, safe=""),                       # percent-encoded UTF-8
    lambda text: "UTF-8''" + quote(text, safe=""),           # RFC 8187
    lambda text: "utf-8'zh-Hans'" + quote(text, safe=""),    # RFC 8187, with a language
    lambda text: text.encode("utf-8"),                       # raw UTF-8 bytes
], ids=["percent", "rfc8187", "rfc8187-language", "raw-utf8"])
def test_raw_http_headers_are_stored_as_meant(http_api: Front, encode: object) -> None:
    eid = _poi(http_api)
    assert callable(encode)
    with http_api.raw() as raw:
        answer = raw.patch(f"/entities/{eid}", json={"data": {"cost": 40}},
                           headers={"X-Reason": encode(REASON), "X-Actor": encode(ACTOR),
                                    "X-Trace-Id": encode(TRACE)})
        assert answer.status_code == 200, answer.text
        events = raw.get("/audit/events").json()
    last = events[-1]
    assert (last["actor"], last["reason"], last["trace_id"]) == (ACTOR, REASON, TRACE)


@pytest.mark.parametrize(("header", "field"), [("X-Reason", "reason"), ("X-Actor", "actor"),
                                               ("X-Trace-Id", "trace_id")])
@pytest.mark.parametrize("value", [b"caf\xe9", "%E6%94", "UTF-8''%E6%94"],
                         ids=["latin-1-bytes", "cut-escape", "cut-rfc8187"])
def test_unreadable_header_text_is_refused_and_says_how(http_api: Front, header: str,
                                                        field: str, value: object) -> None:
    eid = _poi(http_api)
    assert http_api.embedded is not None
    before = http_api.embedded.last_seq()
    with http_api.raw() as raw:
        answer = raw.patch(f"/entities/{eid}", json={"data": {"cost": 40}},
                           headers={header: value})  # type: ignore[dict-item]
    assert answer.status_code == 422
    body = answer.json()
    assert body["details"]["field"] == field and header in body["message"]
    assert "percent-encoded" in body["message"] and "UTF-8''" in body["message"]
    assert http_api.embedded.last_seq() == before


@pytest.mark.parametrize(("value", "text"), [
    ("plain", "plain"), ("a%20b", "a b"), ("100%", "100%"), ("UTF-8''a%20b", "a b"),
    ("改成 100%25".encode().decode("latin-1"), "改成 100%25"),  # raw: taken as it is
])
def test_decoding_rules(value: str, text: str) -> None:
    assert decode_header_text(value, "X-Reason", "reason") == text


def test_iso_8859_1_in_rfc8187_is_not_taken_for_utf8() -> None:
    with pytest.raises(ValidationError):
        decode_header_text("iso-8859-1'en'caf%E9", "X-Reason", "reason")


def test_every_answer_says_nosniff_and_json_is_never_cached(http_api: Front) -> None:
    with http_api.raw() as raw:
        answers = {
            "types": raw.get("/types"),
            "search": raw.post("/search", json={"type": "Message", "text": "hi"}),
            "not found": raw.get("/entities/no-such-id"),
            "bad body": raw.post("/search", content=b"{", headers={
                "content-type": "application/json"}),
            "too large": raw.post("/search", content=b"x" * (64 * 1024 + 1)),
            "openapi": raw.get("/openapi.json"),
        }
        page = raw.get("/ui/")
    for name, answer in answers.items():
        assert answer.headers["x-content-type-options"] == "nosniff", name
        assert answer.headers["content-type"].startswith("application/json"), name
        assert answer.headers["cache-control"] == "no-store", name
    assert answers["too large"].status_code == 413
    assert page.status_code == 200 and page.headers["x-content-type-options"] == "nosniff"
    assert page.headers.get("cache-control") != "no-store"  # static files keep their policy
