"""The tubeless error tree and every error code.

Everything tubeless raises on purpose is a :class:`TubelessError` with a stable ``code``. A class
raised with one code declares it as a class attribute (``DocumentError.code``); a class whose code
varies shows its family. Grouped by the layer that raises them::

    TubelessError(code, message)        TUBELESS_*; raised as itself for the codes without a class
    │                                   of their own (RUN_CONCURRENCY_INVALID, ITERATION_*,
    │                                   FOR_EACH_DUPLICATE_KEY, SKIP_DECISION_INVALID, ...)
    │
    │   pipelines: tubeless.errors, tubeless.pipeline
    ├── PipelineDefinitionError         TUBELESS_DEFINITION_* (.errors: every problem at once)
    ├── PlanningError                   TUBELESS_PLANNING_* (.errors)
    ├── PipelineExecutionError          TUBELESS_*, the run's first error (.run, .source_code)
    ├── RunCancelledError               TUBELESS_RUN_CANCELLED (.reason)
    ├── OutputInvalidError              TUBELESS_STEP_OUTPUT_VALIDATION_FAILED (.issues)
    ├── RequiredOutputsMissingError     TUBELESS_REQUIRED_OUTPUTS_MISSING (.missing)
    ├── ChildRunFailedError             TUBELESS_CHILD_FAILED (.run, .alias, .cancelled)
    ├── FanOutFailedError               TUBELESS_CHILD_FAILED (.runs, .fan_out, .cancelled)
    │
    │   agents: tubeless.errors, tubeless.agent
    ├── AgentDefinitionError            TUBELESS_AGENT_INVALID_DEFINITION
    ├── DecisionError                   TUBELESS_AGENT_INVALID_DECISION (.issues)
    ├── StateError                      TUBELESS_AGENT_INVALID_STATE (.path)
    ├── LimitReachedError               TUBELESS_AGENT_LIMIT_REACHED (.limit, .bound, .scope, ...)
    │   └── BudgetWaiting               TUBELESS_AGENT_LIMIT_REACHED (.key): a checkpointed run
    │                                   waits for a raised token or cost budget (on_limit: wait)
    ├── PriceUnknownError               TUBELESS_BUDGET_PRICE_UNKNOWN (.provider, .model)
    ├── ApprovalError                   TUBELESS_APPROVAL_* (.pending: the requests not decided)
    │   └── ApprovalWaiting             TUBELESS_APPROVAL_REQUIRED (.key): a checkpointed run
    │                                   stopped with status waiting; approve, deny, run again
    │
    │   traces and durable runs: tubeless.tracing, tubeless.errors
    ├── TraceReadError                  TUBELESS_TRACE_INVALID (.path, .line, .problem, .bound)
    ├── CheckpointError                 TUBELESS_CHECKPOINT_*: LOCKED, INVALID, CORRUPT (a file
    │                                   that lost commits: copied without its -wal, ...),
    │                                   LEASE_LOST (a stale fence: another owner took over),
    │                                   TUBELESS_AGENT_INVALID_CHECKPOINT_KEY,
    │                                   TUBELESS_AGENT_CHECKPOINT_MISMATCH (naming what changed)
    │
    │   record and replay: tubeless.errors
    ├── CassetteError                   TUBELESS_CASSETTE_* (.path, .line): INVALID, MISMATCH
    ├── ReplayDivergedError             TUBELESS_REPLAY_DIVERGED (.route, .turn, .call_id, ...)
    │   batch runs: tubeless.batch
    ├── BatchError                      TUBELESS_BATCH_* (an unreadable inputs file, an engine
    │                                   that cannot start); a row's own failure is a row, not this
    │
    │   projects: tubeless.errors
    ├── ProjectError                    TUBELESS_*_INVALID (.issues: every problem, in file order)
    │   ├── DocumentError               TUBELESS_DOCUMENT_INVALID
    │   ├── ReferenceResolutionError    TUBELESS_REFERENCE_INVALID
    │   └── TemplateError               TUBELESS_TEMPLATE_INVALID (at load, or at render in a run)
    │
    │   model providers: tubeless.providers
    ├── ProviderError                   TUBELESS_PROVIDER_* (.status)
    │
    │   MCP servers: tubeless.mcp (their tool outcomes are MCP_TOOL_ERROR, MCP_PROTOCOL_ERROR)
    ├── McpError                        TUBELESS_MCP_* (.server): no SDK, transport, timeout,
    │                                   an included tool the server lacks or that cannot be
    │                                   called (TOOL_UNUSABLE); fatal to a run
    │
    │   protocols on serve: tubeless.serve.protocols
    └── RunnerError                     TUBELESS_SERVE_* (NOT_FOUND, CONFLICT), and
                                        TUBELESS_OPTIONS_VALIDATION_FAILED (.issues): a request
                                        the run interface refuses before anything runs

Other exceptions tubeless raises subclass the built-in their callers already catch::

    ToolError(code, message)            Exception (tubeless.agent): an application's code; from
                                        a tool's own handler it is an outcome, not a failure
    FreezeError(path, reason)           ValueError (tubeless.frozen): a value that is not plain
                                        data; agents raise StateError for it
    SchemaValidationError(issues)       ValueError (tubeless.schema): runs record it as a
                                        TUBELESS_*_VALIDATION_FAILED error with its .issues
    SchemaDefinitionError               TypeError (tubeless.schema): a schema cannot be built
    OtelConfigError                     ValueError (tubeless.tracing): an OTEL_* setting tubeless
                                        cannot honour (the CLI's --otel says it in one line)

Internal ones never reach a caller::

    ReferenceProblem                    tubeless.project: an issue of ReferenceResolutionError
    Rejected                            tubeless.agent: a workspace tool's refusal, a ToolError
    CliLoadError                        tubeless._cli: exit 2 (1 under ``trace``)
    CliInputError                       tubeless._cli: exit 4
    InputRejected                       tubeless._cli: a flag's value, reported as CliInputError
    _OutputClosed                       tubeless._cli: the reader of stdout went away, exit 141
    Ambiguous                           tubeless.project: a plain YAML scalar that YAML 1.1 and 1.2
                                        read differently, reported as a DocumentError issue
    TemplateLimit                       tubeless.project: a render past its work or size budget,
                                        becomes TemplateError (a BaseException, so the template's
                                        own code cannot catch it)
    _Stopped                            tubeless.project: carries what a render's ``check`` raised
                                        out of jinja untouched
    PatternRefused                      tubeless (schema patterns): a ``pattern`` that could not
                                        be matched within its budget, becomes a validation issue
    _KeyRefused                         tubeless (schema patterns): the same for a property name
    _Refused                            tubeless.agent: a part of a checkpoint document no run
                                        writes (its JSON path), becomes CheckpointError
    _Interrupted                        tubeless.pipeline: a signal stopping a render, becomes
                                        RunCancelledError (a KeyboardInterrupt, so no ``except
                                        Exception`` in the interrupted code catches it)
    RequestError                        tubeless.serve: a refused HTTP request; answered as
                                        {"error": {code, message}} with its status (400-429)
    BodyTooLarge                        tubeless.serve: a streamed body past 1 MiB, answered 413

Plain data (never raised; recorded on runs and in traces)::

    PipelineError(code, kind, phase, message, step_id, source_code, cause, issues, fan_out)
    ErrorCause(message, name, source_code, cause)      JSON-safe, bounded cause chain
    ValidationIssue(message, path)                     never quotes the rejected value

Errors raised inside a run (by handlers, validators, the agent harness) are never lost: the run
records them as :class:`PipelineError` with the deepest ``code`` found on the exception chain as
``source_code`` (:func:`deepest_source_code`) and the original exception reachable as
``exception``. A child run's error reaches its parent's chain through
:attr:`TubelessError.recorded_cause`.

Causes and ``from None``: every error keeps its cause (``raise ... from err``), with two
exceptions, both raised ``from None``. A validation or parse failure of untrusted data (pydantic,
jsonschema, json, an HTTP response) drops the library's exception, so that values never leak: its
message may quote the value it rejected or the body it received, and :func:`cause_chain` copies
every cause's message into ``PipelineError.cause``, onto stderr and into trace records; the
tubeless error says instead what is wrong by path, type and bound. And an error whose message
already restates its cause (the type and text of a template failure, the issues of a
``SchemaValidationError``) drops it because the chain would only repeat it. A failed import is
kept: the ``ReferenceResolutionError`` of ``load_project`` has what the first failing import
raised as its ``__cause__``, so that ``--debug`` shows where in the module it failed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:
    from tubeless.pipeline import PipelineRun

__all__ = [
    "AgentDefinitionError",
    "BatchError",
    "CassetteError",
    "CheckpointError",
    "DocumentError",
    "ErrorCause",
    "ErrorKind",
    "ErrorPhase",
    "PipelineDefinitionError",
    "PipelineError",
    "PipelineExecutionError",
    "PlanningError",
    "ProjectError",
    "ReferenceResolutionError",
    "ReplayDivergedError",
    "TemplateError",
    "TubelessError",
    "ValidationIssue",
]

# -- definition (raised by define_pipeline / step, before any side effect) -----------------------
DEFINITION_PIPELINE_ID_BLANK = "TUBELESS_DEFINITION_PIPELINE_ID_BLANK"
DEFINITION_PIPELINE_NAME_BLANK = "TUBELESS_DEFINITION_PIPELINE_NAME_BLANK"
DEFINITION_PIPELINE_DESCRIPTION_BLANK = "TUBELESS_DEFINITION_PIPELINE_DESCRIPTION_BLANK"
DEFINITION_IMPLEMENTATION_VERSION_INVALID = "TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID"
DEFINITION_STEP_IDS_DUPLICATE = "TUBELESS_DEFINITION_STEP_IDS_DUPLICATE"
DEFINITION_STEP_ID_BLANK = "TUBELESS_DEFINITION_STEP_ID_BLANK"
DEFINITION_STEP_ID_RESERVED = "TUBELESS_DEFINITION_STEP_ID_RESERVED"
DEFINITION_STEP_NAME_BLANK = "TUBELESS_DEFINITION_STEP_NAME_BLANK"
DEFINITION_STEP_INVALID = "TUBELESS_DEFINITION_STEP_INVALID"
DEFINITION_STEPS_EMPTY = "TUBELESS_DEFINITION_STEPS_EMPTY"
DEFINITION_SCHEMA_INVALID = "TUBELESS_DEFINITION_SCHEMA_INVALID"
DEFINITION_DEPENDENCY_DUPLICATE = "TUBELESS_DEFINITION_DEPENDENCY_DUPLICATE"
DEFINITION_DEPENDENCY_SELF_REFERENCE = "TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE"
DEFINITION_DEPENDENCY_CONTRADICTORY = "TUBELESS_DEFINITION_DEPENDENCY_CONTRADICTORY"
DEFINITION_DEPENDENCY_NOT_IN_STEPS = "TUBELESS_DEFINITION_DEPENDENCY_NOT_IN_STEPS"
DEFINITION_DEPENDENCY_CYCLE = "TUBELESS_DEFINITION_DEPENDENCY_CYCLE"
DEFINITION_TARGETS_DUPLICATE = "TUBELESS_DEFINITION_TARGETS_DUPLICATE"
DEFINITION_TARGET_NOT_IN_STEPS = "TUBELESS_DEFINITION_TARGET_NOT_IN_STEPS"
DEFINITION_FINALIZER_STEP_NOT_IN_STEPS = "TUBELESS_DEFINITION_FINALIZER_STEP_NOT_IN_STEPS"
DEFINITION_TARGET_FINALIZER_MISMATCH = "TUBELESS_DEFINITION_TARGET_FINALIZER_MISMATCH"
RUN_CONCURRENCY_INVALID = "TUBELESS_RUN_CONCURRENCY_INVALID"
AGENT_INVALID_DEFINITION = "TUBELESS_AGENT_INVALID_DEFINITION"

# -- planning (returned inside a plan with ok=False) --------------------------------------------
PLANNING_SELECTION_CONFLICT = "TUBELESS_PLANNING_SELECTION_CONFLICT"
PLANNING_STEP_SELECTION_EMPTY = "TUBELESS_PLANNING_STEP_SELECTION_EMPTY"
PLANNING_TARGET_SELECTION_EMPTY = "TUBELESS_PLANNING_TARGET_SELECTION_EMPTY"
PLANNING_STEP_SELECTION_DUPLICATE = "TUBELESS_PLANNING_STEP_SELECTION_DUPLICATE"
PLANNING_TARGET_SELECTION_DUPLICATE = "TUBELESS_PLANNING_TARGET_SELECTION_DUPLICATE"
PLANNING_STEP_UNKNOWN = "TUBELESS_PLANNING_STEP_UNKNOWN"
PLANNING_TARGET_UNKNOWN = "TUBELESS_PLANNING_TARGET_UNKNOWN"
PLANNING_TARGET_UNDECLARED = "TUBELESS_PLANNING_TARGET_UNDECLARED"

# -- run (recorded on PipelineRun.errors) -------------------------------------------------------
OPTIONS_VALIDATION_FAILED = "TUBELESS_OPTIONS_VALIDATION_FAILED"
STEP_FAILED = "TUBELESS_STEP_FAILED"
STEP_OUTPUT_VALIDATION_FAILED = "TUBELESS_STEP_OUTPUT_VALIDATION_FAILED"
CHILD_FAILED = "TUBELESS_CHILD_FAILED"
RUN_CANCELLED = "TUBELESS_RUN_CANCELLED"
FINALIZATION_FAILED = "TUBELESS_FINALIZATION_FAILED"
FINALIZATION_CANCELLED = "TUBELESS_FINALIZATION_CANCELLED"
FINAL_RESULT_VALIDATION_FAILED = "TUBELESS_FINAL_RESULT_VALIDATION_FAILED"
REQUIRED_OUTPUTS_MISSING = "TUBELESS_REQUIRED_OUTPUTS_MISSING"
ITERATION_INVALID_DECISION = "TUBELESS_ITERATION_INVALID_DECISION"
ITERATION_LIMIT_REACHED = "TUBELESS_ITERATION_LIMIT_REACHED"
FOR_EACH_DUPLICATE_KEY = "TUBELESS_FOR_EACH_DUPLICATE_KEY"
SKIP_DECISION_INVALID = "TUBELESS_SKIP_DECISION_INVALID"
#: A failed run whose record names no error: its OpenTelemetry ``error.type``.
RUN_FAILED = "TUBELESS_RUN_FAILED"
#: An error object without a code of its own, as the CLI's error line names it.
UNKNOWN_ERROR = "TUBELESS_ERROR"

# -- agents ---------------------------------------------------------------------------------------
AGENT_INVALID_DECISION = "TUBELESS_AGENT_INVALID_DECISION"
AGENT_INVALID_STATE = "TUBELESS_AGENT_INVALID_STATE"
AGENT_LIMIT_REACHED = "TUBELESS_AGENT_LIMIT_REACHED"
#: A ``max_cost_usd`` budget needs the price of a model neither ``pricing:`` nor genai-prices
#: knows; raised before the request is sent.
BUDGET_PRICE_UNKNOWN = "TUBELESS_BUDGET_PRICE_UNKNOWN"
#: A batch row not started because the batch-wide budget was spent (its status: skipped).
BUDGET_EXHAUSTED = "TUBELESS_BUDGET_EXHAUSTED"
TOOL_ERRORS = "TUBELESS_TOOL_ERRORS"
TOOL_DENIED = "TUBELESS_TOOL_DENIED"
"""An outcome: the approver said no, so the call did not run."""
APPROVAL_REQUIRED = "TUBELESS_APPROVAL_REQUIRED"
APPROVAL_PREDICATE_FAILED = "TUBELESS_APPROVAL_PREDICATE_FAILED"
#: A checkpointed agent's recorded failure when what it raised carries no code.
AGENT_EXECUTION_FAILED = "TUBELESS_AGENT_EXECUTION_FAILED"

# -- traces ---------------------------------------------------------------------------------------
TRACE_INVALID = "TUBELESS_TRACE_INVALID"

# -- durable runs (round 2) -----------------------------------------------------------------------
CHECKPOINT_LOCKED = "TUBELESS_CHECKPOINT_LOCKED"
CHECKPOINT_INVALID = "TUBELESS_CHECKPOINT_INVALID"
CHECKPOINT_CORRUPT = "TUBELESS_CHECKPOINT_CORRUPT"
"""A checkpoint file lacks commits it is known to have made (its ``-wal`` lost or damaged, the
file copied or moved without it, emptied, or failing SQLite's integrity check): refused rather
than started over, since calls it recorded as running could run twice."""
CHECKPOINT_LEASE_LOST = "TUBELESS_CHECKPOINT_LEASE_LOST"
"""A lease's fence is stale: another owner took the key over after the lease expired, so this
lease may neither write nor renew (round 3). A run that loses its lease ends cancelled."""
CHECKPOINT_INVALID_KEY = "TUBELESS_AGENT_INVALID_CHECKPOINT_KEY"
CHECKPOINT_MISMATCH = "TUBELESS_AGENT_CHECKPOINT_MISMATCH"
CALL_INTERRUPTED = "TUBELESS_AGENT_CALL_INTERRUPTED"

# -- record and replay (round 2) ------------------------------------------------------------------
REPLAY_DIVERGED = "TUBELESS_REPLAY_DIVERGED"
CASSETTE_INVALID = "TUBELESS_CASSETTE_INVALID"
CASSETTE_MISMATCH = "TUBELESS_CASSETTE_MISMATCH"

# -- batch runs (round 2) -------------------------------------------------------------------------
#: A row's input cannot be read (not JSON), or the inputs file is not a list of inputs.
BATCH_INPUT_INVALID = "TUBELESS_BATCH_INPUT_INVALID"
#: The worker process or actor running a row died before returning it.
BATCH_WORKER_DIED = "TUBELESS_BATCH_WORKER_DIED"
#: An engine cannot be used: Ray not installed, or an entry workers cannot load from its files.
BATCH_ENGINE_UNAVAILABLE = "TUBELESS_BATCH_ENGINE_UNAVAILABLE"

# -- tubeless serve (round 3): HTTP answers {"error": {"code", "message"}} ---------------------
#: 401: no bearer token, or not the server's.
SERVE_UNAUTHORIZED = "TUBELESS_SERVE_UNAUTHORIZED"
#: 403: a Host header outside the allowlist (DNS rebinding), or a CORS origin not allowed.
SERVE_FORBIDDEN_HOST = "TUBELESS_SERVE_FORBIDDEN_HOST"
#: 409: a live run holds the key (the error carries its ``run_id``), or an approval's digest
#: is not the pending call's.
SERVE_CONFLICT = "TUBELESS_SERVE_CONFLICT"
#: 413: a request body over the limit, refused before it is parsed.
SERVE_TOO_LARGE = "TUBELESS_SERVE_TOO_LARGE"
#: 429: ``--max-runs`` runs are live; the answer carries ``Retry-After``.
SERVE_BUSY = "TUBELESS_SERVE_BUSY"
#: 404: no such run, entry, pending call or route.
SERVE_NOT_FOUND = "TUBELESS_SERVE_NOT_FOUND"
#: 400: a body that is not JSON, too deep, or not the shape an endpoint takes.
SERVE_BAD_REQUEST = "TUBELESS_SERVE_BAD_REQUEST"
#: 405: a method the route does not take.
SERVE_METHOD_NOT_ALLOWED = "TUBELESS_SERVE_METHOD_NOT_ALLOWED"
#: 500: something the server did not expect (never a traceback: see the server's log).
SERVE_INTERNAL = "TUBELESS_SERVE_INTERNAL"

# -- model providers (ProviderError, tubeless.providers) -----------------------------------------
#: A UTF-8 byte budget was exceeded: question, observation history or encoded request body.
PROVIDER_BUDGET_EXCEEDED = "TUBELESS_PROVIDER_BUDGET_EXCEEDED"
#: The agent input lacks the text a state helper needs (e.g. no string ``question``).
PROVIDER_INVALID_INPUT = "TUBELESS_PROVIDER_INVALID_INPUT"
#: A required setting is missing when a request is about to be sent (the API key).
PROVIDER_NOT_CONFIGURED = "TUBELESS_PROVIDER_NOT_CONFIGURED"
#: The request did not get a 2xx answer: HTTP error status or transport failure.
PROVIDER_REQUEST_FAILED = "TUBELESS_PROVIDER_REQUEST_FAILED"
#: The per-request deadline passed before a response arrived.
PROVIDER_TIMEOUT = "TUBELESS_PROVIDER_TIMEOUT"
#: The response is not a usable decision: invalid JSON, incomplete, malformed calls, ...
PROVIDER_INVALID_RESPONSE = "TUBELESS_PROVIDER_INVALID_RESPONSE"
#: The model refused to answer.
PROVIDER_REFUSED = "TUBELESS_PROVIDER_REFUSED"

# -- MCP servers (tubeless.mcp) -------------------------------------------------------------------
#: Outcome codes (recoverable: the agent sees them and goes on).
MCP_TOOL_ERROR = "MCP_TOOL_ERROR"
MCP_PROTOCOL_ERROR = "MCP_PROTOCOL_ERROR"
#: Fatal codes (McpError: the run fails).
MCP_UNAVAILABLE = "TUBELESS_MCP_UNAVAILABLE"
MCP_CONNECTION_FAILED = "TUBELESS_MCP_CONNECTION_FAILED"
MCP_TIMEOUT = "TUBELESS_MCP_TIMEOUT"
MCP_TOOL_MISSING = "TUBELESS_MCP_TOOL_MISSING"
MCP_TOOL_UNUSABLE = "TUBELESS_MCP_TOOL_UNUSABLE"

# -- projects -------------------------------------------------------------------------------------
DOCUMENT_INVALID = "TUBELESS_DOCUMENT_INVALID"
REFERENCE_INVALID = "TUBELESS_REFERENCE_INVALID"
TEMPLATE_INVALID = "TUBELESS_TEMPLATE_INVALID"

ErrorKind = Literal[
    "cancellation", "child", "definition", "finalization", "selection", "step", "validation"
]
ErrorPhase = Literal["definition", "planning", "execution", "finalization"]

#: How deep a recorded cause chain may go before it is cut with a marker node.
MAX_CAUSE_DEPTH = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationIssue:
    """One problem found by a schema, located by path; never quotes the rejected value."""

    message: str
    """What was expected, e.g. ``Input should be a valid integer``."""
    path: tuple[str | int, ...] = ()
    """Where in the value, from the root (empty for the root itself)."""

    def format(self) -> str:
        """``a.b.0: message`` (or just the message at the root)."""
        if not self.path:
            return self.message
        return ".".join(str(part) for part in self.path) + ": " + self.message

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON form used in trace records."""
        if self.path:
            return {"message": self.message, "path": list(self.path)}
        return {"message": self.message}


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorCause:
    """One link of a JSON-safe cause chain (message, exception type name, its ``code``)."""

    message: str
    name: str
    source_code: str | None = None
    cause: ErrorCause | None = None

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON form used in trace records."""
        wire: dict[str, Any] = {"message": self.message, "name": self.name}
        if self.source_code is not None:
            wire["sourceCode"] = self.source_code
        if self.cause is not None:
            wire["cause"] = self.cause.to_wire()
        return wire

    def deepest(self) -> ErrorCause:
        """The innermost link of the chain."""
        node = self
        while node.cause is not None:
            node = node.cause
        return node


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineError:
    """A recorded failure: on ``PipelineRun.errors``, in plans, and in trace records."""

    code: str
    """The tubeless code, e.g. ``TUBELESS_STEP_FAILED``."""
    kind: ErrorKind
    phase: ErrorPhase
    message: str
    step_id: str | None = None
    source_code: str | None = None
    """The deepest original ``code`` found on the exception chain, if any."""
    cause: ErrorCause | None = None
    issues: tuple[ValidationIssue, ...] = ()
    fan_out: Any = None
    """For failed ``for_each_pipeline`` steps: a bounded summary of the failed items."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The original exception, for ``raise ... from``; never serialized."""
    from_handler: bool = field(default=False, compare=False, repr=False)
    """Raised by a step's own handler, not by a predicate, validator, mapper or finalizer."""

    def format(self) -> str:
        """``<phase>[ at step <id>] [<code>][ (<source>)]: <message>[; caused by ...]``."""
        text: str = self.phase
        if self.step_id is not None:
            text += f" at step {self.step_id}"
        text += f" [{self.code}]"
        if self.source_code is not None and self.source_code != self.code:
            text += f" ({self.source_code})"
        text += f": {self.message}"
        if self.cause is not None:
            deepest = self.cause.deepest()
            if deepest.message != self.message:
                prefix = f" {deepest.source_code}" if deepest.source_code else ""
                text = f"{without_period(text)}; caused by{prefix}: {deepest.message}"
        return text

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON form used in trace records (no ``stepId``: the record has it)."""
        wire: dict[str, Any] = {
            "code": self.code,
            "kind": self.kind,
            "phase": self.phase,
            "message": self.message,
        }
        if self.source_code is not None:
            wire["sourceCode"] = self.source_code
        if self.cause is not None:
            wire["cause"] = self.cause.to_wire()
        if self.issues:
            wire["issues"] = [issue.to_wire() for issue in self.issues]
        if self.fan_out is not None:
            wire["fanOut"] = self.fan_out
        return wire


class TubelessError(Exception):
    """Root of every error tubeless raises; ``code`` is stable API."""

    code: str
    message: str
    recorded_cause: ErrorCause | None = None
    """A cause chain recorded earlier that stands for this error's cause: a child run's first
    error, which reaches the parent as recorded data, not as an exception. :func:`cause_chain`
    continues with it instead of ``__cause__``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    def located(self, where: str) -> Self:
        """A copy whose message starts with ``where`` (``file:line:col pointer: ``).

        The copy keeps every attribute of this error, which is left as it is (raise the copy
        ``from`` it).
        """
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        TubelessError.__init__(copy, self.code, where + self.message)
        return copy


class PipelineDefinitionError(TubelessError):
    """A pipeline definition is invalid; ``errors`` lists every problem found."""

    errors: tuple[PipelineError, ...]
    pipeline_id: str
    issues: tuple[Any, ...] = ()
    """From ``load_project``: every problem located in the project file (``DocumentIssue``s,
    in file order, each with its ``TUBELESS_DEFINITION_*`` code); empty otherwise."""

    def __init__(self, pipeline_id: str, errors: Sequence[PipelineError]) -> None:
        assert errors, "a definition error needs at least one problem"
        self.pipeline_id = pipeline_id
        self.errors = tuple(errors)
        details = "; ".join(f"[{e.code}] {e.message}" for e in self.errors)
        super().__init__(self.errors[0].code, f"Invalid pipeline {pipeline_id!r}: {details}")


class AgentDefinitionError(TubelessError):
    """An agent or tool definition is invalid."""

    code = AGENT_INVALID_DEFINITION
    issues: tuple[Any, ...] = ()
    """From ``load_project``: every definition problem located in the project file
    (``DocumentIssue``s, in file order); empty otherwise."""

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)


class PlanningError(TubelessError):
    """A selection cannot be planned; ``errors`` holds every ``TUBELESS_PLANNING_*`` problem."""

    errors: tuple[PipelineError, ...]

    def __init__(self, pipeline_id: str, errors: Sequence[PipelineError]) -> None:
        assert errors, "a planning error needs at least one problem"
        self.errors = tuple(errors)
        details = "; ".join(f"[{e.code}] {e.message}" for e in self.errors)
        super().__init__(self.errors[0].code, f"Cannot plan pipeline {pipeline_id!r}: {details}")


class PipelineExecutionError(TubelessError):
    """A run ended failed or cancelled; ``run`` is its full record.

    ``code`` is the first run error's code, ``source_code`` the deepest original code found in
    its cause chain, and ``__cause__`` the first original exception.
    """

    run: PipelineRun
    source_code: str | None

    def __init__(self, run: PipelineRun) -> None:
        assert run.errors, "an execution error needs a run with errors"
        first = run.errors[0]
        self.run = run
        self.source_code = deepest_source_code(first)
        super().__init__(first.code, f"Pipeline {run.pipeline_id} {run.status}: {first.format()}")


class CheckpointError(TubelessError):
    """A checkpoint store refused: a key in use, an unusable file, a key or document mismatch."""


class CassetteError(TubelessError):
    """A cassette cannot be used: unreadable, cut short, corrupt, or recorded for another agent.

    ``line`` is the 1-based line of the cassette the problem is on, when there is one.
    """

    def __init__(self, code: str, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(code, message)
        self.path = path
        self.line = line


class ReplayDivergedError(TubelessError):
    """A replayed run did something other than the recording: the first difference found.

    ``pointer`` is the JSON pointer of the difference inside the compared value (an outcome,
    the reduced state or the result); the message quotes values only when asked to.
    """

    code = REPLAY_DIVERGED

    def __init__(
        self, message: str, *, route: str, turn: int | None, call_id: str | None, pointer: str
    ) -> None:
        super().__init__(self.code, message)
        self.route = route
        self.turn = turn
        self.call_id = call_id
        self.pointer = pointer


class BatchError(TubelessError):
    """A batch cannot start: its inputs file is unusable or its engine cannot run the entry."""


class ProjectError(TubelessError):
    """A project cannot be used as written; ``issues`` lists every problem in file order.

    The base of :class:`DocumentError`, :class:`ReferenceResolutionError` and
    :class:`TemplateError`, each of which has its own ``code``; never raised itself.
    """

    issues: tuple[Any, ...]

    def __init__(self, message: str, issues: Sequence[Any] = ()) -> None:
        super().__init__(self.code, message)
        self.issues = tuple(issues)


class DocumentError(ProjectError):
    """A project document is invalid; ``issues`` lists every problem in file order."""

    code = DOCUMENT_INVALID


class ReferenceResolutionError(ProjectError):
    """A ``module:attribute`` reference cannot be resolved or is not allowed."""

    code = REFERENCE_INVALID


class TemplateError(ProjectError):
    """A template is invalid or failed to render in the sandbox."""

    code = TEMPLATE_INVALID


_LINE_BREAKS = re.compile(r"\s*(?:\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029])\s*")


def is_definition_code(code: str) -> bool:
    """Whether ``code`` is a pipeline core or agent harness definition code (``run`` exits 3)."""
    return code.startswith("TUBELESS_DEFINITION_") or code == AGENT_INVALID_DEFINITION


def one_line(text: str) -> str:
    """``text`` with every line break, and the spaces around it, made a single space."""
    return _LINE_BREAKS.sub(" ", text).strip() if _LINE_BREAKS.search(text) else text


def without_period(text: str) -> str:
    """``text`` without one closing full stop, so that a clause can follow (``...; caused by``)."""
    if text.endswith(".") and not text.endswith(".."):
        return text[:-1]
    return text


def code_of(exc: BaseException) -> str | None:
    """The string ``code`` attribute of an exception, if it has one."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else None


def deepest_source_code(error: PipelineError | ErrorCause | None) -> str | None:
    """The innermost original ``code`` on a recorded error's cause chain, or on a bare chain.

    For a :class:`PipelineError` the search starts from its own ``source_code``; for a chain
    made by :func:`cause_chain` its first link carries the exception's own ``code``.
    """
    found: str | None = None
    node = error
    if isinstance(error, PipelineError):
        found, node = error.source_code, error.cause
    while node is not None:
        if node.source_code is not None:
            found = node.source_code
        node = node.cause
    return found


def cause_chain(exc: BaseException | None) -> ErrorCause | None:
    """A JSON-safe snapshot of ``exc`` and its causes, at most ``MAX_CAUSE_DEPTH + 1`` links.

    A longer chain is cut in the middle, never at the end: the first links, one marker
    standing for the omitted ones (carrying the innermost ``code`` among them), and the
    innermost link, so the original exception's type and the deepest code always survive.
    """
    if exc is None:
        return None
    return _linked(_cut(_links(exc)))


#: Links followed at most when reading a chain (only a hostile chain is longer).
_MAX_LINKS_READ = 4096
_TRUNCATED = "Cause chain truncated"
_CIRCULAR = "Circular cause"


def _links(exc: BaseException) -> list[ErrorCause]:
    """Every link of ``exc``'s chain, outermost first, each without its ``cause``."""
    links: list[ErrorCause] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and len(links) < _MAX_LINKS_READ:
        if id(current) in seen:
            links.append(ErrorCause(message=_CIRCULAR, name="Error"))
            break
        seen.add(id(current))
        links.append(
            ErrorCause(
                message=str(current) or type(current).__name__,
                name=type(current).__name__,
                source_code=code_of(current),
            )
        )
        recorded = current.recorded_cause if isinstance(current, TubelessError) else None
        if recorded is not None:
            node: ErrorCause | None = recorded
            while node is not None and len(links) < _MAX_LINKS_READ:
                links.append(
                    ErrorCause(message=node.message, name=node.name, source_code=node.source_code)
                )
                node = node.cause
            break
        inner = current.__cause__ if current.__cause__ is not None else current.__context__
        if current.__suppress_context__ and current.__cause__ is None:
            inner = None
        current = inner
    return links


def _cut(links: list[ErrorCause]) -> list[ErrorCause]:
    """``links`` bounded to ``MAX_CAUSE_DEPTH + 1``: the first ones, a marker, the last one."""
    if len(links) <= MAX_CAUSE_DEPTH + 1:
        return links
    kept, omitted, last = links[: MAX_CAUSE_DEPTH - 1], links[MAX_CAUSE_DEPTH - 1 : -1], links[-1]
    code = next((link.source_code for link in reversed(omitted) if link.source_code), None)
    marker = ErrorCause(
        message=f"{_TRUNCATED} ({len(omitted)} causes omitted)", name="Error", source_code=code
    )
    return [*kept, marker, last]


def _linked(links: list[ErrorCause]) -> ErrorCause | None:
    """The links as one nested chain, outermost first."""
    chain: ErrorCause | None = None
    for link in reversed(links):
        chain = ErrorCause(
            message=link.message, name=link.name, source_code=link.source_code, cause=chain
        )
    return chain
