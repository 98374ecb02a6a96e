"""Closed-loop HTTP load from wrk, a client that costs the machine almost nothing.

``bench_http``'s own clients are Python threads sharing one ``httpx.Client``: on 2 cores they
spend 1.5-2.5 ms of CPU per request, about as much as the server, so their figures are those
of "client and server on one small machine". wrk (Debian's ``wrk`` package: C, one event loop
over keep-alive connections) spends a few microseconds per request, so with it the figures
are the server's own: how its throughput grows with concurrent clients on the cores it has.

:func:`run_wrk` sends ``bodies`` in turn as ``POST`` requests over ``connections``
connections for a number of seconds, each connection sending its next request when the
previous answer arrives (wrk runs for its whole duration: a script cannot end it early). After
the last body it starts again from the first; give more bodies than the run can send (or more
than the service's query cache holds) and no query is answered from that cache. wrk measures
each request's latency itself; a Lua ``done`` hook prints its summary as JSON.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The Lua script: bodies from a file (one JSON document per line), sent in turn.
SCRIPT = r"""
local bodies = {}
for line in io.lines(os.getenv("DMF_WRK_BODIES")) do bodies[#bodies + 1] = line end
local sent = 0
local headers = {["Content-Type"] = "application/json"}

request = function()
  sent = sent + 1
  return wrk.format("POST", wrk.path, headers, bodies[(sent - 1) % #bodies + 1])
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "status_errors": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p95_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.mean,
    latency.max))
end
"""


@dataclass
class WrkResult:
    """What one wrk run measured: answers, wall time, failures, latency and its own CPU."""

    requests: int
    seconds: float
    status_errors: int
    socket_errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    client_cpu_s: float

    @property
    def ok(self) -> int:
        """Requests answered with a 2xx or 3xx status."""
        return max(0, self.requests - self.status_errors)


def require_wrk() -> str:
    """The ``wrk`` executable on PATH; RuntimeError saying how to install it when missing."""
    path = shutil.which("wrk")
    if path is None:
        raise RuntimeError("the wrk driver needs wrk: install it with `apt-get install wrk` "
                           "(run `make browser` as root, which installs it with Chromium)")
    return path


def run_wrk(url: str, bodies: Sequence[Mapping[str, Any]], connections: int, seconds: int,
            *, timeout_s: float = 30.0) -> WrkResult:
    """Send ``bodies`` in turn to ``url`` from ``connections`` closed-loop connections for
    ``seconds`` (whole seconds, wrk's ``-d``); ``timeout_s`` bounds one request."""
    if connections < 1 or seconds < 1 or not bodies:
        raise ValueError("need connections >= 1, seconds >= 1 and some bodies")
    wrk = require_wrk()
    with tempfile.TemporaryDirectory(prefix="dmf-wrk-") as tmp:
        body_file = Path(tmp) / "bodies.jsonl"
        body_file.write_text("\n".join(json.dumps(b, ensure_ascii=False) for b in bodies) + "\n",
                             encoding="utf-8")
        script = Path(tmp) / "search.lua"
        script.write_text(SCRIPT, encoding="utf-8")
        before = _children_cpu()
        done = subprocess.run(
            [wrk, "-t", "1", "-c", str(connections), "-d", f"{seconds}s",
             "--timeout", f"{max(1, int(timeout_s))}s", "-s", str(script), url],
            capture_output=True, text=True, timeout=seconds + timeout_s + 30, check=False,
            env={"DMF_WRK_BODIES": str(body_file), "PATH": "/usr/bin:/bin"})
        client_cpu = _children_cpu() - before
    summary = _summary(done.stdout)
    if done.returncode != 0 or summary is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-500:]}")
    return WrkResult(
        requests=int(summary["requests"]), seconds=summary["duration_us"] / 1e6,
        status_errors=int(summary["status_errors"]),
        socket_errors=int(summary["socket_errors"]),
        p50_ms=summary["p50_us"] / 1000, p95_ms=summary["p95_us"] / 1000,
        p99_ms=summary["p99_us"] / 1000, mean_ms=summary["mean_us"] / 1000,
        max_ms=summary["max_us"] / 1000, client_cpu_s=client_cpu)


def wait_until_idle(cpu: Callable[[], float | None], *, interval: float = 0.05,
                    quiet_samples: int = 2, bound_s: float = 10.0) -> None:
    """Return once ``cpu()`` (a process's CPU seconds) stopped growing for ``quiet_samples``
    samples in a row, so requests still in flight when a run stopped are done before the
    next run is measured; at most ``bound_s``."""
    deadline = time.perf_counter() + bound_s
    last, quiet = cpu(), 0
    while quiet < quiet_samples and time.perf_counter() < deadline:
        time.sleep(interval)
        now = cpu()
        quiet = quiet + 1 if now is not None and now == last else 0
        last = now


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _summary(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                found: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                return None
            return found
    return None
