"""Property-based fuzzing of a real server with schemathesis, from its own ``/openapi.json``:
no 5xx, every answer's status, content type, headers and body as the document says, and never a
traceback. Examples are bounded per operation so the module stays a few seconds long."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import TOKEN, Served

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 8


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    served = Served(tmp_path_factory.mktemp("fuzzed"))
    try:
        server = served.start()
        with server.client() as client:  # one finished run, so ids that exist are answered too
            client.post("/v1/entries/worker/runs", json={"input": {"text": "z"}, "wait_s": 30})
        yield server.url
    finally:
        for server in served.servers:
            server.kill()


def _no_traceback(ctx: Any, response: Any, case: Any) -> bool | None:
    assert "Traceback" not in response.text, "a traceback in a response"
    return None


@pytest.mark.slow
def test_every_operation_answers_as_its_document_says(server_url: str) -> None:
    from schemathesis.checks import load_all_checks
    from schemathesis.specs.openapi import checks

    load_all_checks()
    schema = schemathesis.openapi.from_url(f"{server_url}/openapi.json")
    document = httpx.get(f"{server_url}/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    chosen = [
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_headers_conformance,
        checks.response_schema_conformance,
    ]
    from schemathesis.checks import not_a_server_error

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 10
    for operation in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(), with_token=st.booleans())
        def fuzz(case: Any, with_token: bool) -> None:
            headers = {"authorization": f"Bearer {TOKEN}"} if with_token else {}
            response = case.call(base_url=server_url, headers=headers, timeout=10)
            assert response.status_code < 500, (case.operation.label, response.text)
            case.validate_response(
                response, checks=[not_a_server_error, *chosen, _no_traceback], headers=headers
            )

        fuzz()
