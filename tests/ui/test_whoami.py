"""GET /whoami: the tenant and role of the caller's key (the inspector shows them)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.ui.conftest import WAIT, key_label, serving


@pytest.mark.parametrize("keys", ["with keys", "open"])
def test_whoami_names_tenant_role_and_actor(tmp_path: Path, keys: str) -> None:
    mem = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        options = {} if keys == "with keys" else {"api_keys": None}
        with serving(mem, tmp_path, **options) as url, httpx.Client(base_url=url,
                                                                   timeout=WAIT) as http:
            if keys == "open":
                assert http.get("/whoami").json() == {"tenant": "default", "role": "admin",
                                                      "key_label": None, "open": True,
                                                      "scope": "store"}
                return
            assert http.get("/whoami").status_code == 401
            bad = http.get("/whoami", headers={"X-API-Key": "nope"})
            assert bad.status_code == 401 and bad.json()["message"] == "unknown API key"
            for key, tenant, role in (("ui-reader", "default", "reader"),
                                      ("ui-writer", "default", "writer"),
                                      ("ui-other", "other", "writer")):
                me = http.get("/whoami", headers={"Authorization": f"Bearer {key}"}).json()
                assert me == {"tenant": tenant, "role": role, "key_label": key_label(key),
                              "open": False, "scope": "store" if role == "admin" else "tenant"}
    finally:
        mem.close()
