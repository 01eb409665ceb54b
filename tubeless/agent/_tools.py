"""Tools: ``define_tool``, ``pipeline_tool``, ``ToolError`` and the context handlers receive."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, final

from tubeless.agent._scope import SCOPE_SLOT
from tubeless.agent._usage import NO_USAGE, Usage
from tubeless.errors import AgentDefinitionError
from tubeless.frozen import FreezeError, FrozenDict, canonical_json, freeze
from tubeless.pipeline import Pipeline
from tubeless.pipeline._spi import is_async_callable
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.agent._turn_types import ApprovalPolicy
    from tubeless.pipeline import CancelToken, StepContext, StepLogger

__all__ = [
    "TOOL_NAME",
    "Replay",
    "Tool",
    "ToolContext",
    "ToolError",
    "define_tool",
    "descriptor",
    "pipeline_tool",
]

#: Registered tool names (use ``fullmatch``): a letter, then letters, digits, ``_`` or ``-``;
#: 128 characters at most.
TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,127}")
#: A tool's replay class: may a call that was running when the run died run again?
Replay = Literal["unsafe", "safe"]
_MAX_DESCRIPTION = 4096


class ToolError(Exception):
    """An expected, recoverable tool failure: the agent sees it as an outcome and goes on.

    Only a ``ToolError`` raised by the tool's own handler is recoverable; any other exception
    (even one with a ``code`` attribute), and a ``ToolError`` raised by a validator, mapper or
    reducer, fails the run.

    Args:
        code: Application code, nonblank, at most 256 characters (e.g. ``NOT_FOUND``).
        message: At most 4096 characters; the model sees it, so keep secrets out.
    """

    def __init__(self, code: str, message: str) -> None:
        if not isinstance(code, str) or not code.strip() or len(code) > 256:
            raise ValueError("ToolError code must be a nonblank string of at most 256 characters.")
        if not isinstance(message, str) or len(message) > _MAX_DESCRIPTION:
            raise ValueError("ToolError message must be a string of at most 4096 characters.")
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ToolError({self.code!r}, {self.message!r})"


class ToolContext:
    """What a tool handler receives besides its validated input.

    Attributes:
        signal: The run's cancellation token.
        log: A logger whose lines are recorded in the trace.
        dry_run: Whether this is a preview run.
        execution: ``{agent_run_id, turn, call_id, tool, idempotency_key}``; the key is the
            same in every resume of a checkpointed run (pass it to the services you call).
        usage: The run's token and cost budgets (``reserve``, ``charge``, ``remaining``).
    """

    __slots__ = ("_step", "execution")

    def __init__(self, step_ctx: StepContext, execution: Mapping[str, Any]) -> None:
        self._step = step_ctx
        self.execution = execution

    @property
    def signal(self) -> CancelToken:
        """The run's cancellation token."""
        return self._step.signal

    @property
    def log(self) -> StepLogger:
        """The tool's logger (``pipeline.log`` records and the ``tubeless.run`` logger)."""
        return self._step.log

    @property
    def dry_run(self) -> bool:
        """Whether this is a preview run."""
        return self._step.dry_run

    @property
    def usage(self) -> Usage:
        """The run's token and cost budgets: a tool that calls a model reserves and charges
        here, so its requests count against them (docs/budgets.md)."""
        scope = self._step.slots.get(SCOPE_SLOT)
        return NO_USAGE if scope is None else scope.usage

    async def sleep(self, seconds: float) -> None:
        """Sleep cooperatively (raises ``RunCancelledError`` once the run is cancelled)."""
        await self._step.sleep(seconds)

    def report_progress(
        self, completed: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Publish progress for this call (thread-safe)."""
        self._step.report_progress(completed, total, message)


@final
class Tool:
    """A registered capability: a handler tool (``define_tool``) or a pipeline tool.

    The handler is kept private: model data can name a tool and supply its input, nothing else.
    """

    __slots__ = (
        "_map_options",
        "_preview",
        "_reconcile",
        "_run",
        "approval",
        "description",
        "input_json_schema",
        "input_schema",
        "kind",
        "output_schema",
        "pipeline",
        "remote",
        "replay",
    )

    kind: Literal["handler", "pipeline"]
    description: str
    input_schema: Schema | None
    output_schema: Schema | None
    input_json_schema: FrozenDict
    """The frozen draft 2020-12 descriptor models see (keys sorted)."""
    pipeline: Pipeline | None
    """For pipeline tools: the child pipeline (or agent) the tool runs."""
    approval: ApprovalPolicy
    """``"never"``, ``"always"`` or a predicate ``(input, ctx) -> bool`` (see ``define_tool``)."""
    remote: Any
    """For tools a server supplies at run time (``tubeless.agent._sources.Remote``), else None."""
    replay: Replay
    """Whether a call cut short by a crash may run again on resume (DESIGN.md §11)."""
    _run: Callable[..., Any] | None
    _preview: Callable[..., Any] | None
    _map_options: Callable[[Any], Any] | None
    _reconcile: Callable[..., Any] | None

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, fields.get(name))
        if self.approval is None:
            object.__setattr__(self, "approval", "never")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Tool is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Tool is immutable")

    def __repr__(self) -> str:
        target = f" pipeline={self.pipeline.id!r}" if self.pipeline is not None else ""
        return f"<Tool {self.kind}{target}: {self.description[:40]!r}>"

    @property
    def run_is_async(self) -> bool:
        """Whether the handler is a coroutine function."""
        return self._run is not None and is_async_callable(self._run)


def _description(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AgentDefinitionError("A tool needs a nonblank description.")
    if len(value) > _MAX_DESCRIPTION:
        raise AgentDefinitionError("A tool description may have at most 4096 characters.")
    return value


def _schema(value: Any, label: str) -> Schema:
    try:
        return Schema.of(value)
    except (TypeError, ValueError) as exc:
        raise AgentDefinitionError(f"{label} is not a schema: {exc}") from exc


def descriptor(value: Any, label: str) -> FrozenDict:
    """A JSON Schema descriptor as frozen JSON with sorted keys."""
    import json

    if not isinstance(value, Mapping):
        raise AgentDefinitionError(f"{label} must be a JSON Schema object.")
    try:
        frozen = freeze(json.loads(canonical_json(freeze(dict(value)))))
    except (FreezeError, ValueError, TypeError) as exc:
        raise AgentDefinitionError(f"{label} must be plain JSON data: {exc}") from exc
    assert isinstance(frozen, FrozenDict)
    return frozen


def _approval(value: Any) -> ApprovalPolicy:
    if value in ("never", "always") or (callable(value) and not isinstance(value, str)):
        policy: ApprovalPolicy = value
        return policy
    raise AgentDefinitionError(
        "A tool's approval must be 'never', 'always' or a callable predicate(input, ctx)."
    )


def _derived_descriptor(schema: Schema, label: str) -> FrozenDict:
    try:
        generated = schema.json_schema()
    except Exception as exc:
        raise AgentDefinitionError(
            f"{label} has no JSON Schema; pass an explicit descriptor: {exc}"
        ) from exc
    return descriptor(generated, label)


def define_tool(
    *,
    description: str,
    input_schema: Any,
    output_schema: Any,
    run: Callable[..., Any],
    preview: Callable[..., Any] | None = None,
    input_json_schema: Mapping[str, Any] | None = None,
    approval: Any = "never",
    replay: Replay = "unsafe",
    reconcile: Callable[..., Any] | None = None,
) -> Tool:
    """Define a handler tool.

    Args:
        description: What the tool does, for the model; nonblank, at most 4096 characters.
        input_schema: Validates (and may transform) the model's argument, once.
        output_schema: Validates the handler's result, once.
        run: ``run(input, ctx)``, sync (worker thread) or async; raise :class:`ToolError` for
            an expected failure the agent can recover from.
        preview: A handler used instead of ``run`` in dry runs; without one the tool is skipped
            in dry runs (and a turn that needs it fails rather than inventing an outcome).
        input_json_schema: An explicit draft 2020-12 descriptor for models; the validator stays
            authoritative.
        approval: ``"never"`` (the default), ``"always"``, or ``predicate(input, ctx)``
            returning whether this call (validated input; ``ctx`` as a handler's) needs the
            run's approver to say yes before it runs. Anything but ``False`` needs approval.
        replay: ``"safe"`` when running a call twice does no harm (a read); ``"unsafe"`` (the
            default) when it might (a payment, an email). On resume a call that was running
            when the run died runs again only when it is safe.
        reconcile: ``reconcile(input, ctx)``, sync or async, asked on resume about an unsafe
            call that was running: return the call's value (it happened), or raise
            :class:`ToolError` (its outcome is that failure). Without it the reducer receives
            ``TUBELESS_AGENT_CALL_INTERRUPTED``. ``ctx.execution["idempotency_key"]`` is the
            key the interrupted call had.

    Raises:
        AgentDefinitionError: For a blank or oversized description, a non-schema, a
            non-callable handler, a descriptor that is not plain JSON or an unknown approval.
    """
    text = _description(description)
    inputs = _schema(input_schema, "input_schema")
    outputs = _schema(output_schema, "output_schema")
    if not callable(run):
        raise AgentDefinitionError("A tool's run must be callable.")
    if preview is not None and not callable(preview):
        raise AgentDefinitionError("A tool's preview must be callable (or None to skip).")
    if reconcile is not None and not callable(reconcile):
        raise AgentDefinitionError("A tool's reconcile must be callable (or None).")
    schema_descriptor = (
        descriptor(input_json_schema, "input_json_schema")
        if input_json_schema is not None
        else _derived_descriptor(inputs, "input_schema")
    )
    return Tool(
        kind="handler",
        description=text,
        input_schema=inputs,
        output_schema=outputs,
        input_json_schema=schema_descriptor,
        _run=run,
        _preview=preview,
        approval=_approval(approval),
        replay=_replay(replay),
        _reconcile=reconcile,
    )


def pipeline_tool(
    child: Pipeline,
    *,
    description: str,
    input_schema: Any = None,
    map_options: Callable[[Any], Any] | None = None,
    input_json_schema: Mapping[str, Any] | None = None,
    approval: Any = "never",
    replay: Replay | None = None,
) -> Tool:
    """Use a pipeline, or another agent, as a tool.

    Without ``input_schema``/``map_options`` the model's argument is the child's raw input
    (validated by the child's own input schema). With them, the argument is validated by
    ``input_schema``, then ``map_options(validated)`` builds the child's raw input. Either way
    everything is validated before any call of the batch starts, and each transform runs once.
    The outcome value is the child's exact final result. Budgets are shared with the child.

    Args:
        child: A pipeline made by ``define_pipeline`` or ``define_agent``.
        description: What the tool does, for the model.
        input_schema: Validates the model's argument (give it together with ``map_options``).
        map_options: Maps the validated argument to the child's raw input (pure).
        input_json_schema: An explicit descriptor for models.
        approval: As for :func:`define_tool`.
        replay: As for :func:`define_tool`; by default ``"safe"`` for an agent (it resumes
            from its own checkpoint) and ``"unsafe"`` for any other pipeline.

    Raises:
        AgentDefinitionError: For a non-pipeline child, only one of ``input_schema`` and
            ``map_options``, or a child without an input schema and no descriptor.
    """
    text = _description(description)
    if not isinstance(child, Pipeline):
        raise AgentDefinitionError(
            "pipeline_tool needs a pipeline made by define_pipeline or define_agent."
        )
    if (input_schema is None) != (map_options is None):
        raise AgentDefinitionError("pipeline_tool needs input_schema and map_options together.")
    if map_options is not None and not callable(map_options):
        raise AgentDefinitionError("pipeline_tool map_options must be callable.")
    inputs = None if input_schema is None else _schema(input_schema, "input_schema")
    if input_json_schema is not None:
        schema_descriptor = descriptor(input_json_schema, "input_json_schema")
    elif inputs is not None:
        schema_descriptor = _derived_descriptor(inputs, "input_schema")
    elif child.options_schema is not None:
        schema_descriptor = _derived_descriptor(child.options_schema, f"{child.id} input schema")
    else:
        raise AgentDefinitionError(
            f"Pipeline {child.id!r} has no input schema: give it one, or pass input_schema "
            "and map_options, or an explicit input_json_schema."
        )
    return Tool(
        kind="pipeline",
        description=text,
        input_schema=inputs,
        output_schema=None,
        input_json_schema=schema_descriptor,
        pipeline=child,
        _map_options=map_options,
        approval=_approval(approval),
        replay=_replay(replay if replay is not None else "safe" if _is_agent(child) else "unsafe"),
    )


def _is_agent(child: Pipeline) -> bool:
    """Whether ``child`` is an agent (``define_agent``'s single agent step)."""
    return len(child.steps) == 1 and child.steps[0].agent is not None


def _replay(value: Any) -> Replay:
    if value not in ("unsafe", "safe"):
        raise AgentDefinitionError(f"A tool's replay must be 'unsafe' or 'safe', not {value!r}.")
    return value  # type: ignore[no-any-return]
