"""Fuzzing: schemathesis requests generated from the service's own OpenAPI document.

Every operation gets positive and negative cases; each case is sent with a valid key and
without one. Any 5xx and any response that violates the document (its schema, status codes,
content types) is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evaluation.reliability_service import seed_travel, service


@dataclass
class FuzzFigures:
    """What the fuzz run measured."""

    cases: int = 0
    server_errors: int = 0
    violations: int = 0
    operations: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def run_fuzz(workdir: Path, examples: int = 3, seed: int = 0) -> FuzzFigures:
    """Schemathesis over every operation, positive and negative, with and without a key."""
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    key = "fuzz-admin-key"
    checks = [not_a_server_error, response_schema_conformance, status_code_conformance,
              content_type_conformance]
    figures = FuzzFigures()
    with service(workdir, f"{key}:default:admin", seed=seed_travel) as (base, _mem):
        document = httpx.get(f"{base}/openapi.json", timeout=30).json()
        schema = schemathesis.openapi.from_dict(document)
        operations = [r.ok() for r in schema.get_all_operations()]  # type: ignore[union-attr]
        figures.operations = len(operations)
        session = requests.Session()

        def send(case: Any, headers: dict[str, str] | None, label: str) -> None:
            try:
                response = case.call(base_url=base, session=session, headers=headers,
                                     timeout=60)
            except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL,
                    ValueError, UnicodeError):
                return  # the client refused to send it: nothing reached the server
            figures.cases += 1
            if response.status_code >= 500:
                figures.server_errors += 1
            try:
                case.validate_response(response, checks=checks)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - counted
                figures.violations += 1
                where = f"{label} -> {response.status_code}"
                figures.failures.setdefault(where, str(exc)[:1500])

        def fuzz(operation: Any, mode: Any) -> None:
            label = f"{operation.label} [{mode.value}]"

            @hypothesis_seed(seed)
            @settings(max_examples=examples, deadline=None, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                send(case, {"Authorization": f"Bearer {key}"}, label)
                send(case, None, label + " [no key]")

            try:
                run()
            except Unsatisfiable:
                pass  # e.g. a route without parameters has a single possible case

        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzz(operation, mode)
        session.close()
    return figures

