"""``run_sync`` reports a callback's failure as it happened, with no event-loop noise chained on."""

from __future__ import annotations

from typing import Any

import pytest

from tubeless import PipelineExecutionError, define_agent, define_pipeline, step
from tubeless.errors import ErrorCause


def chain(cause: ErrorCause | None) -> list[str]:
    found = []
    while cause is not None:
        found.append(f"{cause.name}: {cause.message}")
        cause = cause.cause
    return found


def finalize_fails(outputs: Any, ctx: Any) -> Any:
    raise ValueError("Cannot finalize.")


def decide_fails(state: Any, ctx: Any) -> Any:
    return {}["decision"]


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        pytest.param(
            define_pipeline(
                id="p", steps=[step("s", lambda inputs, ctx: 1)], finalize=finalize_fails
            ),
            ["ValueError: Cannot finalize."],
            id="sync-finalizer",
        ),
        pytest.param(
            define_pipeline(
                id="p",
                steps=[step("s", lambda inputs, ctx: 1, skip=lambda inputs, ctx: {}["skip"])],
            ),
            ["KeyError: 'skip'"],
            id="sync-skip-predicate",
        ),
    ],
)
def test_a_sync_callback_failure_carries_no_false_event_loop_cause(
    pipeline: Any, expected: list[str]
) -> None:
    with pytest.raises(PipelineExecutionError) as caught:
        pipeline.run_sync()

    error = caught.value
    assert chain(error.run.errors[0].cause) == expected
    assert "no running event loop" not in str(error)
    original = error.__cause__
    assert original is not None and original.__context__ is None


def test_a_sync_decide_failure_of_an_agent_carries_no_false_event_loop_cause() -> None:
    agent = define_agent(
        id="a",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide_fails,
    )

    with pytest.raises(PipelineExecutionError) as caught:
        agent.run_sync({})

    error = caught.value
    assert "no running event loop" not in str(error)
    assert not any("no running event loop" in link for link in chain(error.run.errors[0].cause))
    assert isinstance(error.__cause__, KeyError)
    assert error.__cause__.__context__ is None


def chained_failure(inputs: Any, ctx: Any) -> None:
    try:
        {}["key"]
    except KeyError as exc:
        raise ValueError("Lookup failed.") from exc


def test_the_error_message_joins_its_cause_without_a_stray_period() -> None:
    """``...failed.; caused by`` was a typo: the full stop gives way to the clause."""
    pipeline = define_pipeline(id="p", steps=[step("s", chained_failure)])

    with pytest.raises(PipelineExecutionError) as caught:
        pipeline.run_sync()

    assert str(caught.value) == (
        "Pipeline p failed: execution at step s [TUBELESS_STEP_FAILED]: Lookup failed; "
        "caused by: 'key'"
    )
