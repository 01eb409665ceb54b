"""Opt-in workspace tools ``read``, ``list`` and ``search`` (UPSTREAM §4.14, DESIGN §3)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tubeless import errors as codes
from tubeless.agent import Tool, define_agent
from tubeless.agent.builtin import (
    ListInput,
    ReadInput,
    SearchInput,
    list_dir,
    read,
    search,
    workspace_tools,
)
from tubeless.frozen import thaw
from tubeless.schema import SchemaValidationError
from tubeless.testing import CapturedTrace, call, capture_trace, continue_with, finish, scripted

NEEDLE = "needle"
KIB = 1024


def _keep(state: Any, outcomes: Any) -> dict[str, Any]:
    return {"outcomes": [*state["outcomes"], *outcomes]}


def _probe(tools: Mapping[str, Tool], tool: str, args: Any) -> Any:
    """An agent that makes one call, then finishes with every outcome it saw."""

    def source() -> Any:
        return scripted(
            continue_with(call(tool, args)),
            lambda state, ctx: finish(state["outcomes"]),
        )

    return define_agent(
        id="probe",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda _: {"outcomes": []},
        decide=source(),
        dry_run=source(),
        reduce=_keep,
        tools=tools,
    )


async def _outcome(
    root: Path | None,
    tool: str,
    args: Any,
    *,
    dry_run: bool = False,
    trace: CapturedTrace | None = None,
) -> dict[str, Any]:
    """The outcome of one call of a workspace tool, run through an agent."""
    run = await _probe(workspace_tools(root), tool, args).run({}, dry_run=dry_run, trace=trace)
    assert run.status == "completed", run.errors
    (outcome,) = thaw(run.value)
    assert isinstance(outcome, dict)
    return outcome


async def _value(root: Path | None, tool: str, args: Any) -> dict[str, Any]:
    outcome = await _outcome(root, tool, args)
    assert outcome["ok"], outcome
    value: dict[str, Any] = outcome["value"]
    return value


async def _error(root: Path | None, tool: str, args: Any) -> dict[str, str]:
    outcome = await _outcome(root, tool, args)
    assert not outcome["ok"], outcome
    error: dict[str, str] = outcome["error"]
    return error


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


FIVE_LINES = "one\ntwo\nthree\nfour\nfive\n"

# -- read ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "content", "start", "end"),
    [
        pytest.param({}, FIVE_LINES, 1, 5, id="defaults-read-everything"),
        pytest.param({"start_line": None, "max_lines": None}, FIVE_LINES, 1, 5, id="nulls"),
        pytest.param({"start_line": 2, "max_lines": 2}, "two\nthree\n", 2, 3, id="window"),
        pytest.param({"start_line": 5, "max_lines": 10}, "five\n", 5, 5, id="last-line"),
        pytest.param({"start_line": 6}, "", 6, 5, id="past-the-end-is-empty"),
        pytest.param({"max_lines": 1}, "one\n", 1, 1, id="one-line"),
    ],
)
async def test_read_returns_the_requested_window_of_lines(
    tmp_path: Path, args: dict[str, Any], content: str, start: int, end: int
) -> None:
    _write(tmp_path / "five.txt", FIVE_LINES)

    value = await _value(tmp_path, "read", {"path": "five.txt", **args})

    assert value == {
        "path": "five.txt",
        "content": content,
        "start_line": start,
        "end_line": end,
        "total_lines": 5,
        "truncated": False,
    }


@pytest.mark.parametrize(
    ("text", "total"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("a\nb", 2, id="last-line-without-newline"),
        pytest.param("a\r\nb\r\n", 2, id="crlf"),
        pytest.param("a\fb\u2028c\n", 1, id="only-newline-ends-a-line"),
    ],
)
async def test_read_counts_lines_ended_by_newlines(tmp_path: Path, text: str, total: int) -> None:
    _write(tmp_path / "f.txt", text)

    value = await _value(tmp_path, "read", {"path": "f.txt"})

    assert (value["content"], value["total_lines"], value["end_line"]) == (text, total, total)


async def test_read_returns_200_lines_by_default(tmp_path: Path) -> None:
    _write(tmp_path / "long.txt", "".join(f"line {n}\n" for n in range(1, 301)))

    value = await _value(tmp_path, "read", {"path": "long.txt"})

    assert value["content"].splitlines()[-1] == "line 200"
    assert (value["end_line"], value["total_lines"], value["truncated"]) == (200, 300, False)


async def test_read_caps_content_at_16_kib_at_a_line_boundary(tmp_path: Path) -> None:
    _write(tmp_path / "wide.txt", ("x" * 99 + "\n") * 1000)  # 100 bytes per line

    value = await _value(tmp_path, "read", {"path": "wide.txt", "max_lines": 2000})

    assert len(value["content"].encode()) == 16300  # 163 whole lines; a 164th would pass 16 KiB
    assert (value["end_line"], value["total_lines"], value["truncated"]) == (163, 1000, True)


async def test_read_cuts_a_single_line_longer_than_16_kib_at_a_character(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "one.txt", "é" * 20_000 + "\nnext\n")

    value = await _value(tmp_path, "read", {"path": "one.txt"})

    assert value["content"] == "é" * (16 * KIB // 2)
    assert (value["end_line"], value["truncated"]) == (1, True)


async def test_read_accepts_absolute_paths_outside_the_root(tmp_path: Path) -> None:
    """The root is where relative paths start, not a sandbox."""
    outside = _write(tmp_path / "outside" / "o.txt", "out\n")
    (tmp_path / "root").mkdir()

    absolute = await _value(tmp_path / "root", "read", {"path": str(outside)})
    dotted = await _value(tmp_path / "root", "read", {"path": "../outside/o.txt"})

    assert absolute["content"] == dotted["content"] == "out\n"
    assert absolute["path"] == dotted["path"] == str(outside)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("setup", "path", "code"),
    [
        pytest.param(None, "missing.txt", "ENOENT", id="missing"),
        pytest.param(lambda p: (p / "d").mkdir(), "d", "EISDIR", id="directory"),
        pytest.param(lambda p: _write(p / "f", "x"), "f/inner", "ENOTDIR", id="through-a-file"),
        pytest.param(lambda p: _fifo(p / "pipe"), "pipe", "EINVAL", id="fifo"),
        pytest.param(lambda p: _write(p / "b", b"SECRET\0x"), "b", "EINVAL", id="nul-byte"),
        pytest.param(lambda p: _write(p / "b", b"SECRET\xff"), "b", "EINVAL", id="not-utf8"),
        pytest.param(
            lambda p: _write(p / "big", "SECRET\n" * (150 * KIB)), "big", "EINVAL", id="over-1-mib"
        ),
        pytest.param(None, "bad\0name", "EINVAL", id="nul-in-path"),
    ],
)
async def test_read_turns_filesystem_problems_into_recoverable_tool_errors(
    tmp_path: Path, setup: Any, path: str, code: str
) -> None:
    if setup is not None:
        setup(tmp_path)

    error = await _error(tmp_path, "read", {"path": path})

    assert error["code"] == code
    assert "SECRET" not in error["message"]
    assert json.dumps(path) in error["message"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
async def test_read_reports_eacces_for_an_unreadable_file(tmp_path: Path) -> None:
    _write(tmp_path / "locked.txt", "x").chmod(0)

    assert (await _error(tmp_path, "read", {"path": "locked.txt"}))["code"] == "EACCES"


async def test_read_accepts_a_file_of_exactly_1_mib(tmp_path: Path) -> None:
    _write(tmp_path / "edge.txt", ("y" * 1023 + "\n") * KIB)

    value = await _value(tmp_path, "read", {"path": "edge.txt", "max_lines": 1})

    assert (value["total_lines"], value["end_line"]) == (KIB, 1)


# -- input schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        pytest.param(read, {"path": "a", "start_line": 0}, id="read-start_line-0"),
        pytest.param(read, {"path": "a", "max_lines": 0}, id="read-max_lines-0"),
        pytest.param(read, {"path": "a", "max_lines": 2001}, id="read-max_lines-2001"),
        pytest.param(read, {"path": "a", "start_line": "2"}, id="read-start_line-string"),
        pytest.param(read, {"path": "a", "max_lines": True}, id="read-max_lines-bool"),
        pytest.param(read, {"path": ""}, id="read-empty-path"),
        pytest.param(read, {"path": "p" * 4097}, id="read-path-over-4096"),
        pytest.param(read, {"path": None}, id="read-path-null"),
        pytest.param(read, {}, id="read-path-missing"),
        pytest.param(read, {"path": "a", "extra": 1}, id="read-extra-key"),
        pytest.param(list_dir, {"path": "p" * 4097}, id="list-path-over-4096"),
        pytest.param(list_dir, {"recursive": True}, id="list-extra-key"),
        pytest.param(search, {"query": ""}, id="search-empty-query"),
        pytest.param(search, {"query": "q" * 4097}, id="search-query-over-4096"),
        pytest.param(search, {"path": "."}, id="search-query-missing"),
    ],
)
def test_input_schemas_reject_out_of_bounds_arguments(tool: Tool, args: dict[str, Any]) -> None:
    assert tool.input_schema is not None
    with pytest.raises(SchemaValidationError):
        tool.input_schema.validate(args)


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        pytest.param(read, {"path": "a"}, ReadInput(path="a", start_line=1, max_lines=200),
                     id="read-omitted"),
        pytest.param(read, {"path": "a", "start_line": None, "max_lines": None},
                     ReadInput(path="a", start_line=1, max_lines=200), id="read-null"),
        pytest.param(read, {"path": "a", "start_line": 7, "max_lines": 2000},
                     ReadInput(path="a", start_line=7, max_lines=2000), id="read-given"),
        pytest.param(list_dir, {}, ListInput(path=None), id="list-omitted"),
        pytest.param(list_dir, {"path": None}, ListInput(path=None), id="list-null"),
        pytest.param(search, {"query": "q"}, SearchInput(query="q", path=None),
                     id="search-omitted"),
        pytest.param(search, {"query": "q", "path": None}, SearchInput(query="q", path=None),
                     id="search-null"),
    ],
)  # fmt: skip
def test_omitted_or_null_optional_fields_take_their_defaults(
    tool: Tool, args: dict[str, Any], expected: Any
) -> None:
    assert tool.input_schema is not None
    assert tool.input_schema.validate(args) == expected


async def test_an_out_of_bounds_call_fails_the_turn_before_the_handler_runs(
    tmp_path: Path,
) -> None:
    run = await _probe(workspace_tools(tmp_path), "read", {"path": "a", "max_lines": 2001}).run({})

    assert run.status == "failed"
    assert run.errors[0].source_code == codes.AGENT_INVALID_DECISION


# -- descriptors -----------------------------------------------------------------------------

TOOLS = [pytest.param(tool, id=name) for name, tool in workspace_tools().items()]


def _objects(schema: Any) -> Iterator[Mapping[str, Any]]:
    """Every object schema inside ``schema``, recursively."""
    if isinstance(schema, Mapping):
        if schema.get("type") == "object" or "properties" in schema:
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, (list, tuple)):
        for item in schema:
            yield from _objects(item)


@pytest.mark.parametrize("tool", TOOLS)
def test_every_descriptor_object_is_closed_with_every_property_required(tool: Tool) -> None:
    objects = list(_objects(tool.input_json_schema))

    assert objects
    for schema in objects:
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])


@pytest.mark.parametrize("tool", TOOLS)
def test_descriptor_marks_exactly_the_optional_fields_nullable(tool: Tool) -> None:
    assert tool.input_schema is not None
    model = tool.input_schema.source
    properties = tool.input_json_schema["properties"]

    assert sorted(properties) == sorted(model.model_fields)
    for name, field in model.model_fields.items():
        nullable = {"type": "null"} in properties[name].get("anyOf", ())
        assert nullable is (not field.is_required()), name


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        pytest.param(read, {"path": "a", "start_line": None, "max_lines": None}, id="read-null"),
        pytest.param(read, {"path": "a", "start_line": 3, "max_lines": 2000}, id="read-given"),
        pytest.param(list_dir, {"path": None}, id="list-null"),
        pytest.param(search, {"query": "q", "path": "src"}, id="search-given"),
    ],
)
def test_descriptor_and_input_model_accept_what_a_strict_model_sends(
    tool: Tool, args: dict[str, Any]
) -> None:
    assert tool.input_schema is not None
    jsonschema.Draft202012Validator(thaw(tool.input_json_schema)).validate(args)
    tool.input_schema.validate(args)


def test_each_tool_has_a_description_for_models() -> None:
    for tool in workspace_tools().values():
        assert 200 < len(tool.description) <= 4096
        assert "\n" not in tool.description


# -- registration ----------------------------------------------------------------------------


def test_workspace_tools_are_read_list_and_search(tmp_path: Path) -> None:
    assert list(workspace_tools(tmp_path)) == ["read", "list", "search"]
    assert workspace_tools() == {"read": read, "list": list_dir, "search": search}


async def test_no_tool_is_added_to_an_agent_implicitly() -> None:
    seen: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        seen.append(ctx.capabilities)
        return finish("done")

    agent = define_agent(
        id="bare", input_schema=dict[str, Any], result_schema=str,
        initial_state=lambda _: {}, decide=decide,
    )  # fmt: skip

    assert await agent.run_or_raise({}) == "done"
    assert seen == [()]


async def test_module_level_tools_resolve_against_the_cwd_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "first" / "a.txt", "first\n")
    _write(tmp_path / "second" / "a.txt", "second\n")
    tools = {"read": read, "list": list_dir, "search": search}

    monkeypatch.chdir(tmp_path / "first")
    first = thaw((await _probe(tools, "read", {"path": "a.txt"}).run({})).value)
    monkeypatch.chdir(tmp_path / "second")
    second = thaw((await _probe(tools, "read", {"path": "a.txt"}).run({})).value)

    assert [first[0]["value"]["content"], second[0]["value"]["content"]] == ["first\n", "second\n"]


async def test_workspace_tools_fix_a_relative_root_when_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "ws" / "a.txt", "ws\n")
    _write(tmp_path / "other" / "a.txt", "other\n")
    monkeypatch.chdir(tmp_path)
    tools = workspace_tools("ws")
    monkeypatch.chdir(tmp_path / "other")

    value = thaw((await _probe(tools, "read", {"path": "a.txt"}).run({})).value)[0]["value"]

    assert (value["path"], value["content"]) == ("a.txt", "ws\n")


# -- list ------------------------------------------------------------------------------------


async def test_list_sorts_case_sensitively_and_reports_kinds(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    for name in ("b.txt", "B.txt", "a"):
        _write(root / name, "x")
    (root / "Dir").mkdir()
    (root / "link").symlink_to(root / "b.txt")
    os.mkfifo(root / "pipe")

    value = await _value(tmp_path, "list", {"path": "dir"})

    assert value == {
        "path": "dir",
        "entries": [
            {"name": "B.txt", "kind": "file"},
            {"name": "Dir", "kind": "directory"},
            {"name": "a", "kind": "file"},
            {"name": "b.txt", "kind": "file"},
            {"name": "link", "kind": "symlink"},
            {"name": "pipe", "kind": "other"},
        ],
        "truncated": False,
    }


@pytest.mark.parametrize(
    "args", [pytest.param({}, id="omitted"), pytest.param({"path": None}, id="null")]
)
async def test_list_defaults_to_the_root(tmp_path: Path, args: dict[str, Any]) -> None:
    _write(tmp_path / "only.txt", "x")

    value = await _value(tmp_path, "list", args)

    assert value == {"path": ".", "entries": [{"name": "only.txt", "kind": "file"}],
                     "truncated": False}  # fmt: skip


@pytest.mark.parametrize(
    ("count", "shown", "truncated"),
    [
        pytest.param(200, 200, False, id="exactly-200"),
        pytest.param(250, 200, True, id="over-200"),
    ],
)
async def test_list_caps_at_200_entries(
    tmp_path: Path, count: int, shown: int, truncated: bool
) -> None:
    for n in range(count):
        _write(tmp_path / "d" / f"f{n:03}", "")

    value = await _value(tmp_path, "list", {"path": "d"})

    names = [entry["name"] for entry in value["entries"]]
    assert names == [f"f{n:03}" for n in range(shown)]
    assert value["truncated"] is truncated


async def test_list_caps_names_at_16_kib(tmp_path: Path) -> None:
    for n in range(100):
        _write(tmp_path / "d" / (f"{n:03}" + "n" * 197), "")  # 200-byte names

    value = await _value(tmp_path, "list", {"path": "d"})

    assert (len(value["entries"]), value["truncated"]) == (81, True)  # 81 * 200 <= 16384


@pytest.mark.parametrize(
    ("path", "code"),
    [pytest.param("missing", "ENOENT", id="missing"), pytest.param("f", "ENOTDIR", id="file")],
)
async def test_list_turns_filesystem_problems_into_tool_errors(
    tmp_path: Path, path: str, code: str
) -> None:
    _write(tmp_path / "f", "x")

    assert (await _error(tmp_path, "list", {"path": path}))["code"] == code


# -- search ----------------------------------------------------------------------------------


async def test_search_finds_literal_case_sensitive_matches_with_line_numbers(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "b.py", "a.b\naxb\nNeedle\nthe needle here\n")
    _write(tmp_path / "a" / "z.txt", "needle\r\n")
    _write(tmp_path / "B.md", "no match\n")

    found = await _value(tmp_path, "search", {"query": NEEDLE})
    dotted = await _value(tmp_path, "search", {"query": "a.b", "path": None})

    assert found == {
        "matches": [
            {"path": "a/z.txt", "line": 1, "text": "needle"},
            {"path": "b.py", "line": 4, "text": "the needle here"},
        ],
        "truncated": False,
        "skipped_files": 0,
    }
    assert dotted["matches"] == [{"path": "b.py", "line": 1, "text": "a.b"}]


async def test_search_paths_are_relative_to_the_search_root(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "pkg" / "mod.py", f"x = '{NEEDLE}'\n")

    value = await _value(tmp_path, "search", {"query": NEEDLE, "path": "src"})
    single = await _value(tmp_path, "search", {"query": NEEDLE, "path": "src/pkg/mod.py"})

    assert [m["path"] for m in value["matches"]] == ["pkg/mod.py"]
    assert [m["path"] for m in single["matches"]] == ["mod.py"]


async def test_search_skips_git_node_modules_symlinks_binary_and_oversized_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    _write(root / "keep.txt", NEEDLE)
    _write(root / ".git" / "config", NEEDLE)
    _write(root / "node_modules" / "x" / "index.js", NEEDLE)
    _write(root / "bin.dat", NEEDLE.encode() + b"\0")
    _write(root / "latin1.txt", NEEDLE.encode() + b"\xe9")
    _write(root / "huge.txt", (NEEDLE + "\n") * (160 * KIB))
    _write(tmp_path / "elsewhere" / "target.txt", NEEDLE)
    (root / "file-link").symlink_to(tmp_path / "elsewhere" / "target.txt")
    (root / "dir-link").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(root / "pipe")

    value = await _value(root, "search", {"query": NEEDLE})

    assert value == {
        "matches": [{"path": "keep.txt", "line": 1, "text": NEEDLE}],
        "truncated": False,
        "skipped_files": 3,
    }


async def test_search_follows_a_symlink_given_as_the_starting_path(tmp_path: Path) -> None:
    _write(tmp_path / "real" / "a.txt", NEEDLE)
    (tmp_path / "alias").symlink_to(tmp_path / "real")

    value = await _value(tmp_path, "search", {"query": NEEDLE, "path": "alias"})

    assert [m["path"] for m in value["matches"]] == ["a.txt"]


@pytest.mark.parametrize(
    ("lines", "shown", "truncated"),
    [
        pytest.param(50, 50, False, id="exactly-50"),
        pytest.param(60, 50, True, id="over-50"),
    ],
)
async def test_search_caps_at_50_matches(
    tmp_path: Path, lines: int, shown: int, truncated: bool
) -> None:
    _write(tmp_path / "many.txt", f"{NEEDLE}\n" * lines)

    value = await _value(tmp_path, "search", {"query": NEEDLE})

    assert [m["line"] for m in value["matches"]] == list(range(1, shown + 1))
    assert value["truncated"] is truncated


async def test_search_caps_paths_and_text_at_16_kib(tmp_path: Path) -> None:
    _write(tmp_path / "w.txt", (NEEDLE + "x" * 995 + "\n") * 40)  # 5 + 1001 bytes per match

    value = await _value(tmp_path, "search", {"query": NEEDLE})

    assert (len(value["matches"]), value["truncated"]) == (16, True)  # 16 * 1006 <= 16384


async def test_search_cuts_long_lines_to_1024_bytes_around_the_match(tmp_path: Path) -> None:
    _write(tmp_path / "min.js", "é" * 3000 + NEEDLE + "y" * 3000 + "\n")

    (match,) = (await _value(tmp_path, "search", {"query": NEEDLE}))["matches"]

    assert NEEDLE in match["text"]
    assert 1000 < len(match["text"].encode()) <= 1024


async def test_search_visits_at_most_2000_entries(tmp_path: Path) -> None:
    for n in range(2010):
        _write(tmp_path / "d" / f"f{n:04}", NEEDLE if n in (1999, 2000) else "")

    value = await _value(tmp_path, "search", {"query": NEEDLE, "path": "d"})

    assert [m["path"] for m in value["matches"]] == ["f1999"]
    assert value["truncated"] is True


@pytest.mark.parametrize(
    ("levels", "found"),
    [
        pytest.param(31, True, id="32-levels-searched"),
        pytest.param(32, False, id="33rd-level-not-searched"),
    ],
)
async def test_search_descends_at_most_32_levels(tmp_path: Path, levels: int, found: bool) -> None:
    deep = tmp_path.joinpath(*["d"] * levels)
    _write(deep / "x.txt", NEEDLE)

    value = await _value(tmp_path, "search", {"query": NEEDLE})

    assert bool(value["matches"]) is found
    assert value["truncated"] is not found


async def test_search_sorts_each_directory_before_applying_limits(tmp_path: Path) -> None:
    for name in ("b", "B", "a", "_"):
        _write(tmp_path / name / "x.txt", f"{NEEDLE}\n" * 20)

    value = await _value(tmp_path, "search", {"query": NEEDLE})

    assert [m["path"] for m in value["matches"][::20]] == ["B/x.txt", "_/x.txt", "a/x.txt"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param({"query": NEEDLE, "path": "missing"}, "ENOENT", id="missing"),
        pytest.param({"query": "two\nlines"}, "EINVAL", id="multi-line-query"),
        pytest.param({"query": NEEDLE, "path": "pipe"}, "EINVAL", id="fifo"),
    ],
)
async def test_search_turns_bad_starting_points_into_tool_errors(
    tmp_path: Path, args: dict[str, Any], code: str
) -> None:
    os.mkfifo(tmp_path / "pipe")

    assert (await _error(tmp_path, "search", args))["code"] == code


# -- activity --------------------------------------------------------------------------------


def _activity(trace: CapturedTrace) -> list[tuple[str, str]]:
    """(kind, message) of every tool progress message and log line."""
    found: list[tuple[str, str]] = []
    for record in trace.records:
        if not record["pipelineId"].startswith("probe/tool/"):
            continue
        payload = record.get("payload", {})
        if record["name"] == "pipeline.log":
            found.append(("log", payload["message"]))
        elif "progress" in payload:
            found.append(("progress", payload["progress"]["message"]))
    return found


@pytest.mark.parametrize(
    ("tool", "args", "action"),
    [
        pytest.param("read", {"path": "a.txt"}, 'read "a.txt"', id="read"),
        pytest.param("list", {}, 'list "."', id="list"),
        pytest.param("search", {"query": 'say "hi"\t', "path": "."},
                     'search "say \\"hi\\"\\t" in "."', id="search"),
        pytest.param("read", {"path": "p" * 200}, 'read "' + "p" * 158 + "…", id="cut"),
    ],
)  # fmt: skip
async def test_each_call_reports_its_action_as_progress_and_a_log_line(
    tmp_path: Path, tool: str, args: dict[str, Any], action: str
) -> None:
    _write(tmp_path / "a.txt", "SECRET CONTENT\n")

    with capture_trace() as trace:
        await _outcome(tmp_path, tool, args, trace=trace)

    activity = _activity(trace)
    assert [("progress", action), ("log", action)] == [a for a in activity if a[1] == action]
    assert all("SECRET" not in message for _, message in activity)
    progress = [r["payload"]["progress"] for r in trace.records
                if r.get("payload", {}).get("progress", {}).get("message") == action]  # fmt: skip
    assert progress == [{"completed": 0, "total": 1, "message": action}]


def test_cut_preview_is_160_characters() -> None:
    from tubeless.agent._builtin_fs import preview

    assert len(preview("p" * 200)) == 160
    assert preview("p" * 200).endswith("…")
    assert preview("p" * 158) == '"' + "p" * 158 + '"'
    assert preview("a\u2028b\nc") == '"a\\u2028b\\nc"'


# -- end to end ------------------------------------------------------------------------------


def _reader(path: str) -> Any:
    """A scripted source: read ``path``, then finish with its content (or the error)."""

    def answer(state: Any, ctx: Any) -> Any:
        (outcome,) = state["outcomes"]
        return finish(outcome["value"]["content"] if outcome["ok"] else dict(outcome["error"]))

    return scripted(continue_with(call("read", {"path": path}, id="r1")), answer)


def _reading_agent(root: Path, path: str) -> Any:
    seen: list[Any] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        seen.append(outcomes)
        return _keep(state, outcomes)

    agent = define_agent(
        id="reader",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda _: {"outcomes": []},
        decide=_reader(path),
        dry_run=_reader(path),
        reduce=reduce,
        tools={**workspace_tools(root)},
    )
    return agent, seen


async def test_agent_reads_a_file_and_finishes_with_its_content(tmp_path: Path) -> None:
    _write(tmp_path / "notes.md", "# Notes\nship it\n")
    agent, _ = _reading_agent(tmp_path, "notes.md")

    run = await agent.run({})

    assert (run.status, run.dry_run, run.value) == ("completed", False, "# Notes\nship it\n")


async def test_agent_still_reads_in_a_dry_run(tmp_path: Path) -> None:
    """read runs in previews (its preview is its handler)."""
    _write(tmp_path / "notes.md", "preview me\n")
    agent, _ = _reading_agent(tmp_path, "notes.md")

    run = await agent.run({}, dry_run=True)

    assert (run.status, run.dry_run, run.value) == ("completed", True, "preview me\n")


async def test_missing_file_reaches_the_reducer_as_a_recoverable_enoent(tmp_path: Path) -> None:
    agent, seen = _reading_agent(tmp_path, "missing.md")

    run = await agent.run({})

    assert run.status == "completed"
    ((outcome,),) = [thaw(batch) for batch in seen]
    assert outcome == {
        "id": "r1",
        "tool": "read",
        "ok": False,
        "error": {"code": "ENOENT", "message": 'No such file or directory: "missing.md"'},
    }
    assert run.value == outcome["error"]
