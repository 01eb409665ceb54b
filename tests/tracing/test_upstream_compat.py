"""Traces the original release can read, and golden records in its shape that we read.

The fixtures in ``fixtures/upstream/`` were written by hand from UPSTREAM.md §2 (a plain run, a
fan-out with a failed item, and an agent run with two turns and one tool call); only their
fingerprints were computed, by the original algorithm. ``_upstream_shape`` is an independent
check of the original shape (UPSTREAM §1.12, §2.3) that every record our shipped projects write
must pass, fingerprints included.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest

from tests.tracing._upstream_shape import original_fingerprint, problems, snapshot_problems
from tubeless import (
    define_pipeline,
    for_each_pipeline,
    from_pipeline,
    iterate_pipeline,
    require_outputs,
    step,
)
from tubeless.pipeline import Pipeline
from tubeless.pipeline._identity import descriptor_fingerprint, js_json
from tubeless.project import load_project
from tubeless.testing import capture_trace
from tubeless.tracing import RunTree, SqliteSink, TraceReadError, read_trace, run_trees
from tubeless.tracing.reader import write_trace

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "upstream"
ROOT = HERE.parents[1]
PROJECTS = sorted((ROOT / "projects").glob("*.yaml"))
#: Projects whose entry asks a model: only their dry run is recorded (no request, no key).
NEEDS_A_MODEL = {"openai-agent.yaml"}

Records = list[dict[str, Any]]


def _fixture(name: str) -> Records:
    with (FIXTURES / name).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def _shape(tree: RunTree) -> tuple[Any, ...]:
    """A run tree as nested tuples: what a reader of the fixture must see."""
    return (
        tree.pipeline_id,
        tree.item_key,
        tree.status,
        tree.error_code,
        tuple((s.id, s.status, s.reason, s.error_code, s.source_code) for s in tree.steps),
        tuple(_shape(child) for child in tree.children),
    )


# -- golden records in the original shape -----------------------------------------------------
@pytest.mark.parametrize("name", ["plain.ndjson", "fanout.ndjson", "agent.ndjson"])
def test_golden_fixtures_have_the_original_shape(name: str) -> None:
    """The hand-written fixtures pass the original-shape check, fingerprints recomputed."""
    records = _fixture(name)
    assert [p for record in records for p in problems(record)] == []
    assert sum("definitionSnapshot" in r["payload"] for r in records) == 1


@pytest.mark.parametrize("name", ["plain.ndjson", "fanout.ndjson", "agent.ndjson"])
def test_golden_fixtures_read_back_from_ndjson_and_sqlite(name: str, tmp_path: Path) -> None:
    records = read_trace(FIXTURES / name)
    assert records == _fixture(name)
    assert write_trace(records, tmp_path / "copy.sqlite") == len(records)
    assert read_trace(tmp_path / "copy.sqlite") == records


def test_reader_projects_the_plain_run() -> None:
    [tree] = run_trees(read_trace(FIXTURES / "plain.ndjson"))
    assert _shape(tree) == (
        "greeting",
        None,
        "completed",
        None,
        (
            ("load", "completed", None, None, None),
            ("greet", "completed", None, None, None),
            ("audit", "skipped", "policy", None, None),
        ),
        (),
    )
    assert tree.duration_ms == 9.75
    assert tree.agent is None


def test_reader_projects_the_fan_out_with_its_failed_item() -> None:
    [tree] = run_trees(read_trace(FIXTURES / "fanout.ndjson"))
    assert _shape(tree) == (
        "shout-all",
        None,
        "failed",
        "TUBELESS_CHILD_FAILED",
        (
            ("words", "completed", None, None, None),
            ("shout", "failed", None, "TUBELESS_CHILD_FAILED", "NO_VOWELS"),
        ),
        (
            (
                "shout-word",
                "red",
                "completed",
                None,
                (("upper", "completed", None, None, None),),
                (),
            ),
            (
                "shout-word",
                "blue",
                "failed",
                "TUBELESS_STEP_FAILED",
                (("upper", "failed", None, "TUBELESS_STEP_FAILED", "NO_VOWELS"),),
                (),
            ),
        ),
    )


def test_reader_projects_the_agent_turns_calls_limits_and_tools() -> None:
    [tree] = run_trees(read_trace(FIXTURES / "agent.ndjson"))
    agent = tree.agent
    assert agent is not None
    assert agent.termination == "finish"
    assert dict(agent.limits or {}) == {
        "max_turns": 3,
        "max_calls": 10,
        "max_decisions": 5,
        "max_depth": 2,
        "max_concurrency": 1,
    }
    assert agent.capabilities == ("echo",)
    assert [
        (t.index, t.decision, t.state_version, [(c.call_id, c.tool, c.status) for c in t.calls])
        for t in agent.turns
    ] == [(1, "continue", 0, [("say-hi", "echo", "completed")]), (2, "finish", 1, [])]


def test_reader_still_reads_limits_and_tools_from_the_earlier_tubeless_snapshot() -> None:
    """Traces written before the snapshot took the original shape still show limits and tools."""
    records = _fixture("agent.ndjson")
    snapshot = records[0]["payload"]["definitionSnapshot"]
    [agent_step] = snapshot["steps"]
    agent_step["agent"] = {
        "limits": agent_step["agent"]["limits"],
        "capabilities": [{"name": "echo", "description": "Repeat.", "inputJsonSchema": {}}],
        "inputSchema": "sha256:" + "0" * 64,
        "resultJsonSchema": {"type": "string"},
        "turnPipelineId": "helper/turn",
    }
    agent_step["capabilities"] = [{"version": 1, "structuralFingerprint": "sha256:" + "1" * 64}]
    snapshot["finalizer"] = "step"
    [tree] = run_trees(records)
    assert tree.agent is not None
    assert tree.agent.capabilities == ("echo",)
    assert tree.agent.limits is not None and tree.agent.limits["max_turns"] == 3


def test_golden_fixtures_match_our_record_schema() -> None:
    """``record.schema.json`` describes the original shape too (snapshot included)."""
    text = resources.files("tubeless.tracing").joinpath("record.schema.json").read_text("utf-8")
    validator = jsonschema.Draft202012Validator(json.loads(text))
    for name in ("plain.ndjson", "fanout.ndjson", "agent.ndjson"):
        for index, record in enumerate(_fixture(name)):
            assert [e.message for e in validator.iter_errors(record)] == [], f"{name} #{index}"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(1.0, "1", id="integral-float"),
        pytest.param(-0.0, "0", id="negative-zero"),
        pytest.param(0.5, "0.5", id="half"),
        pytest.param(1e21, "1e+21", id="exponent-21"),
        pytest.param(1.5e20, "150000000000000000000", id="below-1e21"),
        pytest.param(1.2345678901234567e20, "123456789012345670000", id="shortest-digits"),
        pytest.param(-3.0, "-3", id="negative-integral"),
        pytest.param(1e-7, "1e-7", id="small-exponent"),
        pytest.param(-2.5e-8, "-2.5e-8", id="negative-small"),
        pytest.param(0.000001, "0.000001", id="six-places"),
        pytest.param(123.456, "123.456", id="plain-decimal"),
        pytest.param(1.5e300, "1.5e+300", id="large"),
        pytest.param(
            {"b": 1, "10": 2, "2": 3, "a": [True, None]},
            '{"2":3,"10":2,"b":1,"a":[true,null]}',
            id="index-keys-first",
        ),
        pytest.param({"01": 1, "1": 2}, '{"1":2,"01":1}', id="only-canonical-indexes"),
        pytest.param("é\n\u0001\ud800", '"é\\n\\u0001\\ud800"', id="string-escapes"),
    ],
)
def test_fingerprints_hash_what_json_stringify_writes(value: Any, text: str) -> None:
    """The definition fingerprints hash JavaScript's JSON.stringify text (UPSTREAM §1.12)."""
    assert js_json(value) == text


def test_descriptor_keys_are_sorted_as_javascript_sorts_strings() -> None:
    """UTF-16 code units: an astral character sorts before U+FF61, unlike code points."""
    text = '{"\U0001f600":2,"\uff61":1}'
    expected = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert descriptor_fingerprint({"\uff61": 1, "\U0001f600": 2}) == expected


# -- what the reader rejects, as the original does --------------------------------------------
def _first(records: Records, name: str, **match: Any) -> dict[str, Any]:
    return next(
        r for r in records if r["name"] == name and all(r.get(k) == v for k, v in match.items())
    )


def _turn_record(records: Records) -> dict[str, Any]:
    return next(r for r in records if "iteration" in r)


def _fan_out(records: Records) -> dict[str, Any]:
    fan_out: dict[str, Any] = _first(records, "step.failed", stepId="shout")["error"]["fanOut"]
    return fan_out


def _deep_cause(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"message": "bottom", "name": "Error"}
    for _ in range(depth - 1):
        node = {"message": "wrapped", "name": "Error", "cause": node}
    return node


REJECTED: list[Any] = [
    pytest.param(
        "agent.ndjson",
        lambda rs: _turn_record(rs)["iteration"].update(runId="helper:someone-else"),
        "'iteration.runId' must equal 'parentRunId'",
        id="iteration-of-another-run",
    ),
    pytest.param(
        "agent.ndjson",
        lambda rs: _turn_record(rs)["iteration"].update(index=0),
        "'iteration.index' must be an integer >= 1, got 0",
        id="iteration-index-0",
    ),
    pytest.param(
        "agent.ndjson",
        lambda rs: _turn_record(rs)["iteration"].update(index="1"),
        "'iteration.index' must be an integer >= 1, got '1'",
        id="iteration-index-text",
    ),
    pytest.param(
        "agent.ndjson",
        lambda rs: _turn_record(rs)["iteration"].pop("attemptId"),
        "'iteration' must have exactly runId, stepId, attemptId and index",
        id="iteration-without-attempt",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: _first(rs, "pipeline.completed")["payload"].update(status="running"),
        "payload 'status' must be 'completed', 'failed' or 'cancelled', got 'running'",
        id="completed-running",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: _first(rs, "pipeline.completed")["payload"].pop("status"),
        "payload 'status' must be 'completed', 'failed' or 'cancelled', got None",
        id="completed-without-status",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: _first(rs, "step.planned", stepId="greet")["payload"].update(
            dependencies="load"
        ),
        "payload 'dependencies' must be a list of step ids, got 'load'",
        id="dependencies-string",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: _first(rs, "step.planned", stepId="greet")["payload"].update(
            optionalDependencies=[1]
        ),
        "payload 'optionalDependencies' must be a list of step ids, got [1]",
        id="optional-dependencies-numbers",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: _first(rs, "step.planned", stepId="load")["payload"].pop("skipAfterFailureOf"),
        "payload 'skipAfterFailureOf' must be a list of step ids, got None",
        id="gates-missing",
    ),
    pytest.param(
        "plain.ndjson",
        lambda rs: rs[0]["payload"]["definitionSnapshot"]["identity"].update(version=2),
        "payload 'definitionSnapshot' must be an object carrying the same identity as "
        "'definitionIdentity'",
        id="snapshot-of-another-identity",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _first(rs, "step.failed", stepId="shout")["error"].update(
            issues=[{"message": "bad", "path": [{"at": 1}]}]
        ),
        "error: 'issues' must be {message, path?} objects whose paths hold strings and finite "
        "numbers",
        id="issue-path-object",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs).update(failures={"index": 1}),
        "error.fanOut: 'failures' must be a list of at most 32 items",
        id="fan-out-failures-object",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs).update(failures=_fan_out(rs)["failures"] * 33, failureCount=33),
        "error.fanOut: 'failures' must be a list of at most 32 items",
        id="fan-out-33-failures",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs).update(omittedFailureCount=2),
        "error.fanOut: 'omittedFailureCount' must be failureCount - len(failures) = 0, got 2",
        id="fan-out-omitted-count",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs).pop("failureCount"),
        "error.fanOut: 'failureCount' must be an integer >= 0",
        id="fan-out-without-count",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs)["failures"][0].update(key="k" * 1025),
        "error.fanOut.failures[0]: 'key' must be a string of at most 1024 characters",
        id="fan-out-long-key",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs)["failures"][0].update(cancelled="no"),
        "error.fanOut.failures[0]: 'cancelled' must be a boolean",
        id="fan-out-cancelled-text",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs)["failures"][0].update(index=-1),
        "error.fanOut.failures[0]: 'index' must be an integer >= 0",
        id="fan-out-negative-index",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs)["failures"][0].update(error=_deep_cause(9)),
        "error.fanOut.failures[0]: 'error' must be a cause chain of at most 8 levels",
        id="fan-out-deep-cause",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _fan_out(rs)["failures"][0].update(stack="at x"),
        "error.fanOut.failures[0]: unexpected key 'stack'",
        id="fan-out-stack",
    ),
    pytest.param(
        "fanout.ndjson",
        lambda rs: _first(rs, "step.failed", stepId="shout")["error"].update(cause=_deep_cause(16)),
        "error: 'cause' must be a cause chain of at most 15 levels",
        id="cause-16-deep",
    ),
]


@pytest.mark.parametrize(("name", "spoil", "message"), REJECTED)
@pytest.mark.parametrize("storage", ["ndjson", "sqlite"])
def test_reader_rejects_what_the_original_rejects(
    name: str, spoil: Any, message: str, storage: str, tmp_path: Path
) -> None:
    records = _fixture(name)
    spoil(records)
    bad = next(i for i, (r, o) in enumerate(zip(records, _fixture(name), strict=True)) if r != o)
    if storage == "ndjson":
        path = tmp_path / "spoiled.ndjson"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        where = f"{path}:{bad + 1}: not a trace record: "
    else:
        path = tmp_path / "spoiled.sqlite"
        with SqliteSink(path) as sink:
            for record in records:
                sink.export(record)
        where = f"{path}: row {bad + 1}: not a trace record: "
    with pytest.raises(TraceReadError) as caught:
        read_trace(path)
    assert caught.value.code == "TUBELESS_TRACE_INVALID"
    assert str(caught.value).startswith(where + records[bad]["name"] + ": ")
    assert message in str(caught.value)


# -- what our writer writes -------------------------------------------------------------------
def _project_records(path: Path, *, dry_run: bool) -> Records:
    entry = load_project(path).entry()
    with capture_trace() as trace:
        asyncio.run(entry.run({}, dry_run=dry_run, trace=trace))
    return list(trace.records)


@pytest.mark.parametrize("path", PROJECTS, ids=[p.name for p in PROJECTS])
def test_shipped_projects_write_records_the_original_release_reads(path: Path) -> None:
    """Every record of a live and a dry run has the original shape; fingerprints recompute."""
    runs = [True] if path.name in NEEDS_A_MODEL else [False, True]
    for dry_run in runs:
        records = _project_records(path, dry_run=dry_run)
        found = [f"#{i} {p}" for i, record in enumerate(records) for p in problems(record)]
        assert found == [], f"dry_run={dry_run}"
        snapshots = [r for r in records if "definitionSnapshot" in r["payload"]]
        assert snapshots and snapshots[0] is records[0]


def _double() -> Pipeline:
    return define_pipeline(
        id="double", options_schema=int, steps=[step("double", lambda i, ctx: ctx.options * 2)]
    )


def _fan_out_pipeline() -> Pipeline:
    """The fan-out of docs/pipelines.md."""
    return define_pipeline(
        id="fan-out",
        steps=[
            for_each_pipeline(
                "doubled",
                _double(),
                items=lambda inputs, ctx: ctx.options,
                key=lambda item, index: f"item-{index}",
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=3,
            )
        ],
    )


def _grow_pipeline() -> Pipeline:
    """The iteration of docs/pipelines.md."""
    return define_pipeline(
        id="grow",
        steps=[
            iterate_pipeline(
                "until-100",
                _double(),
                max_iterations=10,
                initial_state=lambda inputs, ctx: 3,
                map_options=lambda state, inputs, ctx: state,
                transition=lambda result, state, ctx: (
                    {"kind": "finish", "result": result}
                    if result >= 100
                    else {"kind": "next", "state": result}
                ),
            )
        ],
    )


def _single_parent() -> Pipeline:
    child = define_pipeline(id="child", steps=[step("x", _noop)], implementation_version="7")
    return define_pipeline(
        id="single-parent",
        steps=[step("a", _noop), from_pipeline("b", child, depends_on="a")],
    )


class _Topic(pydantic.BaseModel):
    topic: str = "tubeless"


def _with_schemas(result: Any = dict[str, Any]) -> Pipeline:
    """Options, result and output schemas, a required output, a composed step of them."""
    child = define_pipeline(
        id="shaped-child",
        options_schema=_Topic,
        result_schema=str,
        steps=[step("say", lambda i, ctx: ctx.options.topic, output_schema=str)],
    )
    return define_pipeline(
        id="shaped",
        options_schema=_Topic,
        result_schema=result,
        implementation_version="shaped-1",
        steps=[
            step("load", lambda i, ctx: {"n": 1}, output_schema=dict[str, int]),
            from_pipeline("child", child, depends_on="load"),
        ],
        finalize=require_outputs(["load"], lambda outputs, ctx: dict(outputs["load"])),
    )


BUILT: list[Any] = [
    pytest.param(_fan_out_pipeline, [1, 2, 3], id="fan-out"),
    pytest.param(_grow_pipeline, None, id="grow"),
    pytest.param(_single_parent, None, id="single-parent"),
    pytest.param(_with_schemas, {}, id="with-schemas"),
]


@pytest.mark.parametrize(("build", "value"), BUILT)
@pytest.mark.parametrize("dry_run", [False, True])
def test_composed_and_schema_definitions_write_records_the_original_release_reads(
    build: Any, value: Any, dry_run: bool
) -> None:
    """The original's reader recomputes both fingerprints of a composed step and of schemas."""
    pipeline = build()
    with capture_trace() as trace:
        run = asyncio.run(pipeline.run(value, dry_run=dry_run, trace=trace))
    assert run.ok, run.errors
    records = list(trace.records)
    found = [f"#{i} {p}" for i, record in enumerate(records) for p in problems(record)]
    assert found == []
    assert records[0]["payload"]["definitionSnapshot"]["identity"] == pipeline.identity.to_wire()


def test_schemas_enter_the_definition_metadata_and_a_schema_change_changes_the_identity() -> None:
    """Schema fingerprints sit in the snapshot's ``metadata`` (identity version 3), where the
    original hashes and verifies them; a schema change changes both fingerprints."""
    shaped, reshaped = _with_schemas(), _with_schemas(result=dict[str, str])
    snapshot = shaped.definition_snapshot()
    assert snapshot["identity"]["version"] == 3
    assert list(snapshot)[:2] == ["identity", "metadata"]
    assert sorted(snapshot["metadata"]) == [
        "finalizer",
        "optionsSchemaFingerprint",
        "outputSchemaFingerprints",
        "resultSchemaFingerprint",
    ]
    assert list(snapshot["metadata"]["outputSchemaFingerprints"]) == ["load"]
    child = snapshot["steps"][1]["nestedPipeline"]["identity"]
    assert child["version"] == 3  # the child has schemas of its own
    assert snapshot_problems(snapshot, snapshot["identity"]) == []
    other = reshaped.definition_snapshot()
    assert snapshot_problems(other, other["identity"]) == []
    before = snapshot["metadata"]["resultSchemaFingerprint"]
    assert other["metadata"]["resultSchemaFingerprint"] != before
    assert reshaped.identity.structural_fingerprint != shaped.identity.structural_fingerprint
    assert reshaped.identity.definition_id != shaped.identity.definition_id
    plain = _single_parent().definition_snapshot()
    assert "metadata" not in plain and plain["identity"]["version"] == 1


def test_agent_snapshot_has_tool_fingerprints_and_identities_and_child_step_ids() -> None:
    records = _project_records(ROOT / "projects" / "scripted-agent.yaml", dry_run=False)
    snapshot = records[0]["payload"]["definitionSnapshot"]
    [agent_step] = snapshot["steps"]
    nested = agent_step["nestedPipeline"]
    assert nested["stepIds"] == ["decide", "calls", "reduce"]
    assert nested["identity"]["definitionId"].startswith("sha256:")
    assert list(agent_step["agent"]) == ["limits", "capabilities", "resultSchemaFingerprint"]
    assert [list(c) for c in agent_step["agent"]["capabilities"]] == [
        ["name", "description", "inputSchemaFingerprint", "identity"]
    ] * 2
    tool_runs = {
        r["pipelineId"]: r["payload"]["definitionIdentity"]
        for r in records
        if r["name"] == "pipeline.started" and "/tool/" in r["pipelineId"]
    }
    assert {
        f"scripted-agent/tool/{c['name']}": c["identity"]
        for c in agent_step["agent"]["capabilities"]
    } == tool_runs
    assert "requiredFinalizerStepIds" in snapshot  # the agent step finalizes the agent
    plain = _project_records(ROOT / "projects" / "text-pipeline.yaml", dry_run=False)
    assert "requiredFinalizerStepIds" not in plain[0]["payload"]["definitionSnapshot"]


def _noop(inputs: Any, ctx: Any) -> None:
    return None


def test_definition_id_is_the_original_one_where_the_definition_has_no_schemas() -> None:
    """Without schemas (which the original cannot fingerprint), both algorithms agree."""
    child = define_pipeline(id="child", steps=[step("x", _noop)], implementation_version="7")
    parent = define_pipeline(
        id="parent", steps=[step("a", _noop), from_pipeline("b", child, depends_on="a")]
    )
    kid = child.identity
    assert kid.definition_id == original_fingerprint(
        {
            "version": 1,
            "structuralFingerprint": kid.structural_fingerprint,
            "implementationVersion": "7",
            "children": [None],
        }
    )
    full_child = {
        "version": 1,
        "structuralFingerprint": kid.structural_fingerprint,
        "implementationVersion": "7",
        "definitionId": kid.definition_id,
    }
    assert parent.identity.definition_id == original_fingerprint(
        {
            "version": 1,
            "structuralFingerprint": parent.identity.structural_fingerprint,
            "children": [None, full_child],
        }
    )


def test_descriptor_fingerprints_hash_the_canonical_descriptor() -> None:
    """A tool's inputSchemaFingerprint is sha256 of its descriptor with keys sorted."""
    records = _project_records(ROOT / "projects" / "scripted-agent.yaml", dry_run=True)
    [agent_step] = records[0]["payload"]["definitionSnapshot"]["steps"]
    entry = load_project(ROOT / "projects" / "scripted-agent.yaml").entry()
    descriptor = entry.get_step("agent").agent["resultJsonSchema"]  # type: ignore[index]
    text = json.dumps(descriptor, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert agent_step["agent"]["resultSchemaFingerprint"] == expected


# -- the SQLite layout ------------------------------------------------------------------------
#: A new store's indexes: the original's (run_id, id) alone (see docs/traces.md).
_INDEXES = {"pipeline_run_events_run_id_idx": ["run_id", "id"]}
#: The original's other two, which a store written by the original or by earlier tubeless has.
_UPSTREAM_DESC = {
    "pipeline_run_events_pipeline_id_idx": ["pipeline_id", "id"],
    "pipeline_run_events_timestamp_idx": ["timestamp_ms"],
}


def _indexes(path: Path) -> dict[str, list[str]]:
    with sqlite3.connect(path) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        ]
        return {
            name: [row[2] for row in conn.execute(f"PRAGMA index_info({name})")] for name in names
        }


def _old_layout_store(path: Path) -> None:
    """A store as earlier tubeless wrote it: the original's (pipeline_id, id DESC), the timestamp
    index under its old name, and an index on (parent_run_id, id) that the original does not
    define; and without the (run_id, id) index."""
    write_trace(_fixture("plain.ndjson"), path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP INDEX pipeline_run_events_run_id_idx")
        conn.execute(
            "CREATE INDEX pipeline_run_events_pipeline_id_idx"
            " ON pipeline_run_events (pipeline_id, id DESC)"
        )
        conn.execute(
            "CREATE INDEX pipeline_run_events_parent_run_id_idx"
            " ON pipeline_run_events (parent_run_id, id)"
        )
        conn.execute(
            "CREATE INDEX pipeline_run_events_timestamp_ms_idx"
            " ON pipeline_run_events (timestamp_ms DESC)"
        )
    conn.close()


def test_a_new_store_has_the_upstream_run_index(tmp_path: Path) -> None:
    write_trace(_fixture("plain.ndjson"), tmp_path / "new.sqlite")
    assert _indexes(tmp_path / "new.sqlite") == _INDEXES


def test_opening_an_older_store_for_writing_gives_it_the_run_index(tmp_path: Path) -> None:
    """The run index is added, what only earlier tubeless added is dropped, and the original's
    (pipeline_id, id DESC) stays: a store keeps the original's indexes it has."""
    path = tmp_path / "old.sqlite"
    _old_layout_store(path)
    with SqliteSink(path) as sink:
        sink.export(copy.deepcopy(_fixture("plain.ndjson")[0]))
    pipeline = "pipeline_run_events_pipeline_id_idx"
    assert _indexes(path) == {**_INDEXES, pipeline: _UPSTREAM_DESC[pipeline]}
    assert len(read_trace(path)) == len(_fixture("plain.ndjson")) + 1


def test_a_store_with_all_the_original_indexes_keeps_them_and_takes_records(
    tmp_path: Path,
) -> None:
    path = tmp_path / "upstream.sqlite"
    write_trace(_fixture("plain.ndjson"), path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE INDEX pipeline_run_events_pipeline_id_idx"
            " ON pipeline_run_events (pipeline_id, id DESC)"
        )
        conn.execute(
            "CREATE INDEX pipeline_run_events_timestamp_idx"
            " ON pipeline_run_events (timestamp_ms DESC)"
        )
    conn.close()
    extra = copy.deepcopy(_fixture("plain.ndjson"))
    with SqliteSink(path) as sink:
        for record in extra:
            sink.export(record)
    assert _indexes(path) == {**_INDEXES, **_UPSTREAM_DESC}
    assert read_trace(path) == _fixture("plain.ndjson") + extra
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_reading_an_older_store_read_only_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _old_layout_store(path)
    before = _indexes(path)
    path.chmod(0o444)
    try:
        assert read_trace(path) == _fixture("plain.ndjson")
    finally:
        path.chmod(0o644)
    assert _indexes(path) == before
    assert "pipeline_run_events_parent_run_id_idx" in before
