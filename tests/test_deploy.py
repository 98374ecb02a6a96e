"""The deploy files name only real settings, files that exist, and the Chroma server that the
installed client speaks to. What they run is what ``tests/api/test_workers.py`` starts here from
plain commands (PostgreSQL from Debian, ``chroma run``, ``dmf serve --store URL --workers 2``
with ``DMF_CHROMA_URL``); Docker itself is not on this machine."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import chromadb
import yaml

from dmf_hybrid._internal.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SETTINGS = {f"DMF_{name.upper()}" for name in Settings.model_fields}


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def test_every_variable_the_compose_file_gives_the_service_is_a_valid_setting() -> None:
    env = compose()["services"]["dmf"]["environment"]
    assert set(env) <= SETTINGS, set(env) - SETTINGS
    literal = {name[4:].lower(): value for name, value in env.items() if "${" not in value}
    settings = Settings(**literal)  # each value is one its setting accepts
    assert settings.workers == 2 and settings.store_url and settings.chroma_url
    assert "DMF_API_KEYS" in env  # bound beyond 127.0.0.1, the service needs keys


def test_the_service_is_pointed_at_the_compose_files_own_servers() -> None:
    services = compose()["services"]
    env = services["dmf"]["environment"]
    store = urlparse(env["DMF_STORE_URL"])
    pg = services["postgres"]["environment"]
    assert (store.hostname, store.username, store.password, store.path) == (
        "postgres", pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], "/" + pg["POSTGRES_DB"])
    assert urlparse(env["DMF_CHROMA_URL"]).hostname == "chroma"
    assert services["dmf"]["build"]["dockerfile"] == "deploy/Dockerfile"


def test_the_chroma_server_is_the_version_of_the_installed_client() -> None:
    image = compose()["services"]["chroma"]["image"]
    pinned = re.search(r"^chromadb==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned is not None
    assert image == f"chromadb/chroma:{pinned.group(1)}"
    assert pinned.group(1) == chromadb.__version__


def test_the_dockerfile_copies_what_exists_and_sets_real_settings() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        *sources, _dest = line.split()
        assert all((ROOT / s).exists() for s in sources), line
    env = re.findall(r"\b(DMF_[A-Z_]+)=", text)
    assert env and set(env) <= SETTINGS
