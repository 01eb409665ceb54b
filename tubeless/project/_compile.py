"""Compiling a checked project spec into the runtime objects the Python API builds.

Every reference is resolved first and every problem collected (reported at the YAML location
that named it); only then are agents and pipelines built, each after the entries it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from tubeless.agent import Tool, define_agent, define_tool, pipeline_tool
from tubeless.errors import (
    DOCUMENT_INVALID,
    REFERENCE_INVALID,
    AgentDefinitionError,
    PipelineDefinitionError,
    TemplateError,
)
from tubeless.pipeline import (
    Pipeline,
    Step,
    define_pipeline,
    for_each_pipeline,
    from_pipeline,
    require_outputs,
    step,
)
from tubeless.project._references import ReferenceProblem, Resolver
from tubeless.project._semantics import composition_order, escape
from tubeless.project._templates import compile_template_mapping
from tubeless.project.spec import (
    AgentSpec,
    AgentToolSpec,
    FinalizeSpec,
    HandlerToolSpec,
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
        self.overrides = overrides or {}
        self.issues: list[_Issue] = []
        self.definition_errors: list[tuple[str, Exception]] = []
        self.built: dict[str, Pipeline] = {}
        self._check_overrides()

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
    def ref(self, reference: str, pointer: str, kind: Any) -> Any:
        try:
            return self.resolver.resolve(reference, kind)
        except ReferenceProblem as exc:
            self.issues.append((pointer, str(exc), REFERENCE_INVALID))
            return _MISSING

    def callable_(self, value: str | UseSpec, pointer: str) -> Any:
        if isinstance(value, str):
            return self.ref(value, pointer, "callable")
        factory = self.ref(value.use, f"{pointer}/use", "callable")
        if factory is _MISSING:
            return _MISSING
        try:
            made = factory(**value.with_)
        except Exception as exc:
            self.issues.append(
                (pointer, f"factory {value.use!r} failed: {type(exc).__name__}: {exc}",
                 REFERENCE_INVALID)
            )
            return _MISSING
        if not callable(made):
            kind = type(made).__name__
            article = "an" if kind[:1].lower() in "aeiou" else "a"
            self.issues.append(
                (pointer, f"factory {value.use!r} returned {article} {kind}, not a callable",
                 REFERENCE_INVALID)
            )
            return _MISSING
        return made

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
                    (pointer, f"{tool!r} is a {type(value).__name__}, not a tool; make it with "
                     "define_tool(...) or declare {run, description, input, output} here",
                     REFERENCE_INVALID)
                )
                return _MISSING
            return value
        if isinstance(tool, HandlerToolSpec):
            run = self.ref(tool.run, f"{pointer}/run", "callable")
            preview: Any = None
            if tool.preview == "run":
                preview = run
            elif tool.preview != "skip":
                preview = self.ref(tool.preview, f"{pointer}/preview", "callable")
            reconcile: Any = None
            if tool.reconcile is not None:
                reconcile = self.ref(tool.reconcile, f"{pointer}/reconcile", "callable")
            inputs = self.schema(tool.input, f"{pointer}/input")
            outputs = self.schema(tool.output, f"{pointer}/output")
            if _missing(run, preview, inputs, outputs, reconcile):
                return _MISSING
            try:
                return define_tool(description=tool.description, input_schema=inputs,
                                   output_schema=outputs, run=run, preview=preview,
                                   replay=tool.replay, reconcile=reconcile)
            except AgentDefinitionError as exc:
                self.definition_errors.append((pointer, exc))
                return _MISSING
        assert isinstance(tool, (PipelineToolSpec, AgentToolSpec))
        target = tool.pipeline if isinstance(tool, PipelineToolSpec) else tool.agent
        child = self.built.get(target)
        inputs = None if tool.input is None else self.schema(tool.input, f"{pointer}/input")
        mapper = (None if tool.map_options is None
                  else self.ref(tool.map_options, f"{pointer}/map_options", "callable"))
        if child is None or _missing(inputs, mapper):
            return _MISSING
        try:
            return pipeline_tool(child, description=tool.description, input_schema=inputs,
                                 map_options=mapper, replay=tool.replay)
        except AgentDefinitionError as exc:
            self.definition_errors.append((pointer, exc))
            return _MISSING

    def _initial_state(self, agent: AgentSpec, pointer: str) -> Any:
        value = agent.initial_state
        if isinstance(value, dict):
            render = compile_template_mapping(value, pointer)

            def from_template(validated: Any) -> Any:
                return render({"input": to_jsonable_python(validated)})

            return from_template
        return self.callable_(value, pointer)

    def _agent(self, agent_id: str, agent: AgentSpec) -> Pipeline | None:
        base = f"/agents/{escape(agent_id)}"
        overrides = self.overrides.get(agent_id, {})

        def field(name: str, build: Callable[[], Any]) -> Any:
            return overrides[name] if name in overrides else build()

        initial_state = field("initial_state", lambda: self._initial_state(
            agent, f"{base}/initial_state"))
        decide = field("decide", lambda: self.callable_(agent.decide, f"{base}/decide"))
        dry_run = field("dry_run", lambda: None if agent.dry_run is None
                        else self.callable_(agent.dry_run, f"{base}/dry_run"))
        reduce = field("reduce", lambda: None if agent.reduce is None
                       else self.callable_(agent.reduce, f"{base}/reduce"))
        inputs = self.schema(agent.input, f"{base}/input")
        result = self.schema(agent.result, f"{base}/result")
        tools = {name: self._tool(name, tool, f"{base}/tools/{escape(name)}")
                 for name, tool in agent.tools.items()}
        parts = [initial_state, decide, dry_run, reduce, inputs, result, *tools.values()]
        if any(part is _MISSING for part in parts):
            return None
        limits = {k: v for k, v in agent.limits.model_dump().items() if v is not None}
        try:
            return define_agent(
                id=agent_id, name=agent.name, description=agent.description,
                implementation_version=agent.implementation_version, input_schema=inputs,
                result_schema=result, result_json_schema=agent.result_json_schema,
                initial_state=initial_state, decide=decide, dry_run=dry_run, reduce=reduce,
                tools=tools, limits=limits,
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
        skip = None if item.skip is None else self.ref(item.skip, f"{pointer}/skip", "callable")
        dry_run: Any = item.dry_run
        if dry_run is not None and dry_run != "skip":
            dry_run = self.ref(dry_run, f"{pointer}/dry_run", "callable")
        if item.run is not None:
            run = self.ref(item.run, f"{pointer}/run", "callable")
            output = None if item.output is None else self.schema(item.output, f"{pointer}/output")
            if _missing(run, skip, dry_run, output):
                return _MISSING
            return step(item.id, run, skip=skip, dry_run=dry_run, output_schema=output, **deps)
        if item.from_pipeline is not None:
            spec = item.from_pipeline
            where = f"{pointer}/from_pipeline"
            child = self.built.get(spec.pipeline)
            map_options = (None if spec.map_options is None
                           else self.ref(spec.map_options, f"{where}/map_options", "callable"))
            map_result = (None if spec.map_result is None
                          else self.ref(spec.map_result, f"{where}/map_result", "callable"))
            if child is None or _missing(map_options, map_result, skip):
                return _MISSING
            return from_pipeline(item.id, child, map_options=map_options, map_result=map_result,
                                 skip=skip, dry_run=dry_run, **deps)
        assert item.for_each_pipeline is not None
        fan = item.for_each_pipeline
        where = f"{pointer}/for_each_pipeline"
        child = self.built.get(fan.pipeline)
        items = self.ref(fan.items, f"{where}/items", "callable")
        key = self.ref(fan.key, f"{where}/key", "callable")
        map_options = self.ref(fan.map_options, f"{where}/map_options", "callable")
        map_result = (None if fan.map_result is None
                      else self.ref(fan.map_result, f"{where}/map_result", "callable"))
        if child is None or _missing(items, key, map_options, map_result, skip):
            return _MISSING
        return for_each_pipeline(item.id, child, items=items, key=key, map_options=map_options,
                                 concurrency=fan.concurrency, map_result=map_result, skip=skip,
                                 dry_run=dry_run, **deps)

    def _finalize(self, value: str | FinalizeSpec | None, pointer: str) -> Any:
        if value is None or isinstance(value, str):
            return value
        fn = None if value.run is None else self.ref(value.run, f"{pointer}/run", "callable")
        if fn is _MISSING:
            return _MISSING
        if value.require_outputs:
            return require_outputs(value.require_outputs, fn)
        return fn

    def _pipeline(self, pipeline_id: str, pipeline: PipelineSpec) -> Pipeline | None:
        base = f"/pipelines/{escape(pipeline_id)}"
        steps = [self._step(item, f"{base}/steps/{index}")
                 for index, item in enumerate(pipeline.steps)]
        options = None if pipeline.input is None else self.schema(pipeline.input, f"{base}/input")
        result = None if pipeline.result is None else self.schema(pipeline.result,
                                                                 f"{base}/result")
        finalize = self._finalize(pipeline.finalize, f"{base}/finalize")
        if any(part is _MISSING for part in (*steps, options, result, finalize)):
            return None
        assert all(isinstance(s, Step) for s in steps)
        try:
            return define_pipeline(
                id=pipeline_id, name=pipeline.name, description=pipeline.description,
                implementation_version=pipeline.implementation_version, steps=steps,
                options_schema=options, result_schema=result, targets=pipeline.targets,
                finalize=finalize,
            )
        except (PipelineDefinitionError, TemplateError) as exc:
            self.definition_errors.append((base, exc))
            return None
