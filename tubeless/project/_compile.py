"""Compiling a checked project spec into the runtime objects the Python API builds.

Every reference is resolved first and every problem collected (reported at the YAML location
that named it); only then are agents and pipelines built, each after the entries it uses.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic_core import to_jsonable_python

from tubeless.agent import Tool, define_agent, define_tool, pipeline_tool
from tubeless.errors import (
    DOCUMENT_INVALID,
    REFERENCE_INVALID,
    AgentDefinitionError,
    PipelineDefinitionError,
    TemplateError,
)
from tubeless.mcp import McpServer, mcp_tools
from tubeless.pipeline import (
    Pipeline,
    Step,
    define_pipeline,
    for_each_pipeline,
    from_pipeline,
    require_outputs,
    step,
)
from tubeless.project._issues import did_you_mean
from tubeless.project._references import ReferenceProblem, Resolver
from tubeless.project._semantics import composition_order, escape
from tubeless.project._signatures import call_problem
from tubeless.project.spec import (
    AgentSpec,
    AgentToolSpec,
    FinalizeSpec,
    HandlerToolSpec,
    McpHttpServerSpec,
    McpStdioServerSpec,
    McpToolSpec,
    PipelineSpec,
    PipelineToolSpec,
    ProjectSpec,
    SchemaSpec,
    StepSpec,
    UseSpec,
)
from tubeless.schema import Schema, SchemaDefinitionError

__all__ = ["AGENT_FIELDS", "Compiler"]

#: Agent fields that ``load_project(overrides=...)`` may replace.
AGENT_FIELDS = frozenset({"initial_state", "decide", "dry_run", "reduce"})

_Issue = tuple[str, str, str]  # (pointer, message, code)


class _Missing:
    """Stands in for an object that could not be resolved (its problem is recorded)."""


_MISSING = _Missing()


class McpTools(NamedTuple):
    """The tools one ``{mcp: server, include: [...]}`` entry registers, by registered name."""

    tools: dict[str, Any]


def _missing(*values: Any) -> bool:
    return any(value is _MISSING for value in values)


class Compiler:
    """Builds a project's agents and pipelines; collects every problem it meets."""

    def __init__(
        self,
        spec: ProjectSpec,
        base_dir: Path,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.spec = spec
        self.resolver = Resolver(base_dir, spec.python_path, spec.allow_modules)
        self.base_dir = base_dir
        self._servers: dict[str, McpServer] = {}
        self.overrides = overrides or {}
        self.issues: list[_Issue] = []
        self.at_key: set[str] = set()
        """Pointers of issues located at their key (an unknown factory setting)."""
        self.import_failures: list[BaseException] = []
        """What importing a module raised, first failure first (the cause ``--debug`` shows)."""
        self.definition_errors: list[tuple[str, Exception]] = []
        self.built: dict[str, Pipeline] = {}
        self._check_overrides()

    def _pricing(self) -> dict[str, Any] | None:
        """The project's ``pricing:`` block as ``define_agent`` takes it (YAML numbers as
        their decimal text, so 0.15 stays exactly 0.15)."""
        if not self.spec.pricing:
            return None
        return {
            key: {
                name: repr(value) if isinstance(value, float) else value
                for name, value in entry.model_dump(exclude_none=True).items()
            }
            for key, entry in self.spec.pricing.items()
        }

    def _check_overrides(self) -> None:
        for entry, fields in self.overrides.items():
            if entry not in self.spec.agents:
                raise AgentDefinitionError(
                    f"overrides name {entry!r}, which is not an agent of the project"
                )
            unknown = set(fields) - AGENT_FIELDS
            if unknown:
                raise AgentDefinitionError(
                    f"overrides for {entry!r} may replace {sorted(AGENT_FIELDS)}, "
                    f"not {sorted(unknown)}"
                )

    # -- references -------------------------------------------------------------------------
    def ref(self, reference: str, pointer: str, kind: Any, call: str | None = None) -> Any:
        """The object ``reference`` names (``_MISSING`` once its problem is recorded); a
        callable must take the arguments of ``call`` (``"decide(state, ctx)"``)."""
        try:
            value = self.resolver.resolve(reference, kind)
        except ReferenceProblem as exc:
            if not exc.repeated:  # a module that failed to import is one problem
                self.issues.append((pointer, str(exc), REFERENCE_INVALID))
                if exc.original is not None:
                    self.import_failures.append(exc.original)
            return _MISSING
        problem = None if call is None else call_problem(value, call)
        if problem is not None:
            self.issues.append((pointer, f"{reference!r} {problem}", REFERENCE_INVALID))
            return _MISSING
        return value

    def callable_(self, value: str | UseSpec, pointer: str, call: str) -> Any:
        if isinstance(value, str):
            return self.ref(value, pointer, "callable", call)
        factory = self.ref(value.use, f"{pointer}/use", "callable")
        if factory is _MISSING or not self._settings_fit(factory, value, pointer):
            return _MISSING
        try:
            made = factory(**value.with_)
        except Exception as exc:
            self.issues.append(
                (
                    pointer,
                    f"factory {value.use!r} failed: {type(exc).__name__}: {exc}",
                    REFERENCE_INVALID,
                )
            )
            return _MISSING
        if not callable(made):
            kind = type(made).__name__
            article = "an" if kind[:1].lower() in "aeiou" else "a"
            self.issues.append(
                (
                    pointer,
                    f"factory {value.use!r} returned {article} {kind}, not a callable",
                    REFERENCE_INVALID,
                )
            )
            return _MISSING
        problem = call_problem(made, call)
        if problem is not None:
            self.issues.append(
                (pointer, f"what {value.use!r} returned {problem}", REFERENCE_INVALID)
            )
            return _MISSING
        return made

    def _settings_fit(self, factory: Any, value: UseSpec, pointer: str) -> bool:
        """Whether ``with:`` names only settings the factory takes, and all it needs; each
        problem is recorded (an unknown setting with the closest one)."""
        try:
            parameters = list(inspect.signature(factory).parameters.values())
        except (TypeError, ValueError):  # no signature to read: let the call say it
            return True
        named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        names = [p.name for p in named]
        fits = True
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            for key in value.with_:
                if key not in names:
                    hint = did_you_mean(key, names)
                    listed = f"its settings: {', '.join(names)}" if names else "it takes none"
                    where = f"{pointer}/with/{escape(key)}"
                    self.at_key.add(where)
                    self.issues.append(
                        (
                            where,
                            f"{value.use!r} has no setting {key!r}; {hint or listed}",
                            REFERENCE_INVALID,
                        )
                    )
                    fits = False
        for parameter in named:
            if parameter.default is parameter.empty and parameter.name not in value.with_:
                self.issues.append(
                    (
                        pointer,
                        f"{value.use!r} needs the setting {parameter.name!r} under with:",
                        REFERENCE_INVALID,
                    )
                )
                fits = False
        return fits

    def schema(self, value: SchemaSpec, pointer: str) -> Any:
        source = value.schema_
        where = f"{pointer}/schema"
        if isinstance(source, dict):
            try:
                return Schema.json(source)
            except (SchemaDefinitionError, TypeError, ValueError) as exc:
                self.issues.append((where, f"not a usable JSON Schema: {exc}", DOCUMENT_INVALID))
                return _MISSING
        target = self.ref(source, where, "schema")
        if target is _MISSING:
            return _MISSING
        try:
            return Schema.of(target)
        except (SchemaDefinitionError, TypeError, ValueError) as exc:
            self.issues.append((where, f"{source!r} is not a schema: {exc}", REFERENCE_INVALID))
            return _MISSING

    # -- entries ----------------------------------------------------------------------------
    def build_all(self) -> dict[str, Pipeline]:
        self.resolver.activate()
        for entry_id in composition_order(self.spec):
            if entry_id in self.spec.agents:
                built = self._agent(entry_id, self.spec.agents[entry_id])
            else:
                built = self._pipeline(entry_id, self.spec.pipelines[entry_id])
            if built is not None:
                self.built[entry_id] = built
        return self.built

    def _tool(self, name: str, tool: Any, pointer: str) -> Any:
        if isinstance(tool, str):
            value = self.ref(tool, pointer, "tool")
            if value is not _MISSING and not isinstance(value, Tool):
                self.issues.append(
                    (
                        pointer,
                        f"{tool!r} is a {type(value).__name__}, not a tool; make it with "
                        "define_tool(...) or declare {run, description, input, output} here",
                        REFERENCE_INVALID,
                    )
                )
                return _MISSING
            return value
        if isinstance(tool, HandlerToolSpec):
            run = self.ref(tool.run, f"{pointer}/run", "callable", "run(input, ctx)")
            preview: Any = None
            if tool.preview == "run":
                preview = run
            elif tool.preview != "skip":
                preview = self.ref(
                    tool.preview, f"{pointer}/preview", "callable", "preview(input, ctx)"
                )
            reconcile: Any = None
            if tool.reconcile is not None:
                reconcile = self.ref(
                    tool.reconcile, f"{pointer}/reconcile", "callable", "reconcile(input, ctx)"
                )
            inputs = self.schema(tool.input, f"{pointer}/input")
            outputs = self.schema(tool.output, f"{pointer}/output")
            approval = self._approval(tool.approval, pointer)
            if _missing(run, preview, inputs, outputs, approval, reconcile):
                return _MISSING
            try:
                return define_tool(
                    description=tool.description,
                    input_schema=inputs,
                    output_schema=outputs,
                    run=run,
                    preview=preview,
                    approval=approval,
                    replay=tool.replay,
                    reconcile=reconcile,
                )
            except AgentDefinitionError as exc:
                self.definition_errors.append((pointer, exc))
                return _MISSING
        if isinstance(tool, McpToolSpec):
            return self._mcp_tools(name, tool, pointer)
        assert isinstance(tool, (PipelineToolSpec, AgentToolSpec))
        target = tool.pipeline if isinstance(tool, PipelineToolSpec) else tool.agent
        child = self.built.get(target)
        inputs = None if tool.input is None else self.schema(tool.input, f"{pointer}/input")
        mapper = (
            None
            if tool.map_options is None
            else self.ref(
                tool.map_options, f"{pointer}/map_options", "callable", "map_options(input)"
            )
        )
        approval = self._approval(tool.approval, pointer)
        if child is None or _missing(inputs, mapper, approval):
            return _MISSING
        try:
            return pipeline_tool(
                child,
                description=tool.description,
                input_schema=inputs,
                map_options=mapper,
                approval=approval,
                replay=tool.replay,
            )
        except AgentDefinitionError as exc:
            self.definition_errors.append((pointer, exc))
            return _MISSING

    def _approval(self, value: str, pointer: str) -> Any:
        if value in ("never", "always"):
            return value
        return self.ref(value, f"{pointer}/approval", "callable", "approval(input, ctx)")

    def _mcp_server(self, name: str) -> McpServer:
        """The ``McpServer`` for ``mcp_servers[name]`` (one object per name, so runs share it)."""
        if name not in self._servers:
            spec = self.spec.mcp_servers[name]
            if isinstance(spec, McpStdioServerSpec):
                command = list(spec.command)
                if command[0] == "python":
                    command[0] = sys.executable  # the Python that runs tubeless
                cwd = self.base_dir / spec.cwd if spec.cwd is not None else self.base_dir
                server = McpServer.stdio(
                    name, command, env=spec.env, cwd=str(cwd), **_mcp_settings(spec)
                )
            else:
                assert isinstance(spec, McpHttpServerSpec)
                server = McpServer.http(
                    name, spec.url, headers_env=spec.headers_env, **_mcp_settings(spec)
                )
            self._servers[name] = server
        return self._servers[name]

    def _mcp_tools(self, key: str, tool: McpToolSpec, pointer: str) -> Any:
        """``{key__tool: Tool}`` for the included tools (the server is not contacted)."""
        try:
            return McpTools(mcp_tools(self._mcp_server(tool.mcp), tool.include, key=key))
        except AgentDefinitionError as exc:
            self.definition_errors.append((pointer, exc))
            return _MISSING

    def _initial_state(self, agent: AgentSpec, pointer: str) -> Any:
        value = agent.initial_state
        if isinstance(value, dict):
            # Imported here: jinja2 is loaded only for a project with a template mapping.
            from tubeless.project._templates import compile_template_mapping

            render = compile_template_mapping(value, pointer)

            def from_template(validated: Any) -> Any:
                return render({"input": to_jsonable_python(validated)})

            return from_template
        return self.callable_(value, pointer, "initial_state(input)")

    def _agent(self, agent_id: str, agent: AgentSpec) -> Pipeline | None:
        base = f"/agents/{escape(agent_id)}"
        overrides = self.overrides.get(agent_id, {})

        def field(name: str, build: Callable[[], Any]) -> Any:
            return overrides[name] if name in overrides else build()

        initial_state = field(
            "initial_state", lambda: self._initial_state(agent, f"{base}/initial_state")
        )
        decide = field(
            "decide", lambda: self.callable_(agent.decide, f"{base}/decide", "decide(state, ctx)")
        )
        dry_run = field(
            "dry_run",
            lambda: (
                None
                if agent.dry_run is None
                else self.callable_(agent.dry_run, f"{base}/dry_run", "dry_run(state, ctx)")
            ),
        )
        reduce = field(
            "reduce",
            lambda: (
                None
                if agent.reduce is None
                else self.callable_(agent.reduce, f"{base}/reduce", "reduce(state, outcomes)")
            ),
        )
        inputs = self.schema(agent.input, f"{base}/input")
        result = self.schema(agent.result, f"{base}/result")
        tools: dict[str, Any] = {}
        for name, tool in agent.tools.items():
            built = self._tool(name, tool, f"{base}/tools/{escape(name)}")
            if not isinstance(built, McpTools):
                tools[name] = built
                continue
            for registered, each in built.tools.items():
                if registered in agent.tools or registered in tools:
                    self.definition_errors.append(
                        (
                            f"{base}/tools/{escape(name)}",
                            AgentDefinitionError(f"MCP tool {registered!r} is registered twice."),
                        )
                    )
                    each = _MISSING
                tools[registered] = each
        parts = [initial_state, decide, dry_run, reduce, inputs, result, *tools.values()]
        if any(part is _MISSING for part in parts):
            return None
        limits = {k: v for k, v in agent.limits.model_dump().items() if v is not None}
        if isinstance(limits.get("max_cost_usd"), float):
            # A YAML number: its shortest repr is what the file says (2.5, not 2.4999...).
            limits["max_cost_usd"] = repr(limits["max_cost_usd"])
        try:
            return define_agent(
                id=agent_id,
                name=agent.name,
                description=agent.description,
                implementation_version=agent.implementation_version,
                input_schema=inputs,
                result_schema=result,
                result_json_schema=agent.result_json_schema,
                initial_state=initial_state,
                decide=decide,
                dry_run=dry_run,
                reduce=reduce,
                tools=tools,
                limits=limits,
                pricing=self._pricing(),
            )
        except (AgentDefinitionError, PipelineDefinitionError) as exc:
            self.definition_errors.append((base, exc))
            return None

    def _step(self, item: StepSpec, pointer: str) -> Any:
        deps: dict[str, Any] = {
            "depends_on": item.depends_on,
            "optional_depends_on": item.optional_depends_on,
            "skip_after_failure_of": item.skip_after_failure_of,
            "name": item.name,
            "description": item.description,
        }
        skip = (
            None
            if item.skip is None
            else self.ref(item.skip, f"{pointer}/skip", "callable", "skip(inputs, ctx)")
        )
        dry_run: Any = item.dry_run
        if dry_run is not None and dry_run != "skip":
            dry_run = self.ref(dry_run, f"{pointer}/dry_run", "callable", "dry_run(inputs, ctx)")
        if item.run is not None:
            run = self.ref(item.run, f"{pointer}/run", "callable", "run(inputs, ctx)")
            output = None if item.output is None else self.schema(item.output, f"{pointer}/output")
            if _missing(run, skip, dry_run, output):
                return _MISSING
            return step(item.id, run, skip=skip, dry_run=dry_run, output_schema=output, **deps)
        if item.from_pipeline is not None:
            spec = item.from_pipeline
            where = f"{pointer}/from_pipeline"
            child = self.built.get(spec.pipeline)
            map_options = (
                None
                if spec.map_options is None
                else self.ref(
                    spec.map_options, f"{where}/map_options", "callable", "map_options(inputs, ctx)"
                )
            )
            map_result = (
                None
                if spec.map_result is None
                else self.ref(
                    spec.map_result, f"{where}/map_result", "callable", "map_result(result)"
                )
            )
            if child is None or _missing(map_options, map_result, skip):
                return _MISSING
            return from_pipeline(
                item.id,
                child,
                map_options=map_options,
                map_result=map_result,
                skip=skip,
                dry_run=dry_run,
                **deps,
            )
        assert item.for_each_pipeline is not None
        fan = item.for_each_pipeline
        where = f"{pointer}/for_each_pipeline"
        child = self.built.get(fan.pipeline)
        items = self.ref(fan.items, f"{where}/items", "callable", "items(inputs, ctx)")
        key = self.ref(fan.key, f"{where}/key", "callable", "key(item, index)")
        map_options = self.ref(
            fan.map_options,
            f"{where}/map_options",
            "callable",
            "map_options(item, index, inputs, ctx)",
        )
        map_result = (
            None
            if fan.map_result is None
            else self.ref(fan.map_result, f"{where}/map_result", "callable", "map_result(results)")
        )
        if child is None or _missing(items, key, map_options, map_result, skip):
            return _MISSING
        return for_each_pipeline(
            item.id,
            child,
            items=items,
            key=key,
            map_options=map_options,
            concurrency=fan.concurrency,
            map_result=map_result,
            skip=skip,
            dry_run=dry_run,
            **deps,
        )

    def _finalize(self, value: str | FinalizeSpec | None, pointer: str) -> Any:
        if value is None or isinstance(value, str):
            return value
        fn = (
            None
            if value.run is None
            else self.ref(value.run, f"{pointer}/run", "callable", "run(outputs, ctx)")
        )
        if fn is _MISSING:
            return _MISSING
        if value.require_outputs:
            return require_outputs(value.require_outputs, fn)
        return fn

    def _pipeline(self, pipeline_id: str, pipeline: PipelineSpec) -> Pipeline | None:
        base = f"/pipelines/{escape(pipeline_id)}"
        steps = [
            self._step(item, f"{base}/steps/{index}") for index, item in enumerate(pipeline.steps)
        ]
        options = None if pipeline.input is None else self.schema(pipeline.input, f"{base}/input")
        result = None if pipeline.result is None else self.schema(pipeline.result, f"{base}/result")
        finalize = self._finalize(pipeline.finalize, f"{base}/finalize")
        if any(part is _MISSING for part in (*steps, options, result, finalize)):
            return None
        assert all(isinstance(s, Step) for s in steps)
        try:
            return define_pipeline(
                id=pipeline_id,
                name=pipeline.name,
                description=pipeline.description,
                implementation_version=pipeline.implementation_version,
                steps=steps,
                options_schema=options,
                result_schema=result,
                targets=pipeline.targets,
                finalize=finalize,
            )
        except (PipelineDefinitionError, TemplateError) as exc:
            self.definition_errors.append((base, exc))
            return None


def _mcp_settings(spec: McpStdioServerSpec | McpHttpServerSpec) -> dict[str, Any]:
    """The settings every MCP server declaration has (none enters the definition identity)."""
    return {
        "timeout_s": spec.timeout_s,
        "per_run": spec.per_run,
        "max_concurrency": spec.max_concurrency,
        "max_result_bytes": spec.max_result_bytes,
        "max_result_blocks": spec.max_result_blocks,
    }
