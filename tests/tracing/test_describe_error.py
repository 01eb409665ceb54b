"""``describe_error`` says a recorded error the way the run report and ``trace show`` print it."""

from __future__ import annotations

from typing import Any

import pytest

from tubeless import errors as codes
from tubeless.tracing.projection import describe_error


def link(name: str, message: str, code: str | None = None, cause: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "message": message}
    if code is not None:
        out["sourceCode"] = code
    if cause is not None:
        out["cause"] = cause
    return out


def error(message: str, cause: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": codes.STEP_FAILED,
        "kind": "step",
        "phase": "execution",
        "message": message,
    }
    if cause is not None:
        out["cause"] = cause
    return out


def child(message: str, inner: Any) -> dict[str, Any]:
    """What a failed child run adds: its wrapper and the summary of its first error."""
    summary = link(codes.STEP_FAILED, message, codes.STEP_FAILED, inner)
    return link(
        "ChildRunFailedError", f"Child pipeline c failed: {message}", codes.CHILD_FAILED, summary
    )


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        pytest.param(error("'b'", link("KeyError", "'b'")), "KeyError: 'b'", id="handler"),
        pytest.param(
            error("x", child("'b'", link("KeyError", "'b'"))), "KeyError: 'b'", id="through-child"
        ),
        pytest.param(
            error("Outer.", link("RuntimeError", "Outer.", None, link("ValueError", "inner"))),
            "RuntimeError: Outer; caused by: ValueError: inner",
            id="caused-by",
        ),
        pytest.param(
            error("Word unavailable", link("ToolError", "Word unavailable", "NOT_FOUND")),
            "Word unavailable",
            id="coded-handler-error",
        ),
        pytest.param(
            error(
                "x",
                child(
                    "limit",
                    link(
                        "LimitReachedError", "Agent max_turns=1 exceeded", codes.AGENT_LIMIT_REACHED
                    ),
                ),
            ),
            "Agent max_turns=1 exceeded",
            id="tubeless-own-error",
        ),
        pytest.param(
            error(
                "bad",
                link(
                    "TemplateError",
                    "bad template",
                    codes.TEMPLATE_INVALID,
                    link("ZeroDivisionError", "division by zero"),
                ),
            ),
            "bad template; caused by: ZeroDivisionError: division by zero",
            id="tubeless-error-keeps-its-words",
        ),
        pytest.param(
            error(
                "x",
                link(
                    "OutputInvalidError",
                    "Step s output failed: not an int",
                    codes.STEP_OUTPUT_VALIDATION_FAILED,
                    link("SchemaValidationError", "not an int"),
                ),
            ),
            "Step s output failed: not an int",
            id="cause-already-said",
        ),
        pytest.param(
            error("RuntimeError", link("RuntimeError", "RuntimeError")),
            "RuntimeError",
            id="no-message",
        ),
        pytest.param(error("plain"), "plain", id="no-cause"),
        pytest.param({"message": 3}, "unknown error", id="malformed"),
    ],
)
def test_describe_error(recorded: dict[str, Any], expected: str) -> None:
    assert describe_error(recorded) == expected
