"""The YAML project format, version 1, as pydantic models (the meta-schema is generated here).

These models are the only place the format is described: ``make schema`` writes
``schemas/project.schema.json`` from them, the loader checks documents against that schema
(to report every problem with its location) and then builds these models, and the compiler
turns them into the same runtime objects the Python API builds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.config import JsonDict

__all__ = [
    "ID_PATTERN",
    "REFERENCE_PATTERN",
    "AgentSpec",
    "AgentToolSpec",
    "CallableSpec",
    "FinalizeSpec",
    "ForEachSpec",
    "FromPipelineSpec",
    "HandlerToolSpec",
    "LimitsSpec",
    "McpHttpServerSpec",
    "McpStdioServerSpec",
    "McpToolSpec",
    "PipelineSpec",
    "PipelineToolSpec",
    "PriceSpec",
    "ProjectInfo",
    "ProjectSpec",
    "SchemaSpec",
    "StepSpec",
    "UseSpec",
]

#: Agent and pipeline ids (one namespace).
ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$"
#: ``package.module:attribute`` (the attribute may be dotted).
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
REFERENCE_PATTERN = rf"^{_DOTTED}:{_DOTTED}$"
#: What the agent harness accepts (``define_agent``, ``define_tool``), checked statically too.
MAX_TOOLS = 4096
MAX_TOOL_DESCRIPTION = 4096
#: Step ids and tool names.
STEP_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
TOOL_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,127}$"
#: MCP server names (``mcp_servers`` keys).
MCP_SERVER_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
_ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Reference = Annotated[
    str,
    Field(
        pattern=REFERENCE_PATTERN,
        description="A Python object by import path: 'package.module:attribute'.",
    ),
]
Id = Annotated[str, Field(pattern=ID_PATTERN, description="An agent or pipeline id.")]
StepId = Annotated[str, Field(pattern=STEP_ID_PATTERN, description="A step id.")]
Text = Annotated[str, Field(min_length=1, pattern=r"\S")]
ToolDescription = Annotated[
    str, Field(min_length=1, max_length=MAX_TOOL_DESCRIPTION, pattern=r"\S")
]
#: ``input`` and ``map_options`` of a pipeline or agent tool come together or not at all.
_TOGETHER: JsonDict = {"input": ["map_options"], "map_options": ["input"]}
#: A mapping whose strings are templates (a mapping with ``use`` is a factory instead).
TemplateMapping = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "not": {"required": ["use"]},
            "description": "A mapping whose strings are jinja2 templates rendered with "
            "{input: <validated input>}; a string that is exactly one {{ expression }} "
            "yields the native value.",
        }
    ),
]
#: An amount of US dollars: a YAML number, or a decimal string kept exactly ('2.50').
USD_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*$"
UsdAmount = Annotated[
    int | float | str,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": USD_PATTERN},
            ],
            "description": "US dollars: a number, or a decimal string such as '2.50' (exact).",
        }
    ),
]
#: ``pricing`` keys: ``<provider>:<model>``.
PRICE_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*:\S+$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class UseSpec(_Spec):
    """A factory called once when the project is compiled, with ``with`` as keyword arguments."""

    use: Reference = Field(description="The factory, by import path.")
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="Literal keyword arguments for the factory (no environment expansion).",
    )


#: A callable by import path, or a factory that returns one.
CallableSpec = Annotated[
    Reference | UseSpec,
    Field(description="A callable ('module:attribute') or {use: factory, with: {...}}."),
]


class SchemaSpec(_Spec):
    """A schema: a pydantic model or type by import path, or an inline JSON Schema."""

    schema_: Reference | dict[str, Any] = Field(
        alias="schema",
        description="'module:Model' (a pydantic model or any type pydantic can validate), or "
        "an inline draft 2020-12 JSON Schema object.",
    )


class ProjectInfo(_Spec):
    """Who the project is and what runs by default."""

    id: Id = Field(description="The project id.")
    name: Text | None = Field(default=None, description="Display name.")
    description: Text | None = Field(default=None, description="What the project is for.")
    default: Id | None = Field(
        default=None,
        description="The agent or pipeline that runs when the command line names none.",
    )


class LimitsSpec(_Spec):
    """Hard bounds on the agent (see docs/agents.md)."""

    max_turns: int | None = Field(
        default=None, ge=1, le=2**53 - 1, description="Decisions, the finishing one included."
    )
    max_calls: int | None = Field(
        default=None, ge=0, le=2**53 - 1, description="Tool calls across the subtree."
    )
    max_decisions: int | None = Field(
        default=None, ge=1, le=2**53 - 1, description="Decision callbacks across the subtree."
    )
    max_depth: int | None = Field(
        default=None, ge=0, le=2**53 - 1, description="Delegation edges below this agent."
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=2**53 - 1,
        description="Active decisions and tool handlers across the subtree.",
    )
    max_input_tokens: int | None = Field(
        default=None, ge=0, le=2**53 - 1, description="Model input tokens across the subtree."
    )
    max_output_tokens: int | None = Field(
        default=None, ge=0, le=2**53 - 1, description="Model output tokens across the subtree."
    )
    max_total_tokens: int | None = Field(
        default=None,
        ge=0,
        le=2**53 - 1,
        description="Model input plus output tokens across the subtree.",
    )
    max_cost_usd: UsdAmount | None = Field(
        default=None,
        description="US dollars of model requests across the subtree (a number or a decimal "
        "string such as '2.50'), priced per model (see pricing).",
    )
    on_limit: Literal["fail", "finish", "wait"] | None = Field(
        default=None,
        description="When a limit runs out: 'fail' the run (the default), 'finish': ask "
        "decide once more with ctx.final and accept only a finish, or 'wait': a checkpointed "
        "run whose token or cost budget ran out stops waiting for a raised budget.",
    )


Approval = Literal["never", "always"] | Reference
_APPROVAL: Any = Field(
    default="never",
    description="Whether a call needs the run's approver to say yes first: 'never', 'always', "
    "or a predicate(input, ctx) by import path.",
)


class HandlerToolSpec(_Spec):
    """A tool declared around a plain function ``run(input, ctx)``."""

    run: Reference = Field(description="The handler, by import path.")
    description: ToolDescription = Field(
        description="What the tool does, for the model (at most 4096 characters)."
    )
    input: SchemaSpec = Field(description="Validates the model's argument.")
    output: SchemaSpec = Field(description="Validates the handler's result.")
    preview: Literal["run", "skip"] | Reference = Field(
        default="skip",
        description="In dry runs: 'run' the handler, 'skip' the tool, or call this preview.",
    )
    approval: Approval = _APPROVAL
    replay: Literal["unsafe", "safe"] = Field(
        default="unsafe",
        description="On resume, may a call that was running when the run stopped run again? "
        "'safe' when running it twice does no harm (a read).",
    )
    reconcile: Reference | None = Field(
        default=None,
        description="reconcile(input, ctx), asked on resume about an unsafe call that was "
        "running: return its value, or raise ToolError.",
    )


class PipelineToolSpec(_Spec):
    """A pipeline of this project used as a tool."""

    model_config = ConfigDict(json_schema_extra={"dependentRequired": _TOGETHER})

    pipeline: Id = Field(description="The pipeline's id in this project.")
    description: ToolDescription = Field(description="What the tool does, for the model.")
    input: SchemaSpec | None = Field(
        default=None,
        description="Validates the model's argument (give it together with map_options).",
    )
    map_options: Reference | None = Field(
        default=None, description="Maps the validated argument to the pipeline's input."
    )
    approval: Approval = _APPROVAL
    replay: Literal["unsafe", "safe"] | None = Field(
        default=None,
        description="On resume, may a call that was running when the run stopped run again? "
        "(default 'unsafe')",
    )


class AgentToolSpec(_Spec):
    """An agent of this project used as a tool (a subagent)."""

    model_config = ConfigDict(json_schema_extra={"dependentRequired": _TOGETHER})

    agent: Id = Field(description="The agent's id in this project.")
    description: ToolDescription = Field(description="What the tool does, for the model.")
    input: SchemaSpec | None = Field(
        default=None,
        description="Validates the model's argument (give it together with map_options).",
    )
    map_options: Reference | None = Field(
        default=None, description="Maps the validated argument to the agent's input."
    )
    replay: Literal["unsafe", "safe"] | None = Field(
        default=None,
        description="On resume, may a call that was running when the run stopped run again? "
        "(default 'safe')",
    )
    approval: Approval = _APPROVAL


class McpToolSpec(_Spec):
    """Tools of an MCP server of this project, registered as ``<key>__<tool>``."""

    mcp: Annotated[str, Field(pattern=MCP_SERVER_PATTERN)] = Field(
        description="The server's name in mcp_servers."
    )
    include: list[Text] = Field(
        min_length=1,
        json_schema_extra={"uniqueItems": True},
        description="The server's tools the agent may call (the server describes them when a "
        "run connects; any other tool cannot be called).",
    )


ToolSpec = Annotated[
    Reference | HandlerToolSpec | PipelineToolSpec | AgentToolSpec | McpToolSpec,
    Field(
        description="A define_tool/pipeline_tool object by import path, a tool around a plain "
        "function, {pipeline: id} / {agent: id} of this project, or {mcp: server, include: "
        "[tool, ...]}."
    ),
]


class AgentSpec(_Spec):
    """An agent: a bounded decide → calls → reduce loop."""

    name: Text | None = Field(default=None, description="Display name.")
    description: Text | None = Field(default=None, description="What the agent does.")
    implementation_version: Text | None = Field(
        default=None,
        max_length=256,
        description="Bump when prompts, reducers or handlers change behaviour.",
    )
    input: SchemaSpec = Field(description="The agent's input schema.")
    result: SchemaSpec = Field(description="The finish result's schema.")
    result_json_schema: dict[str, Any] | None = Field(
        default=None, description="An explicit descriptor of the result for models."
    )
    initial_state: Reference | UseSpec | TemplateMapping = Field(
        description="initial_state(input) by import path, a factory, or a mapping whose strings "
        "are templates rendered with {input: <validated input>}."
    )
    decide: CallableSpec = Field(description="decide(state, ctx) returning a decision.")
    dry_run: CallableSpec | None = Field(
        default=None,
        description="A preview decision source for dry runs (without it dry runs skip the agent).",
    )
    reduce: CallableSpec | None = Field(
        default=None, description="reduce(state, outcomes) returning the next state."
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec, description="Hard bounds.")
    tools: dict[Annotated[str, Field(pattern=TOOL_NAME_PATTERN)], ToolSpec] = Field(
        default_factory=dict,
        max_length=MAX_TOOLS,
        description="Registered tools by name (none are added implicitly; at most 4096).",
        json_schema_extra={"propertyNames": {"pattern": TOOL_NAME_PATTERN}},
    )


class FromPipelineSpec(_Spec):
    """Run another pipeline of this project once as a child run."""

    pipeline: Id = Field(description="The child pipeline's id.")
    map_options: Reference | None = Field(
        default=None, description="map_options(inputs, ctx) builds the child's input."
    )
    map_result: Reference | None = Field(
        default=None, description="map_result(result) reshapes the child's result."
    )


class ForEachSpec(_Spec):
    """Run another pipeline of this project once per item."""

    pipeline: Id = Field(description="The child pipeline's id.")
    items: Reference = Field(description="items(inputs, ctx) returns the items.")
    key: Reference = Field(description="key(item, index) returns a unique string key.")
    map_options: Reference = Field(
        description="map_options(item, index, inputs, ctx) builds a child's input."
    )
    concurrency: int = Field(default=1, ge=1, le=2**53 - 1, description="Children running at once.")
    map_result: Reference | None = Field(
        default=None, description="map_result(results) reshapes the list of results."
    )


class StepSpec(_Spec):
    """One step: exactly one of run, from_pipeline or for_each_pipeline."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["run"]},
                {"required": ["from_pipeline"]},
                {"required": ["for_each_pipeline"]},
            ]
        }
    )

    id: StepId = Field(description="The step id, unique in its pipeline.")
    name: Text | None = Field(default=None, description="Display name.")
    description: Text | None = Field(default=None, description="Display description.")
    run: Reference | None = Field(default=None, description="run(inputs, ctx), by import path.")
    from_pipeline: FromPipelineSpec | None = Field(
        default=None, description="Run a pipeline of this project as a child."
    )
    for_each_pipeline: ForEachSpec | None = Field(
        default=None, description="Run a pipeline of this project once per item."
    )
    depends_on: list[StepId] = Field(
        default_factory=list, description="Required dependencies (their outputs are inputs)."
    )
    optional_depends_on: list[StepId] = Field(
        default_factory=list, description="Inputs used only when published."
    )
    skip_after_failure_of: list[StepId] = Field(
        default_factory=list, description="Failure gates: skip if one of them failed."
    )
    skip: Reference | None = Field(
        default=None, description="skip(inputs, ctx), a policy predicate."
    )
    dry_run: Literal["skip"] | Reference | None = Field(
        default=None, description="'skip' in dry runs, or a preview handler (run steps only)."
    )
    output: SchemaSpec | None = Field(
        default=None, description="Validates the step's output (run steps only)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        kinds = [self.run, self.from_pipeline, self.for_each_pipeline]
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError("a step needs exactly one of run, from_pipeline, for_each_pipeline")
        return self


class FinalizeSpec(_Spec):
    """A finalizer function and/or the steps whose outputs it requires."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    run: Reference | None = Field(
        default=None, description="fn(outputs, ctx) computing the result."
    )
    require_outputs: list[StepId] = Field(
        default_factory=list, description="Steps that must have published an output."
    )


class PipelineSpec(_Spec):
    """A pipeline: a graph of steps."""

    name: Text | None = Field(default=None, description="Display name.")
    description: Text | None = Field(default=None, description="What the pipeline does.")
    implementation_version: Text | None = Field(
        default=None, max_length=256, description="Bump when handlers change behaviour."
    )
    input: SchemaSpec | None = Field(
        default=None, description="The input schema (needed to run it or use it as a tool)."
    )
    result: SchemaSpec | None = Field(default=None, description="The result schema.")
    targets: list[StepId] | None = Field(
        default=None, description="Declared targets (default: the last step)."
    )
    finalize: StepId | FinalizeSpec | None = Field(
        default=None,
        description="A step id (its output is the result), or {run, require_outputs}.",
    )
    steps: list[StepSpec] = Field(min_length=1, description="The steps, in declaration order.")


Timeout = Annotated[
    float,
    Field(
        gt=0,
        le=86400,
        description="Seconds each request may take (default 60); past it the run fails.",
    ),
]


class _McpServerSettings(_Spec):
    """How an MCP server is used (none of it enters a definition identity: it changes how
    tools are reached, not what they do)."""

    timeout_s: Timeout = 60.0
    per_run: bool = Field(
        default=False,
        description="One connection per run, even where a batch worker shares one across its "
        "rows (for a stateful server whose state must not outlive a run).",
    )
    max_concurrency: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        default=None,
        description="The most calls in flight to this server at once, over every run sharing "
        "the connection (default: no bound beyond the agents' limits).",
    )
    max_result_bytes: Annotated[int, Field(ge=1, le=2**31)] = Field(
        default=4 * 1024 * 1024,
        description="The largest tool result value, in bytes of compact JSON; past it the call "
        "is a recoverable MCP_PROTOCOL_ERROR.",
    )
    max_result_blocks: Annotated[int, Field(ge=1, le=10**7)] = Field(
        default=10_000,
        description="The most content blocks a tool result may hold; past it the call is a "
        "recoverable MCP_PROTOCOL_ERROR.",
    )


class McpStdioServerSpec(_McpServerSettings):
    """An MCP server started as a subprocess, speaking MCP on stdin/stdout (one process per
    batch worker, or per run with per_run)."""

    command: list[Text] = Field(
        min_length=1,
        description="The program and its arguments; 'python' as the program is the Python "
        "that runs tubeless.",
    )
    env: dict[Annotated[str, Field(pattern=_ENV_NAME_PATTERN)], str] = Field(
        default_factory=dict,
        description="Environment variables for the process (literal values), over a minimal "
        "inherited set (HOME, PATH, ...).",
        json_schema_extra={"propertyNames": {"pattern": _ENV_NAME_PATTERN}},
    )
    cwd: Text | None = Field(
        default=None,
        description="The working directory, relative to this file (default: this file's folder).",
    )


class McpHttpServerSpec(_McpServerSettings):
    """An MCP server reached over streamable HTTP."""

    url: Annotated[str, Field(pattern=r"^https?://\S+$")] = Field(
        description="The endpoint, e.g. http://127.0.0.1:8000/mcp."
    )
    headers_env: dict[str, Annotated[str, Field(pattern=_ENV_NAME_PATTERN)]] = Field(
        default_factory=dict,
        description="HTTP headers whose values are read from these environment variables when "
        "a run connects (never written in the file).",
    )


class PriceSpec(_Spec):
    """The prices of one model, in US dollars per million tokens."""

    input_per_mtok: UsdAmount = Field(description="Per million input tokens (not cached).")
    output_per_mtok: UsdAmount = Field(description="Per million output tokens.")
    cached_input_per_mtok: UsdAmount | None = Field(
        default=None,
        description="Per million input tokens read from the provider's cache (default: the "
        "input price).",
    )


class ProjectSpec(_Spec):
    """A tubeless project file (version 1)."""

    schema_uri: str | None = Field(
        default=None, alias="$schema", description="The meta-schema, for editors (never fetched)."
    )
    version: Literal[1] = Field(description="The format version: 1.")
    project: ProjectInfo = Field(description="The project's id, name and default entry.")
    python_path: list[Text] = Field(
        default_factory=list,
        description="Folders (relative to this file) searched first for references.",
    )
    allow_modules: list[Text] = Field(
        default_factory=list,
        description="Standard-library modules whose callables references may name.",
    )
    agents: dict[Annotated[str, Field(pattern=ID_PATTERN)], AgentSpec] = Field(
        default_factory=dict,
        description="Agents by id.",
        json_schema_extra={"propertyNames": {"pattern": ID_PATTERN}},
    )
    pipelines: dict[Annotated[str, Field(pattern=ID_PATTERN)], PipelineSpec] = Field(
        default_factory=dict,
        description="Pipelines by id.",
        json_schema_extra={"propertyNames": {"pattern": ID_PATTERN}},
    )
    mcp_servers: dict[
        Annotated[str, Field(pattern=MCP_SERVER_PATTERN)], McpStdioServerSpec | McpHttpServerSpec
    ] = Field(
        default_factory=dict,
        description="MCP servers by name: {command: [...], env, cwd} (stdio) or {url, "
        "headers_env} (streamable HTTP), with timeout_s, per_run, max_concurrency, "
        "max_result_bytes, max_result_blocks. Only runs connect to them.",
        json_schema_extra={"propertyNames": {"pattern": MCP_SERVER_PATTERN}},
    )
    pricing: dict[Annotated[str, Field(pattern=PRICE_KEY_PATTERN)], PriceSpec] = Field(
        default_factory=dict,
        description="Model prices that add to or override the bundled genai-prices data, by "
        "'<provider>:<model>' (providers openai, anthropic, or a chat adapter's provider name); "
        "needed for a max_cost_usd budget with a model the data does not know.",
        json_schema_extra={"propertyNames": {"pattern": PRICE_KEY_PATTERN}},
    )
