"""What each run, step record and model request becomes in OpenTelemetry: names and attributes.

Plain functions of the fold's :class:`~tubeless.tracing.runs.Run` and the record at hand (no
``opentelemetry`` import), used by :class:`~tubeless.tracing.otel.OtelSink`. Every value comes
from the trace record stream, which holds no input, output, state, prompt or argument; of a
``step.attempted`` record only ``gen_ai.*`` keys and ``error.type`` are read. docs/observability.md
lists each span and attribute.

Span names (GenAI semantic conventions where they have one):

- an agent run: ``invoke_agent <agent id>`` (OpenInference kind AGENT);
- a tool call run (a child of a turn, named by its call id): ``execute_tool <tool alias>``
  (TOOL); when the tool is an agent, the agent is an ``invoke_agent <agent id>`` child of it;
- an agent turn: ``turn <n>`` (CHAIN; the conventions have no operation for it);
- any other run: ``run_pipeline <pipeline id>`` (CHAIN, operation ``invoke_workflow``);
- a model request the adapters recorded: ``chat <model>`` (LLM).

The root span carries ``session.id``, the run's correlation id, when one was given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tubeless.errors import RUN_CANCELLED, RUN_FAILED
from tubeless.tracing._server_text import recordable_model, recordable_reason
from tubeless.tracing.runs import Run, Step

__all__ = [
    "CHAT",
    "FINISH_REASONS",
    "SPAN_KIND",
    "agent_attributes",
    "agent_name",
    "chat_span",
    "event_of",
    "model_request_attributes",
    "run_attributes",
    "run_error",
    "run_name",
    "start_attributes",
]

#: ``gen_ai.operation.name`` of a model request recorded as ``step.attempted`` attributes.
CHAT: Final = "chat"
#: The one list-valued GenAI attribute; trace attributes are scalars, so it is stored joined by
#: commas and split again here.
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"

#: The attribute OpenInference readers (Arize Phoenix, ...) take a span's kind from.
SPAN_KIND: Final = "openinference.span.kind"

Attributes = dict[str, str | int | float | bool | tuple[str, ...]]

_TERMINAL: Final = frozenset({"step.complete", "step.failed", "step.skipped", "step.cancelled"})
_FINALIZE: Final = frozenset({"pipeline.finalize.completed", "pipeline.finalize.failed"})
_CAMEL: Final = re.compile(r"(?<!^)(?=[A-Z])")


def _tool(run: Run) -> str | None:
    if run.tool:
        return run.tool
    parent, key = run.parent, run.item_key
    call = None if parent is None or key is None else parent.calls.get(key)
    return None if call is None else call.attributed_tool


def run_name(run: Run) -> str:
    """The span name of ``run``, from what the fold knows of it now."""
    kind = run.kind
    if kind == "call":
        return f"execute_tool {_tool(run) or run.pipeline_id or ''}".rstrip()
    if kind == "turn":
        return "turn" if run.index is None else f"turn {run.index}"
    prefix = "invoke_agent" if kind == "agent" else "run_pipeline"
    return f"{prefix} {run.pipeline_id or ''}".rstrip()


def agent_name(run: Run) -> str:
    """The name of the ``invoke_agent`` span below an agent's ``execute_tool`` span."""
    return f"invoke_agent {run.pipeline_id or ''}".rstrip()


def start_attributes(run: Run, record: Mapping[str, Any]) -> Attributes:
    """What a run's ``pipeline.started`` record says about it (its ids and relations)."""
    out: Attributes = {"tubeless.run_id": run.run_id}
    for key, value in (
        ("tubeless.pipeline_id", run.pipeline_id),
        ("tubeless.parent_run_id", run.parent_run_id),
        ("tubeless.item_key", run.item_key),
        ("tubeless.correlation_id", record.get("correlationId")),
    ):
        if isinstance(value, str):
            out[key] = value
    correlation = record.get("correlationId")
    if run.parent_run_id is None and isinstance(correlation, str):
        out["session.id"] = correlation  # OpenInference and Phoenix group runs by session
    payload = record.get("payload")
    identity = payload.get("definitionIdentity") if isinstance(payload, Mapping) else None
    definition_id = identity.get("definitionId") if isinstance(identity, Mapping) else None
    if isinstance(definition_id, str):
        out["tubeless.definition_id"] = definition_id
    return out


def _limits(run: Run) -> Attributes:
    """``tubeless.limits.<name>`` of the run's first agent step (from the definition snapshot)."""
    out: Attributes = {}
    for meta in (run.agents or {}).values():
        limits = meta.get("limits") if isinstance(meta, Mapping) else None
        if isinstance(limits, Mapping):
            for key, value in limits.items():
                if isinstance(key, str) and isinstance(value, str | int) and value is not True:
                    out[f"tubeless.limits.{_CAMEL.sub('_', key).lower()}"] = value
            break
    return out


def add_turn_usage(usage: list[Any] | None, turn: Run) -> list[Any] | None:
    """``usage`` with a finished turn's ``agent.usage.*`` (its decide summary) added."""
    spent_in = turn.attribute("decide", "agent.usage.inputTokens")
    spent_out = turn.attribute("decide", "agent.usage.outputTokens")
    if not isinstance(spent_in, int) and not isinstance(spent_out, int):
        return usage
    total: list[Any] = usage if usage is not None else [0, 0, None]
    total[0] += spent_in if isinstance(spent_in, int) else 0
    total[1] += spent_out if isinstance(spent_out, int) else 0
    cost = turn.attribute("decide", "agent.usage.costUsd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        total[2] = (total[2] or 0.0) + float(cost)
    return total


_BUDGET_KEYS = {
    "maxInputTokens": "max_input_tokens",
    "maxOutputTokens": "max_output_tokens",
    "maxTotalTokens": "max_total_tokens",
    "maxCostUsd": "max_cost_usd",
}


def budget_attributes(run: Run, usage: list[Any] | None) -> Attributes:
    """``tubeless.budget.<budget>.bound`` and ``.consumed`` of an agent run's token and cost
    budgets (consumed: the agent's own model requests, from its turns' summaries)."""
    limits: Mapping[str, Any] = {}
    for meta in (run.agents or {}).values():
        found = meta.get("limits") if isinstance(meta, Mapping) else None
        if isinstance(found, Mapping):
            limits = found
            break
    spent = usage or [0, 0, None]
    consumed = {
        "max_input_tokens": spent[0],
        "max_output_tokens": spent[1],
        "max_total_tokens": spent[0] + spent[1],
        "max_cost_usd": spent[2] or 0.0,
    }
    out: Attributes = {}
    for key, name in _BUDGET_KEYS.items():
        bound = limits.get(key)
        if bound is None or isinstance(bound, bool):
            continue
        try:
            out[f"tubeless.budget.{name}.bound"] = (
                float(bound) if name == "max_cost_usd" else int(bound)
            )
        except (TypeError, ValueError):
            continue
        out[f"tubeless.budget.{name}.consumed"] = consumed[name]
    return out


def _agent(run: Run, turns: int, calls_admitted: int | None) -> Attributes:
    out: Attributes = {"gen_ai.operation.name": "invoke_agent", SPAN_KIND: "AGENT"}
    if run.pipeline_id is not None:
        # The trace records agent ids, not display names: the id is the name too.
        out["gen_ai.agent.id"] = out["gen_ai.agent.name"] = run.pipeline_id
    out.update(_limits(run))
    out["tubeless.turns"] = turns
    if calls_admitted is not None:
        out["tubeless.calls_admitted"] = calls_admitted
    return out


def _common(run: Run, kind: str) -> Attributes:
    out: Attributes = {"tubeless.kind": kind, "tubeless.status": run.status}
    if run.dry_run:
        out["tubeless.dry_run"] = True
    if run.step_count is not None:
        out["tubeless.step_count"] = run.step_count
    return out


def run_attributes(run: Run, turns: int, calls_admitted: int | None) -> Attributes:
    """The attributes a run's span ends with; ``turns`` and ``calls_admitted`` of an agent run
    are counted from its turns as they ended."""
    kind = run.kind
    out = _common(run, kind)
    if kind == "call":
        parent = run.parent
        out["gen_ai.operation.name"] = "execute_tool"
        out[SPAN_KIND] = "TOOL"
        tool = _tool(run)
        if tool is not None:
            out["gen_ai.tool.name"] = tool
        if run.item_key is not None:
            out["gen_ai.tool.call.id"] = run.item_key
        if parent is not None and parent.index is not None:
            out["tubeless.turn"] = parent.index
    elif kind == "turn":
        out[SPAN_KIND] = "CHAIN"
        parent = run.parent
        if parent is not None and parent.pipeline_id is not None:
            out["gen_ai.agent.id"] = parent.pipeline_id
        for key, value in (
            ("tubeless.turn", run.index),
            ("tubeless.decision", run.decision),
            ("tubeless.call_count", run.call_count),
            ("tubeless.calls_admitted", run.calls_admitted),
            ("tubeless.state_version", run.state_version),
        ):
            if value is not None:
                out[key] = value
    elif kind == "agent":
        out.update(_agent(run, turns, calls_admitted))
    else:
        out["gen_ai.operation.name"] = "invoke_workflow"
        out[SPAN_KIND] = "CHAIN"
        if run.pipeline_id is not None:
            out["gen_ai.workflow.name"] = run.pipeline_id
    source = _error_field(_first_error(run), "sourceCode")
    if source is not None:
        out["tubeless.error.source_code"] = source
    return out


def agent_attributes(run: Run, turns: int, calls_admitted: int | None) -> Attributes:
    """The attributes of the ``invoke_agent`` span of an agent used as a tool (the call run)."""
    out = _common(run, "agent")
    out.update(_agent(run, turns, calls_admitted))
    source = _error_field(_first_error(run), "sourceCode")
    if source is not None:
        out["tubeless.error.source_code"] = source
    return out


def _first_error(run: Run) -> Mapping[str, Any] | None:
    if run.status not in ("failed", "cancelled"):
        return None
    return run.error or (run.errors[0] if run.errors else None)


def _error_field(error: Mapping[str, Any] | None, key: str) -> str | None:
    value = None if error is None else error.get(key)
    return value if isinstance(value, str) else None


def run_error(run: Run) -> tuple[str, str] | None:
    """``(error.type, status description)`` of a failed or cancelled run, else ``None``."""
    if run.status not in ("failed", "cancelled"):
        return None
    error = _first_error(run)
    code = _error_field(error, "code") or (
        RUN_CANCELLED if run.status == "cancelled" else RUN_FAILED
    )
    return code, _error_field(error, "message") or run.status


def _step_attributes(step: Step, error: Mapping[str, Any] | None) -> Attributes:
    out: Attributes = {"tubeless.step_id": step.id}
    if step.attempt_id is not None:
        out["tubeless.attempt_id"] = step.attempt_id
    if step.duration_ms is not None:
        out["tubeless.duration_ms"] = step.duration_ms
    for key, field in (("error.type", "code"), ("tubeless.error.source_code", "sourceCode")):
        value = _error_field(error, field)
        if value is not None:
            out[key] = value
    return out


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def event_of(run: Run, record: Mapping[str, Any]) -> tuple[str, Attributes] | None:
    """The span event of a step lifecycle, progress or finalization record (else ``None``).

    Events are named after their record (``step.running``, ``step.complete``, ...), except a
    progress report, which is ``step.progress``.
    """
    name = record.get("name")
    if name == "pipeline.finalize.started":
        return "pipeline.finalize.started", {}
    if name in _FINALIZE:
        step = run.finalize
        if step is None:
            return None
        attributes = _step_attributes(step, step.error)
        del attributes["tubeless.step_id"]
        return str(name), attributes
    step_id = record.get("stepId")
    step = run.steps.get(step_id) if isinstance(step_id, str) else None
    if step is None:
        return None
    if name in _TERMINAL:
        attributes = _step_attributes(step, step.error if name != "step.complete" else None)
        if name == "step.skipped" and step.reason is not None:
            attributes["tubeless.reason"] = step.reason
        return str(name), attributes
    if name != "step.running":
        return None
    payload = record.get("payload")
    progress = payload.get("progress") if isinstance(payload, Mapping) else None
    attributes = {"tubeless.step_id": step.id}
    attempt = record.get("attemptId")
    if isinstance(attempt, str):
        attributes["tubeless.attempt_id"] = attempt
    if not isinstance(progress, Mapping):
        return "step.running", attributes
    for key in ("completed", "total"):
        number = _number(progress.get(key))
        if number is not None:
            attributes[f"tubeless.progress.{key}"] = number
    message = progress.get("message")
    if isinstance(message, str):
        attributes["tubeless.progress.message"] = message
    return "step.progress", attributes


def chat_span(
    run: Run, record: Mapping[str, Any]
) -> tuple[str, Attributes, float, str | None] | None:
    """``(name, attributes, duration_ms, error)`` of a model request a ``step.attempted``
    record describes (``gen_ai.operation.name: chat``), else ``None``."""
    payload = record.get("payload")
    recorded = payload.get("attributes") if isinstance(payload, Mapping) else None
    if not isinstance(recorded, Mapping) or recorded.get("gen_ai.operation.name") != CHAT:
        return None
    attributes: Attributes = {}
    for key, value in recorded.items():
        if not isinstance(key, str) or not (key.startswith("gen_ai.") or key == "error.type"):
            continue
        if key == FINISH_REASONS and isinstance(value, str):
            # A stored trace may predate the closed set: it is applied again here.
            attributes[key] = tuple(recordable_reason(part) for part in value.split(",") if part)
        elif key == "gen_ai.response.model":
            if recordable_model(value) is not None:
                attributes[key] = value
        elif isinstance(value, str | int | float | bool):
            attributes[key] = value
    if run.index is not None:
        attributes["tubeless.turn"] = run.index
    attributes[SPAN_KIND] = "LLM"
    model = recorded.get("gen_ai.request.model")
    name = f"chat {model}" if isinstance(model, str) else "chat"
    duration = _number(record.get("durationMs"))
    error = recorded.get("error.type")
    return name, attributes, float(duration or 0), error if isinstance(error, str) else None


def model_request_attributes(
    *,
    provider: str,
    model: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reasons: Sequence[str] = (),
    response_model: str | None = None,
    error_type: str | None = None,
) -> dict[str, str | int]:
    """The ``step.attempted`` attributes of one model request (what :func:`chat_span` reads).

    GenAI semantic-convention names, scalars only (trace attributes are): the finish reasons are
    joined by commas. Counts that are not non-negative integers are left out. What the server
    chose is bounded here for every caller (:mod:`tubeless.tracing._server_text`): a finish
    reason outside the known set is ``other``, and a response model that does not look like a
    model name is left out.
    """
    out: dict[str, str | int] = {
        "gen_ai.operation.name": CHAT,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    response_model = recordable_model(response_model)
    if response_model:
        out["gen_ai.response.model"] = response_model
    for key, count in (
        ("gen_ai.usage.input_tokens", input_tokens),
        ("gen_ai.usage.output_tokens", output_tokens),
    ):
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            out[key] = count
    reasons = [recordable_reason(r) for r in finish_reasons if isinstance(r, str) and r]
    if reasons:
        out[FINISH_REASONS] = ",".join(reasons)
    if error_type:
        out["error.type"] = error_type
    return out
