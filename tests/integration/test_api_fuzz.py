"""Schemathesis against the live OpenAPI of ``envfarm serve --no-worker`` (job creation starts
nothing): every route, generated requests with the token never get a 500 or an undocumented
answer, and without the token every route but the documented open paths answers 401.

The example budget is small here (``FUZZ_EXAMPLES``, default 8 per operation);
``bench/fuzz_api.py`` runs the same checks longer."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from envfarm.api.guards import OPEN_PATHS
from tests.integration.serve_process import ServeProcess

REPO = Path(__file__).resolve().parents[2]
TOKEN = "fuzz-token-5f1c"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    workdir = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(REPO / "tasks" / "word-count-cli", workdir / "tasks" / "word-count-cli")
    server = ServeProcess(
        workdir, "--no-worker", "--db", f"sqlite:///{workdir / 'store.db'}", "--tasks", "tasks",
        "--data-dir", "data", token=TOKEN,
    )  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.kill()
        assert "Traceback" not in server.output(), server.output()
        assert TOKEN not in server.output()


@pytest.fixture(scope="module")
def openapi(served: ServeProcess) -> dict[str, Any]:
    answer = requests.get(
        f"{served.url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    answer.raise_for_status()
    document: dict[str, Any] = answer.json()
    return document


def fuzz_operations(
    openapi: dict[str, Any], base_url: str, examples: int, token: str
) -> tuple[int, list[str]]:
    """Every operation with ``examples`` generated cases: (cases run, failures)."""
    ran = 0
    failures: list[str] = []
    for loaded in schemathesis.openapi.from_dict(openapi).get_all_operations():
        operation = loaded.ok()  # type: ignore[union-attr]  # an invalid schema raises here

        @given(operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            nonlocal ran
            ran += 1
            case.call_and_validate(
                base_url=base_url, headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
            )

        try:
            check()
        except Exception as failure:  # a failed check: collected, reported together
            failures.append(f"{operation.label}: {failure}")
    return ran, failures


def test_no_generated_request_gets_a_500_or_an_undocumented_answer(
    served: ServeProcess, openapi: dict[str, Any]
) -> None:
    ran, failures = fuzz_operations(openapi, served.url, EXAMPLES, TOKEN)
    assert not failures, "\n\n".join(failures)
    assert ran >= len(openapi["paths"])


def test_without_the_token_only_the_open_paths_answer(
    served: ServeProcess, openapi: dict[str, Any]
) -> None:
    answered = []
    for path, operations in openapi["paths"].items():
        concrete = path.replace("{", "").replace("}", "")
        for method in operations:
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                got = requests.request(
                    method, f"{served.url}{concrete}", headers=headers, timeout=30,
                    allow_redirects=False,
                )  # fmt: skip
                if got.status_code != 401:
                    answered.append((method, path, headers, got.status_code))
    opened = {path for _, path, _, _ in answered}
    assert opened <= OPEN_PATHS, answered
    assert len(openapi["paths"]) > 5
