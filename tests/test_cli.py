"""The dmf command, run in-process with typer's CliRunner on temporary data directories."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from wcwidth import wcwidth

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.cli import app
from dmf_hybrid._internal.cli_support import MAX_CELL, cell, display_width
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
TRAVEL = ROOT / "indexes" / "travel.toml"
ENV = {"DMF_EMBEDDER": "hash", "DMF_DATA_DIR": None}
runner = CliRunner()


def dmf(*args: Any) -> Any:
    """Run ``dmf ARGS`` in-process; the result has exit_code, stdout and stderr."""
    return runner.invoke(app, [str(a) for a in args], env=ENV)


def ok(*args: Any) -> str:
    result = dmf(*args)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "mem"
    ok("define", TRAVEL, "--data", path)
    return path


def test_every_command_has_help() -> None:
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in
             app.registered_commands]
    assert {"serve", "ingest", "get", "query", "search", "history", "verify", "reconcile",
            "reindex", "snapshot", "restore-snapshot", "define", "eval", "mcp", "create",
            "update", "delete", "restore", "link", "unlink", "types", "count", "export",
            "import", "migrate"} <= set(names)
    for name in names:
        if name == "eval":
            continue  # forwards --help to `python -m evaluation` (see below)
        out = ok(name, "--help")
        assert "Usage" in out
        assert "<bool>" not in out
        if name == "migrate":  # from one store to another: both named, neither served
            assert "--from" in out and "--to" in out
        elif name not in ("restore-snapshot", "serve", "import"):
            assert "--url" in out and "--data" in out


def test_eval_forwards_its_arguments(tmp_path: Path) -> None:
    result = dmf("eval", "--help")
    assert result.exit_code == 0
    assert dmf("eval", "no-such-command").exit_code != 0


def test_ingest_jsonl_and_csv_with_a_summary(data: Path, tmp_path: Path) -> None:
    rows = [{"name": "Shanghai Museum", "city": "Shanghai", "category": "museum"},
            {"name": "Bad", "city": "Shanghai", "estimated_cost": "lots"},
            {"name": "Yu Garden", "city": "Shanghai", "estimated_cost": 40},
            {"name": "Shanghai Museum", "city": "Shanghai", "category": "museum"}]
    jsonl = tmp_path / "poi.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = dmf("ingest", jsonl, "--type", "PointOfInterest", "--data", data, "--batch", 2)
    assert result.exit_code == 1
    assert "ingested poi.jsonl into PointOfInterest: 2 created, 1 existing" in result.stdout
    assert "1 errors" in result.stdout
    reason = next(line for line in result.stdout.splitlines() if line.startswith("2 "))
    assert "estimated_cost" in reason
    csv_file = tmp_path / "users.csv"
    csv_file.write_text('handle,name,interests\nana,Ana,"[""tea"", ""museums""]"\nbo,,\n')
    out = json.loads(ok("ingest", csv_file, "-t", "User", "--data", data, "--json"))
    assert (out["created"], out["existing"], out["errors"]) == (2, 0, 0)
    users = json.loads(ok("query", "User", "--data", data, "--json", "--order-by", "handle"))
    assert [u["data"]["interests"] for u in users["items"]] == [["tea", "museums"], []]


def test_read_and_maintenance_commands(data: Path, tmp_path: Path) -> None:
    with Memory.open(data, settings=Settings(embedder="hash")) as mem:
        museum = mem.create("PointOfInterest", {"name": "Shanghai Museum", "city": "Shanghai",
                                                "category": "museum"})
        mem.create("PointOfInterest", {"name": "Yu Garden", "city": "Shanghai",
                                       "category": "park", "estimated_cost": 40})
        mem.update(museum.id, {"rating": 4.8})
        create_seq = mem.history(museum.id)[0].seq
    entity = json.loads(ok("get", museum.id, "--data", data, "--json"))
    assert entity["version"] == 2 and entity["data"]["rating"] == 4.8
    old = json.loads(ok("get", museum.id, "--as-of", create_seq, "--data", data, "--json"))
    assert old["version"] == 1 and old["data"]["rating"] is None
    table = ok("get", museum.id, "--data", data)
    assert "Shanghai Museum" in table and "version" in table
    page = ok("query", "PointOfInterest", "--where", '{"city": "Shanghai"}', "--order-by",
              "-estimated_cost,name", "--limit", 1, "--data", data)
    assert "Yu Garden" in page and "next page: --cursor" in page
    cursor = page.split("--cursor ")[1].strip()
    second = json.loads(ok("query", "PointOfInterest", "--where", '{"city": "Shanghai"}',
                           "--order-by", "-estimated_cost,name", "--limit", 1, "--cursor",
                           cursor, "--data", data, "--json"))
    assert [e["id"] for e in second["items"]] == [museum.id]
    hits = ok("search", "PointOfInterest", "museum", "--k", 1, "--data", data)
    assert museum.id in hits and "1 hit(s)" in hits
    found = json.loads(ok("search", "PointOfInterest", "garden", "--where",
                          '{"category": "park"}', "--mode", "keyword", "--data", data,
                          "--json"))
    assert found["hits"][0]["entity"]["data"]["name"] == "Yu Garden"
    dated = ok("search", "PointOfInterest", "museum visit last week", "--reference-time",
               "2023-07-26", "--data", data)
    assert "time phrase 'last week' read as 2023-07-17..2023-07-23" in dated
    bad = dmf("search", "PointOfInterest", "museum", "--reference-time", "soon", "--data", data)
    assert bad.exit_code != 0 and "reference_time" in bad.output
    history = ok("history", museum.id, "--data", data)
    assert "create" in history and "update" in history and "1->2" in history
    assert "audit log OK" in ok("verify", "--data", data)
    assert "missing 0" in ok("reconcile", "--data", data)
    assert json.loads(ok("reindex", "--data", data, "--json"))
    snap = tmp_path / "snap"
    assert "snapshot written" in ok("snapshot", snap, "--data", data)
    restored = tmp_path / "restored"
    assert "PointOfInterest 2" in ok("restore-snapshot", snap, restored)
    assert json.loads(ok("get", museum.id, "--data", restored, "--json")) == entity
    exported = json.loads(ok("export", tmp_path / "b.jsonl.gz", "--data", data, "--json"))
    assert exported["counts"]["entity"] >= 2
    assert "chain verified" in ok("import", tmp_path / "b.jsonl.gz", tmp_path / "imported")
    assert json.loads(ok("get", museum.id, "--data", tmp_path / "imported", "--json")) == entity
    refused = dmf("import", tmp_path / "b.jsonl.gz", tmp_path / "imported")
    assert refused.exit_code == 1 and "not empty" in refused.output


def test_errors_are_clear(data: Path) -> None:
    result = dmf("query", "PointOfInterest", "--where", "{not json", "--data", data)
    assert result.exit_code == 2 and "not valid JSON" in result.output
    result = dmf("query", "Nope", "--data", data)
    assert result.exit_code == 1
    assert "not_found" in result.stderr and "PointOfInterest" in result.stderr
    result = dmf("get", "PointOfInterest_0000", "--data", data)
    assert result.exit_code == 1 and "no entity" in result.stderr
    result = dmf("query", "Trip", "--where", '{"budgt": 1}', "--data", data)
    assert result.exit_code == 1 and "budget" in result.stderr


def test_a_locked_directory_names_the_url_option(data: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom dmf_hybrid import Memory, HashEmbedder\n"
         "from dmf_hybrid._internal.vector.exact import ExactIndex\n"
         f"m = Memory.open({str(data)!r}, embedder=HashEmbedder(), vector_index=ExactIndex())\n"
         "print('ready', flush=True)\nsys.stdin.read()\nm.close()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        result = dmf("verify", "--data", data)
        assert result.exit_code == 2
        assert "--url" in result.stderr and "another process" in result.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


# ---------------------------------------------------------------- against a server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    from dmf_hybrid._internal.api.server import create_server

    mem = Memory.open(tmp_path / "served", embedder=HashEmbedder(), vector_index=ExactIndex())
    settings = Settings(port=free_port(), load_examples=False)
    srv = create_server(settings, mem, log_level="warning")
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
        mem.close()


def test_commands_work_against_a_server_url(server: str, tmp_path: Path) -> None:
    ok("define", TRAVEL, "--url", server)
    rows = tmp_path / "poi.jsonl"
    rows.write_text(json.dumps({"name": "The Bund", "city": "Shanghai"}) + "\n")
    assert "1 created" in ok("ingest", rows, "--type", "PointOfInterest", "--url", server)
    page = json.loads(ok("query", "PointOfInterest", "--url", server, "--json"))
    bund = page["items"][0]["id"]
    assert json.loads(ok("get", bund, "--url", server, "--json"))["data"]["name"] == "The Bund"
    assert bund in ok("search", "PointOfInterest", "bund", "--url", server)
    assert "create" in ok("history", bund, "--url", server)
    assert "audit log OK" in ok("verify", "--url", server)
    result = dmf("get", "PointOfInterest_0000", "--url", server)
    assert result.exit_code == 1 and "not_found" in result.stderr


# ---------------------------------------------------------------- first steps


def test_help_renders_markup_and_no_bool_metavars() -> None:
    out = ok("define", "--help")
    assert "[types.Name]" in out
    ingest_help = ok("ingest", "--help")
    assert "--strict" in ingest_help and "<bool>" not in ingest_help
    assert "--on-conflict" in ingest_help


def test_reads_never_create_a_data_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    for args in (("types",), ("count", "Trip"), ("get", "Trip_1"), ("query", "Trip"),
                 ("verify",), ("search", "Trip", "x")):
        result = dmf(*args, "--data", missing)
        assert result.exit_code == 2, (args, result.output)
        assert "no memory at" in result.stderr
        assert not missing.exists()


def test_entity_commands_have_the_sdk_errors(data: Path) -> None:
    made = json.loads(ok("create", "PointOfInterest", '{"name": "Bund", "city": "Shanghai"}',
                         "--data", data, "--json"))
    bund = made["id"]
    assert made["created"] is True
    again = ok("create", "PointOfInterest",
               '{"name": "Bund", "city": "Shanghai", "estimated_cost": 5}', "--data", data)
    assert "differs: estimated_cost" in again
    result = dmf("create", "PointOfInterest",
                 '{"name": "Bund", "city": "Shanghai", "estimated_cost": 5}',
                 "--on-conflict", "raise", "--data", data)
    assert result.exit_code == 1 and "conflict" in result.stderr
    ok("create", "PointOfInterest", '{"name": "Bund", "city": "Shanghai", "estimated_cost": 5}',
       "--on-conflict", "update", "--data", data)
    assert json.loads(ok("get", bund, "--data", data, "--json"))["data"]["estimated_cost"] == 5
    result = dmf("update", bund, '{"name": "Waitan"}', "--data", data)
    assert result.exit_code == 1 and "identity" in result.stderr
    updated = json.loads(ok("update", bund, '{"rating": 4.5}', "--expected-version", 2,
                            "--data", data, "--json"))
    assert updated["version"] == 3
    result = dmf("update", bund, '{"rating": 4}', "--expected-version", 1, "--data", data)
    assert result.exit_code == 1 and "version_conflict" in result.stderr
    trip = json.loads(ok("create", "Trip", '{"user": "ana", "destination": "Shanghai"}',
                         "--data", data, "--json"))["id"]
    assert "linked" in ok("link", trip, "includes", bund, "--data", data)
    assert "already linked" in ok("link", trip, "includes", bund, "--data", data)
    assert "unlinked" in ok("unlink", trip, "includes", bund, "--data", data)
    result = dmf("unlink", trip, "includes", bund, "--data", data)
    assert result.exit_code == 1 and "not_found" in result.stderr
    assert ok("count", "PointOfInterest", "--data", data).strip() == "1"
    assert "deleted" in ok("delete", bund, "--data", data)
    assert ok("count", "PointOfInterest", "--data", data).strip() == "0"
    assert json.loads(ok("restore", bund, "--data", data, "--json"))["version"] == 5
    assert ok("count", "PointOfInterest", "--where", '{"city": "Shanghai"}', "--data",
              data).strip() == "1"
    listed = ok("types", "--data", data)
    assert "PointOfInterest" in listed and "name, city" in listed
    result = dmf("create", "PointOfInterest", '{"city": "Shanghai"}', "--data", data)
    assert result.exit_code == 1 and "name" in result.stderr


def test_ingest_continues_past_bad_lines_and_takes_example_rows(data: Path,
                                                                 tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"name": "A", "city": "X"}\n{not json\n[1, 2]\n{"name": "B", "city": "X"}\n')
    result = dmf("ingest", mixed, "-t", "PointOfInterest", "--data", data, "--json")
    out = json.loads(result.stdout)
    assert result.exit_code == 1
    assert (out["created"], out["errors"]) == (2, 2)
    assert [e["row"] for e in out["error_rows"]] == [2, 3]
    assert "not valid JSON" in out["error_rows"][0]["message"]
    strict = json.loads(dmf("ingest", mixed, "-t", "PointOfInterest", "--strict", "--data",
                            data, "--json").stdout)
    assert strict["errors"] == 1 and strict["created"] == 0
    example = ROOT / "indexes" / "examples" / "travel.jsonl"
    out = json.loads(ok("ingest", example, "--data", data, "--json"))
    assert out["created"] > 0 and out["errors"] == 0
    again = json.loads(ok("ingest", example, "--data", data, "--json"))
    assert again["created"] == 0 and again["existing"] == out["created"]
    changed = tmp_path / "changed.jsonl"
    changed.write_text('{"name": "A", "city": "X", "estimated_cost": 9}\n')
    out = json.loads(ok("ingest", changed, "-t", "PointOfInterest", "--data", data, "--json"))
    assert (out["existing"], out["differ"], out["updated"]) == (1, 1, 0)
    out = json.loads(ok("ingest", changed, "-t", "PointOfInterest", "--on-conflict", "update",
                        "--data", data, "--json"))
    assert out["updated"] == 1
    result = dmf("ingest", changed, "-t", "PointOfInterest", "--on-conflict", "nope",
                 "--data", data)
    assert result.exit_code == 2


def test_ingest_shows_the_model_load(capsys: pytest.CaptureFixture[str]) -> None:
    from dmf_hybrid._internal.cli_support import load_model_with_bar
    from tests.conftest import LoadsOnFirstUse, host_of

    embedder = LoadsOnFirstUse()
    load_model_with_bar(host_of(embedder), progress=True)
    assert embedder.loaded and "loading model" in capsys.readouterr().err
    load_model_with_bar(host_of(embedder), progress=True)
    assert capsys.readouterr().err == ""  # loaded: no bar


# ---------------------------------------------------------------- dmf serve


SERVE_WAIT = 60.0


def test_serve_says_where_it_is_and_when_it_is_ready(tmp_path: Path) -> None:
    port = free_port()
    env = {**ENV, "DMF_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from dmf_hybrid._internal.cli import main; main()", "serve",
               "--port", str(port), "--host", "127.0.0.1", "--demo"]
    lines: list[str] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          text=True, env={k: v for k, v in env.items() if v is not None},
                          ) as serve:
        assert serve.stderr is not None
        timer = threading.Timer(SERVE_WAIT, serve.kill)  # the test stops by itself
        timer.start()
        try:
            for line in serve.stderr:
                lines.append(line.rstrip())
                if "ready after" in line or "error" in line.lower():
                    break
        finally:
            serve.terminate()
            serve.wait(SERVE_WAIT)
            timer.cancel()
    text = "\n".join(lines)
    base = f"http://127.0.0.1:{port}"
    for url in (base, f"{base}/docs", f"{base}/ui"):
        assert f" {url}\n" in text + "\n", text
    assert "example data: on (--demo)" in text and "ready after" in text, text


# ---------------------------------------------------------------- tables


def _columns(line: str) -> list[int]:
    """The display column where each cell of a table line starts."""
    starts, width, gap = [0], 0, 0
    for char in line:
        if char == " ":
            gap += 1
        else:
            if gap >= 2:
                starts.append(width)
            gap = 0
        width += max(wcwidth(char), 0)
    return starts


def test_tables_align_chinese_by_display_width(tmp_path: Path) -> None:
    path = tmp_path / "mem"
    ok("define", TRAVEL, "--data", path)
    for name, city in (("豫园", "上海"), ("The Bund", "Shanghai"), ("外滩观景台", "上海市")):
        ok("create", "PointOfInterest", json.dumps({"name": name, "city": city}),
           "--data", path)
    out = ok("query", "PointOfInterest", "--data", path)
    lines = [line for line in out.splitlines() if line.strip()]
    header, rows = lines[0], lines[2:5]  # then "3 item(s)"
    assert len(rows) == 3 and any("外滩观景台" in r for r in rows)
    assert all(_columns(r)[:4] == _columns(header)[:4] for r in rows), out


def test_a_long_chinese_cell_is_cut_at_the_column_limit() -> None:
    text = cell("衬衫" * 100)
    assert text.endswith("…") and display_width(text) <= MAX_CELL
    assert display_width("蓝色 shirt") == 10
