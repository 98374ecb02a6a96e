"""Smoke tests of the HTTP, search and cold-start benchmarks and of ``make bench``'s wiring.

The benchmarks run for real at tiny sizes (test embedder, a real server subprocess on
127.0.0.1); only the shape of their results is checked, never their timings.
"""

from __future__ import annotations

import gzip
import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from evaluation import (
    bench_all,
    bench_bundle,
    bench_coldstart,
    bench_fair,
    bench_http,
    bench_keyword,
    bench_keyword_memory,
    bench_load_writes,
    bench_recovery,
    bench_search,
    wrk_driver,
)
from evaluation.plotting import latency_summary, markdown_table, percentile, write_results

RESULT_KEYS = {"mode", "concurrency", "requests", "errors", "p50_ms", "p95_ms", "mean_ms", "rps",
               "rps_per_round", "server_p50_ms", "truncated", "failures",
               "server_cpu_ms_per_request", "client_cpu_ms_per_request"}


def test_percentiles_interpolate() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert math.isnan(percentile([], 50))
    assert latency_summary([0.001, 0.003]) == {"n": 2, "p50_ms": 2.0, "p95_ms": 2.9,
                                               "mean_ms": 2.0, "max_ms": 3.0}
    assert markdown_table(["a", "b"], [[1, 0.12345]]) == "| a | b |\n|---|---|\n| 1 | 0.123 |\n"


def test_data_is_deterministic_and_queries_distinct() -> None:
    assert bench_http.make_rows(5) == bench_http.make_rows(5)
    assert len({r["title"] for r in bench_http.make_rows(200)}) == 200
    queries = bench_http.make_queries(300)
    assert len(set(queries)) == 300 and queries == bench_http.make_queries(300)


@pytest.mark.slow  # starts the service in a subprocess
@pytest.mark.timeout(120)
def test_bench_http_smoke(tmp_path: Path) -> None:
    doc = bench_http.run(n=30, embedder="hash", modes=("hybrid", "keyword"), levels=(1, 2),
                         requests=4, rounds=2, warmup=1, batch=10, ready_timeout=60,
                         workdir=tmp_path)
    assert {"benchmark", "config", "environment", "server", "results", "elapsed_s"} <= set(doc)
    assert {"spawn_to_healthz_s", "spawn_to_readyz_s", "ingest_s", "ingest_per_s",
            "ingest_to_indexed_s", "exit_code", "embedded_ingest_s",
            "http_over_embedded_ingest"} <= set(doc["server"])
    assert doc["server"]["embedded_ingest_s"] > 0 and doc["server"]["http_over_embedded_ingest"] > 0
    # stopped gracefully by SIGTERM (uvicorn re-raises the signal after its shutdown)
    assert doc["server"]["exit_code"] in (0, -signal.SIGTERM)
    cells = {(r["mode"], r["concurrency"]) for r in doc["results"]}
    assert cells == {(m, c) for m in ("hybrid", "keyword", bench_http.PEER) for c in (1, 2)}
    assert doc["peer"]["rss_mb"] > 0 and doc["server"]["rss"]["after_load_mb"] > 0
    assert "hybrid_over_peer_rps_at_2" in doc["ratios"]
    for row in doc["results"]:
        assert RESULT_KEYS <= set(row)
        assert row["requests"] == 4 and row["errors"] == 0 and not row["truncated"]
        assert row["p95_ms"] >= row["p50_ms"] > 0 and row["rps"] > 0
        # the serving process (ours, or the peer's Chroma server) and this one did work
        assert row["server_cpu_ms_per_request"] >= 0 and row["client_cpu_ms_per_request"] > 0
    assert sum(r["server_cpu_ms_per_request"] for r in doc["results"]) > 0
    paths = bench_http.write_outputs(doc, tmp_path / "out" / "bench_http.json")
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert json.loads(paths[0].read_text())["results"] == doc["results"]
    assert "| hybrid | 2 | 4 |" in paths[1].read_text()
    assert not list(tmp_path.glob("dmf-bench-http-*"))  # the data directory was removed


@pytest.mark.slow  # starts the service in a subprocess
@pytest.mark.timeout(120)
def test_bench_http_with_the_wrk_driver(tmp_path: Path) -> None:
    doc = bench_http.run(n=30, embedder="hash", modes=("vector", "keyword"), levels=(1, 3),
                         rounds=2, warmup=1, batch=10, ready_timeout=60, workdir=tmp_path,
                         driver="wrk", wrk_seconds=1)
    assert doc["config"]["driver"] == "wrk" and doc["peer"] is None  # no peer with wrk
    cells = {(r["mode"], r["concurrency"]) for r in doc["results"]}
    assert cells == {(m, c) for m in ("vector", "keyword") for c in (1, 3)}
    for row in doc["results"]:
        assert RESULT_KEYS <= set(row)
        assert row["requests"] > 10 and row["errors"] == 0 and len(row["rps_per_round"]) == 2
        assert row["p95_ms"] >= row["p50_ms"] > 0 and row["rps"] > 0
        # wrk's own CPU per request is far below the server's
        assert 0 < row["client_cpu_ms_per_request"] < row["server_cpu_ms_per_request"]
    assert set(doc["ratios"]) == {"vector_rps_3_over_1", "keyword_rps_3_over_1"}
    paths = bench_http.write_outputs(doc, tmp_path / "out" / "bench_http.json", png=False)
    assert "wrk for 1 s per cell" in paths[1].read_text()


def test_the_wrk_driver_says_how_to_install_wrk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wrk_driver.shutil, "which", lambda _name: None)
    with pytest.raises(RuntimeError, match="apt-get install wrk"):
        bench_http.run(n=1, driver="wrk")
    with pytest.raises(ValueError, match="unknown driver"):
        bench_http.run(n=1, driver="ab")


def test_bench_http_records_what_failed_requests_answered() -> None:
    def send(body: Any) -> tuple[int, float | None]:
        if body["i"] % 3 == 0:
            raise RuntimeError(f"HTTP 503: busy {body['i']}")
        return 200, 1.0

    cell = bench_http.Cell("hybrid", 2)
    bodies = [{"i": i} for i in range(30)]
    bench_http.drive(send, bodies, 2, time.perf_counter() + 60, cell)
    assert cell.ok == 20 and cell.errors == 10
    assert len(cell.failures) == bench_http.FAILURES_KEPT
    assert all(f.startswith("RuntimeError: HTTP 503: busy ") for f in cell.failures)
    row = bench_http.summarise(cell)
    assert row["failures"] == cell.failures
    doc = {"config": {"n": 1, "embedder": "hash", "k": 1, "requests_per_cell": 30, "rounds": 1},
           "server": {"spawn_to_healthz_s": 0, "spawn_to_readyz_s": 0, "ingest_per_s": 0},
           "environment": {"cpus": 2, "load_average": [0, 0, 0]}, "results": [row]}
    assert "- failed (hybrid, 2 clients): RuntimeError: HTTP 503: busy" in bench_http.markdown(doc)


@pytest.mark.slow  # starts the service and fresh interpreters in subprocesses
@pytest.mark.timeout(120)
def test_bench_coldstart_smoke(tmp_path: Path) -> None:
    store = tmp_path / "store"
    bench_coldstart.build_store(store, 20, "hash")
    doc = bench_coldstart.run(n=20, embedder="hash", runs=1, timeout=60, workdir=tmp_path,
                              store=store)
    assert {"benchmark", "config", "environment", "build_s", "median", "runs",
            "elapsed_s"} <= set(doc)
    stages = [key for key, _ in bench_coldstart.STAGES]
    assert set(stages) <= set(doc["median"])
    run = doc["runs"][0]
    for key in stages:
        if key != "model_load_s":  # the test embedder has no model to load
            assert run[key] > 0 and doc["median"][key] == run[key]
    assert run["server_readyz_s"] >= run["server_healthz_s"]
    assert run["first_search_hits"] == 10
    assert 0 < run["server_rss_mb"] <= run["server_peak_rss_mb"]
    paths = bench_coldstart.write_outputs(doc, tmp_path / "out" / "bench_coldstart.json")
    assert "(a) import dmf_hybrid" in paths[1].read_text()
    assert "(e) server peak resident memory" in paths[1].read_text()
    assert store.exists()  # a given store is not deleted


def test_bench_load_writes_smoke(tmp_path: Path) -> None:
    doc = bench_load_writes.run(n=200, embedder="hash", rounds=2, gap_ms=1, workdir=tmp_path)
    assert doc["config"]["entities"] == 200 and doc["config"]["build_s"] > 0
    rows = doc["results"]
    assert [(r["round"], r["variant"]) for r in rows] == [
        (1, "snapshot"), (1, "locked"), (2, "locked"), (2, "snapshot")]
    for row in rows:
        assert row["load_s"] > 0 and row["after_p50_ms"] > 0
        after = [w for w in row["writes"] if not w[2]]
        assert len(after) == bench_load_writes.AFTER
        assert all(w[1] > 0 for w in row["writes"])
    paths = bench_load_writes.write_outputs(doc, tmp_path / "out" / "bench_load_writes.json")
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert "| 2 | snapshot |" in paths[1].read_text()
    assert not list(tmp_path.glob("dmf-bench-load-*"))  # the temporary store was removed


def test_bench_all_plans_every_benchmark(tmp_path: Path) -> None:
    for quick in (False, True):
        steps = bench_all.plan(tmp_path, tmp_path / "scifact", quick)
        assert [s.name for s in steps] == ["store", "engines", "search", "keyword", "http",
                                           "workers", "relay", "coldstart", "embed",
                                           "loadwrites"]
        for step in steps:
            name = "load_writes" if step.name == "loadwrites" else step.name
            assert ("--out", str(tmp_path / f"bench_{name}.json")) in step.flags


def test_bench_all_drops_unknown_flags_and_skips_missing(tmp_path: Path) -> None:
    step = bench_all.Step("http", "evaluation.bench_http", [("--n", "5"), ("--no-such",)], 60)
    kept, notes = bench_all.accepted_flags(step)
    assert kept == [("--n", "5")]
    assert notes == ["evaluation.bench_http has no --no-such option: running without --no-such"]
    missing = bench_all.run_step(bench_all.Step("gone", "evaluation.bench_gone", [], 60))
    assert missing.status == "skipped: module evaluation.bench_gone not found"
    no_data = bench_all.run_step(
        bench_all.Step("kw", "evaluation.bench_keyword", [], 60, [tmp_path / "nope"]))
    assert no_data.status.startswith("skipped:") and "does not exist" in no_data.status


def _servers_over(directory: Path) -> list[int]:
    """PIDs of dmf servers whose data directory is under ``directory``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if b"dmf_hybrid._internal.api.server" in cmdline and f"={directory}".encode() in environ:
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow  # starts the service in a subprocess
@pytest.mark.timeout(120)
def test_bench_all_timeout_stops_the_server_too(tmp_path: Path) -> None:
    step = bench_all.Step("http", "evaluation.bench_http",
                          [("--n", "10"), ("--embedder", "hash"), ("--workdir", str(tmp_path)),
                           ("--out", str(tmp_path / "http.json"))], 4)
    outcome = bench_all.run_step(step)
    assert outcome.status == "timed out after 4 s"
    assert _servers_over(tmp_path) == []
    assert not list(tmp_path.glob("dmf-bench-http-*"))  # its finally block ran


def test_an_interrupted_load_cell_ends_its_clients_at_once() -> None:
    """SIGTERM (bench_all's time-out) raises SystemExit in the main thread while clients send:
    the cell stops them instead of waiting for its bodies or its deadline to run out (it used
    to: a step stopped before its clients passed their barrier never exited)."""
    def send(_body: Any) -> tuple[int, float | None]:
        time.sleep(0.01)
        return 200, None

    def interrupt(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGALRM, interrupt)
    cell = bench_http.Cell("vector", 4)
    bodies = [{"text": str(i)} for i in range(20_000)]
    start = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(SystemExit):
            bench_http.drive(send, bodies, 4, time.perf_counter() + 120, cell)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # 20,000 sends of 10 ms over 4 clients would take 50 s
    assert time.perf_counter() - start < 10


def test_bench_search_smoke(tmp_path: Path) -> None:
    out = tmp_path / "search.json"
    assert bench_search.main(["--n", "2000", "--queries", "3", "--skip-model",
                              "--skip-reindex", "--out", str(out),
                              "--workdir", str(tmp_path / "work")]) == 0
    result = json.loads(out.read_text())
    assert [e["selectivity"] for e in result["search"]] == list(bench_search.SELECTIVITIES)
    for entry in result["search"]:
        # exact whatever the plan, with the caches and without, and right after commits
        assert entry["ours"]["recall_at_10"] == entry["ours_cold"]["recall_at_10"] == 1.0
        if entry["selectivity"] != "100%":
            assert entry["ours_after_update"]["recall_at_10"] == 1.0
            assert entry["ours_after_create"]["recall_at_10"] == 1.0
        assert entry["numpy_exact"]["recall_at_10"] == 1.0
    assert set(result["targets"]) >= {"filtered_speedup_min", "filtered_recall_min",
                                      "filtered_speedup_min_new_filter",
                                      "filtered_speedup_min_after_update",
                                      "filtered_speedup_min_after_create",
                                      "unfiltered_overhead"}
    assert out.with_suffix(".md").read_text().startswith("n = 2,000")
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_keyword_runs_or_explains_the_duckdb_fts_comparison(tmp_path: Path) -> None:
    """DuckDB's fts extension exists only for duckdb 1.4.4: either it is compared, or the run
    names it as skipped with the reason, and the other systems are measured all the same."""
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    docs = {"d1": "apple pie recipe", "d2": "pear tart", "d3": "apple orchard in autumn"}
    with gzip.open(data / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"_id": i, "title": "", "text": t}) + "\n"
                      for i, t in docs.items())
    (data / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "apple"}) + "\n", encoding="utf-8")
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n",
                                              encoding="utf-8")
    out = tmp_path / "kw.json"
    assert bench_keyword.main(["--data", str(data), "--out", str(out), "--synthetic", "0",
                               "--systems", "ours,duckdb"]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    systems = [r["system"] for r in doc["runs"]]
    assert systems[0] == "KeywordIndex" and doc["runs"][0]["ndcg@10"] > 0
    if "duckdb" in doc["skipped"]:
        assert systems == ["KeywordIndex"] and "duckdb" in doc["skipped"]["duckdb"]
    else:
        assert systems == ["KeywordIndex", "duckdb-fts"]


def test_bench_recovery_smoke(tmp_path: Path) -> None:
    row = bench_recovery.measure(tmp_path, 300)
    assert row["entities"] == 300 and row["wal_bytes"] > 0
    assert row["indexes_rebuilt"] == ["embeddings_text_hash", "ent_Item_id", "entity_index_id"]
    assert row["keys_probed"] >= 6
    assert all(row[k] > 0 for k in ("open_after_kill_s", "reachable_check_s", "repair_s"))


@pytest.mark.slow  # starts the service in a subprocess
@pytest.mark.timeout(300)
def test_bench_fair_smoke(tmp_path: Path) -> None:
    doc = bench_fair.run(embedder="hash", batch=200, samples=4, gap_ms=5, history=20,
                         updates=2, clients=2, workdir=tmp_path)
    ingest, as_of = doc["phases"]["ingest"], doc["phases"]["as_of"]
    assert ingest["idle"]["n"] == 4 and ingest["loaded"]["n"] >= 1 and ingest["batch_s"] > 0
    assert as_of["idle"]["n"] == 4 and as_of["loaded"]["n"] == 4
    assert as_of["a_as_of_search"]["n"] >= 1 and as_of["as_of"] >= 1
    for phase in (ingest, as_of):
        assert phase["loaded"]["p50_ms"] > 0 and phase["p50_ratio"] > 0
    paths = write_results(doc, tmp_path / "fair.json", bench_fair.markdown)
    assert "b's create while a sends a 200-row batch" in paths[1].read_text()


@pytest.mark.slow  # starts the service in a subprocess
@pytest.mark.timeout(300)
def test_bench_keyword_memory_smoke(tmp_path: Path) -> None:
    run = bench_keyword_memory.run(rows=6, kb=4, shape="words", embedder="hash", batch=3,
                                   workdir=tmp_path)
    assert run["text_mb"] > 0 and run["rss_after_mb"] > 0 and run["search_found_warm_row"]
    assert run["growth_mb"] == round(run["rss_after_mb"] - run["rss_before_mb"], 1)
    paths = write_results({"runs": [run]}, tmp_path / "kw.json", bench_keyword_memory.markdown)
    assert "| words | 6 | 4 |" in paths[1].read_text()


def test_bench_bundle_smoke(tmp_path: Path) -> None:
    doc = bench_bundle.run(entities=120, tenants=2, repeat=1, workdir=tmp_path)
    assert doc["events"] > 120 * 2 and doc["sizes"]["bundle_mb"] > 0
    assert all(v > 0 for v in doc["median_s"].values())
    # an import embeds every live entity again; a snapshot carries the cache
    assert doc["texts_embedded"]["import"] > 100 and doc["texts_embedded"]["restore"] == 0
    paths = write_results(doc, tmp_path / "bundle.json", bench_bundle.markdown)
    assert "bundle (export / import, checked)" in paths[1].read_text()


def test_bench_scale_measures_each_arm_in_a_process(tmp_path: Path) -> None:
    from evaluation import bench_scale

    out = tmp_path / "scale.json"
    assert bench_scale.main(["--sizes", "2000", "--queries", "3", "--workdir",
                             str(tmp_path / "work"), "--postgresql-sizes", "2000",
                             "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    arms = doc["sizes"]["2000"]
    assert set(arms) == {"mirrored", "direct", "chroma", "mirrored (postgresql)",
                         "direct (postgresql)"}
    for name, arm in arms.items():
        assert arm["rss_warm_mb"] > 0 and arm["1% vector"]["p50_ms"] > 0
        if name != "chroma":  # exact plans (2,000 rows, under the threshold): recall 1.0
            assert arm["10% vector"]["recall_at_10"] == 1.0
            assert arm["1% vector"]["recall_at_10"] == 1.0
            assert arm["1% new-filter"]["recall_at_10"] == 1.0  # a cache of its own each
    for engine in ("", " (postgresql)"):
        assert arms["direct" + engine]["100% vector"]["plans"] == ["exact/direct"]
        assert arms["mirrored" + engine]["100% vector"]["plans"] == ["exact"]
    for engine in ("", " (postgresql)"):  # the unfiltered search and Chroma's, in turns
        side = arms["mirrored" + engine]
        assert side["100% side-by-side ours"]["recall_at_10"] == 1.0
        assert side["100% side-by-side chroma"]["p50_ms"] > 0
    table = out.with_suffix(".md").read_text()
    assert out.with_suffix(".png").is_file() and "| 2,000 | direct |" in table
    assert "| 2,000 | direct (postgresql) |" in table
    assert "| 2,000 | mirrored (postgresql) |" in table.split("side by side")[1]


def test_bench_engines_measures_both_engines_side_by_side(tmp_path: Path) -> None:
    from evaluation import bench_engines

    out = tmp_path / "engines.json"
    assert bench_engines.main(["--sizes", "1000", "--samples", "5", "--queries", "3",
                               "--asof-queries", "2", "--processes", "2", "--writes", "10",
                               "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    results = document["results"]["1000"]
    assert set(results) == {"duckdb", "postgresql"}
    for engine in ("duckdb", "postgresql"):
        assert results[engine]["create_many"]["n"] == 1000
        assert results[engine]["search"]["calls"] == 3 and results[engine]["events"] > 1000
    table = out.with_suffix(".md").read_text()
    assert "| 1,000 | get |" in table and out.with_suffix(".png").is_file()
    # two processes writing one PostgreSQL store at once, in two tenants and in one
    assert [(r["processes"], r["one_tenant"], r["writes"]) for r in document["processes"]] \
        == [(2, False, 20), (2, True, 20)]
    assert "| 2 | one each | 20 |" in table


def test_bench_workers_smoke(tmp_path: Path) -> None:
    from evaluation import bench_workers

    out = tmp_path / "workers.json"
    assert bench_workers.main(["--workers", "2", "--clients", "2", "--n", "40", "--embedder",
                               "hash", "--seconds", "1", "--lag-samples", "3", "--out",
                               str(out), "--no-png"]) == 0
    doc = json.loads(out.read_text())
    assert [(r["kind"], r["workers"], r["clients"]) for r in doc["results"]] == [
        ("search", 2, 2), ("create", 2, 2)]
    assert all(r["errors"] == 0 and r["rps"] > 0 for r in doc["results"])
    # the workers did the work: their CPU over the cell, a share of the machine's cores
    assert all(0 < r["worker_cores"] <= doc["config"]["cores"] + 0.5 for r in doc["results"])
    assert len(doc["rss_mb"]["2"]) == 2 and all(m > 0 for m in doc["rss_mb"]["2"])
    assert doc["lag"]["samples"] == 3 and doc["lag"]["search"]["p50_ms"] > 0
    assert "| create | 2 | 2 |" in out.with_suffix(".md").read_text()


def test_bench_relay_smoke(tmp_path: Path) -> None:
    from evaluation import bench_relay

    out = tmp_path / "relay.json"
    assert bench_relay.main(["--samples", "3", "--gap", "0.05", "--out", str(out)]) == 0
    arms = json.loads(out.read_text())["arms"]
    assert set(arms) == {"notify", "poll"} and all(a["n"] == 3 for a in arms.values())
    assert "| notify |" in out.with_suffix(".md").read_text()
