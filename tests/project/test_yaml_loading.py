"""Project files load safely and boundedly into plain data; every problem is located
(DESIGN.md section 5, "Loading")."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tubeless.errors import DOCUMENT_INVALID, DocumentError
from tubeless.project._issues import DocumentIssue
from tubeless.project._yaml import (
    MAX_BYTES,
    LoadedDocument,
    load_document,
    parse_document,
)

Expected = tuple[int, int, str, str]  # (line, column, pointer, message fragment)


def write(tmp_path: Path, content: str | bytes, name: str = "project.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def load(tmp_path: Path, content: str | bytes) -> LoadedDocument:
    return load_document(write(tmp_path, content))


def problems(tmp_path: Path, content: str | bytes) -> list[DocumentIssue]:
    path = write(tmp_path, content)
    with pytest.raises(DocumentError) as caught:
        load_document(path)
    error = caught.value
    assert error.code == DOCUMENT_INVALID
    issues = list(error.issues)
    assert issues, "a DocumentError carries its issues"
    assert all(issue.file == str(path) for issue in issues)
    assert str(error).startswith(issues[0].format())
    return issues


def located(issues: list[DocumentIssue]) -> list[tuple[int, int, str]]:
    return [(issue.line, issue.column, issue.pointer) for issue in issues]


def assert_issues(issues: list[DocumentIssue], expected: list[Expected]) -> None:
    assert located(issues) == [(line, column, pointer) for line, column, pointer, _ in expected]
    for issue, (_, _, _, fragment) in zip(issues, expected, strict=True):
        assert fragment in issue.message, issue.format()


def only_plain_json(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and only_plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(only_plain_json(item) for item in value)
    return value is None or type(value) in {str, int, float, bool}


# -- one rule per row: (line, column, pointer, message fragment) ---------------------------------

INVALID = [
    pytest.param(
        "version: 1\nproject: {id: a}\nversion: 2\n",
        [(3, 1, "/version", "duplicate key 'version' (first defined at line 1)")],
        id="duplicate-top-level-key-at-second-key",
    ),
    pytest.param(
        "project: {id: a, id: b}\n",
        [(1, 18, "/project/id", "duplicate key 'id'")],
        id="duplicate-key-in-flow",
    ),
    pytest.param(
        "a:\n  x: 1\n  y: 2\n  x: 3\nb:\n  z: 1\n  z: 2\n",
        [(4, 3, "/a/x", "first defined at line 2"), (7, 3, "/b/z", "first defined at line 6")],
        id="every-duplicate-reported",
    ),
    pytest.param(
        "1: a\n", [(1, 1, "", "keys must be strings, found an integer")], id="integer-key"
    ),
    pytest.param(
        "yes: a\n",
        [(1, 1, "", "'yes' is a boolean in YAML 1.1 but a string in YAML 1.2")],
        id="boolean-key",
    ),
    pytest.param("~: a\n", [(1, 1, "", "found null")], id="null-key"),
    pytest.param("1.5: a\n", [(1, 1, "", "found a number")], id="float-key"),
    pytest.param(
        "? {a: 1}\n: b\n", [(1, 3, "", "found a mapping used as a key")], id="mapping-key"
    ),
    pytest.param(
        "x:\n  ? [a]\n  : b\n", [(2, 5, "/x", "found a list used as a key")], id="complex-list-key"
    ),
    pytest.param(
        "x: !!python/object:os.system {}\n",
        [(1, 4, "/x", "tag !!python/object:os.system is not allowed")],
        id="python-object-tag",
    ),
    pytest.param(
        "x: !!python/name:os.system ''\n",
        [(1, 4, "/x", "tag !!python/name:os.system is not allowed")],
        id="python-name-tag",
    ),
    pytest.param(
        "x:\n  - !custom 1\n", [(2, 5, "/x/0", "tag !custom is not allowed")], id="custom-tag"
    ),
    pytest.param("x: !!binary aGk=\n", [(1, 4, "/x", "tag !!binary")], id="binary-tag"),
    pytest.param("x: !!set {a: null}\n", [(1, 4, "/x", "tag !!set")], id="set-tag"),
    pytest.param("x: !!omap [{a: 1}]\n", [(1, 4, "/x", "tag !!omap")], id="omap-tag"),
    pytest.param(
        "x: !!timestamp 2024-01-01\n",
        [(1, 4, "/x", "tag !!timestamp")],
        id="explicit-timestamp-tag",
    ),
    pytest.param("!custom k: v\n", [(1, 1, "", "tag !custom")], id="tag-on-a-key"),
    pytest.param(
        "a: !!int abc\n", [(1, 4, "/a", "'abc' is not an integer")], id="core-tag-with-wrong-value"
    ),
    pytest.param(
        "a: !!map [1]\n",
        [(1, 4, "/a", "tag !!map does not fit a list")],
        id="core-tag-on-wrong-kind",
    ),
    pytest.param("x: .nan\n", [(1, 4, "/x", "not a finite number")], id="nan"),
    pytest.param("x: [1, -.inf]\n", [(1, 8, "/x/1", "JSON has no NaN or infinity")], id="infinity"),
    pytest.param(
        "base: &b {a: 1}\nother:\n  <<: *b\n  c: 2\n",
        [(3, 3, "/other", "YAML merge keys are not supported; repeat the keys")],
        id="merge-key",
    ),
    pytest.param(
        "a: 1\n---\nb: 2\n", [(2, 1, "", "more than one YAML document")], id="two-documents"
    ),
    pytest.param("", [(1, 1, "", "the document is empty")], id="empty-file"),
    pytest.param("# only a comment\n", [(1, 1, "", "the document is empty")], id="comments-only"),
    pytest.param("---\n", [(1, 1, "", "the document is empty")], id="empty-document"),
    pytest.param("- a\n- b\n", [(1, 1, "", "top level must be a mapping")], id="top-level-list"),
    pytest.param(
        "\n  just text\n", [(2, 3, "", "found a string 'just text'")], id="top-level-scalar"
    ),
    pytest.param("a:\n\tb: 1\n", [(2, 1, "/a", "indent with spaces")], id="tab-indentation"),
    pytest.param(
        "a: 1\n b: 2\n",
        [(2, 3, "", "mapping values are not allowed here; check the indentation")],
        id="bad-indentation",
    ),
    pytest.param(
        "a: [1, 2\nb: 3\n", [(2, 2, "/a/2", "expected ',' or ']'")], id="unclosed-flow-sequence"
    ),
    pytest.param(
        "a: 'open\n", [(2, 1, "/a", "found unexpected end of stream")], id="unclosed-quote"
    ),
    pytest.param(
        "a: " + "[" * 65 + "]" * 65 + "\n",
        [(1, 67, "/a" + "/0" * 63, "nested more than 64 levels")],
        id="depth-65",
    ),
    pytest.param(
        "a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n",
        [(2, 5 + 4 * 100, "/b/100", "more than 100 aliases")],
        id="alias-101",
    ),
    pytest.param(
        "a:\n" + "- 0\n" * 10_001,
        [(9_999, 3, "/a/9997", "more than 10,000 values")],
        id="nodes-over-10000",
    ),
    pytest.param("a: &a [1, *a]\n", [(1, 11, "/a/1", "recursive structure")], id="recursive-alias"),
    pytest.param("a: *nope\n", [(1, 4, "/a", "no anchor &nope before it")], id="undefined-alias"),
    pytest.param(
        "a: &x 1\nb: &x 2\n", [(2, 4, "/b", "anchor &x is defined twice")], id="duplicate-anchor"
    ),
    pytest.param(
        "a: 1\nb: \x07\n", [(2, 4, "", "control character U+0007")], id="control-character"
    ),
    pytest.param(
        b"a: 1\nb: caf\xe9 au lait\nc: 3\n",
        [(2, 7, "", "not valid UTF-8 (byte 0xe9 at line 2, column 7)")],
        id="invalid-utf8-mid-file",
    ),
    pytest.param(
        b"a: 1\n\x00\x00\x00\x01binary",
        [(2, 1, "", "NUL byte (is this a binary file?)")],
        id="binary-with-nul-bytes",
    ),
    pytest.param(
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", [(1, 1, "", "not valid UTF-8")], id="binary-image"
    ),
]


@pytest.mark.parametrize(("content", "expected"), INVALID)
def test_invalid_file_is_rejected_at_the_offending_place(
    tmp_path: Path, content: str | bytes, expected: list[Expected]
) -> None:
    assert_issues(problems(tmp_path, content), expected)


def test_all_problems_of_one_pass_are_reported_together_in_file_order(tmp_path: Path) -> None:
    text = (
        "version: 1\n"
        "a: !custom x\n"
        "b:\n"
        "  k: 1\n"
        "  k: 2\n"
        "1: number key\n"
        "c: [!!python/object/apply:os.system ['echo hi'], .inf]\n"
        "version: 2\n"
    )
    assert_issues(
        problems(tmp_path, text),
        [
            (2, 4, "/a", "tag !custom"),
            (5, 3, "/b/k", "duplicate key 'k'"),
            (6, 1, "", "keys must be strings"),
            (7, 5, "/c/0", "tag !!python/object/apply:os.system"),
            (7, 50, "/c/1", "not a finite number"),
            (8, 1, "/version", "duplicate key 'version'"),
        ],
    )


def test_python_apply_tag_runs_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    text = (
        'a: !!python/object/apply:os.system ["echo hi"]\n'
        f'b: !!python/object/apply:os.system ["touch {marker}"]\n'
    )
    assert_issues(
        problems(tmp_path, text),
        [
            (1, 4, "/a", "can run code when loaded"),
            (2, 4, "/b", "can run code when loaded"),
        ],
    )
    assert not marker.exists()
    assert "hi" not in capfd.readouterr().out


def test_billion_laughs_fails_at_once_without_expanding(tmp_path: Path) -> None:
    lines = ['lol0: &lol0 "lol"']
    lines += [f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 10) + "]" for i in range(1, 10)]
    tracemalloc.start()
    try:
        issues = problems(tmp_path, "\n".join(lines) + "\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # lol4 expands to 11,111 values: its 8th alias is the one that crosses 10,000.
    assert_issues(issues, [(5, 63, "/lol4/7", "more than 10,000 values")])
    assert peak < 10 * 1024 * 1024


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            "a: " + "[" * 10_000 + "]" * 10_000 + "\n",
            (1, 67, "/a" + "/0" * 63),
            id="flow-sequences",
        ),
        pytest.param(
            "{a: " * 10_000 + "}" * 10_000 + "\n", (1, 257, "/a" * 64), id="flow-mappings"
        ),
        pytest.param("- " * 10_000 + "x\n", (1, 129, "/0" * 64), id="block-sequences"),
    ],
)
def test_ten_thousand_levels_of_nesting_stop_at_depth_64(
    tmp_path: Path, content: str, expected: tuple[int, int, str]
) -> None:
    issues = problems(tmp_path, content)
    assert located(issues) == [expected]
    assert "nested more than 64 levels" in issues[0].message


def test_fifty_megabyte_file_is_rejected_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as stream:  # sparse: nothing is really written
        stream.truncate(50 * 1024 * 1024)
    with pytest.raises(DocumentError) as caught:
        load_document(path)
    (issue,) = caught.value.issues
    assert (issue.line, issue.column, issue.pointer) == (1, 1, "")
    assert "limited to 1 MiB" in issue.message
    assert "52,428,800 bytes" in issue.message


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_not_read_at_all() -> None:
    """``/dev/zero`` reports size 0 and never ends: only regular files are read (issue 14)."""
    with pytest.raises(OSError, match=r"not a regular file \(a character device\)") as caught:
        load_document("/dev/zero")
    assert caught.value.filename == "/dev/zero"


def test_size_limit_counts_utf8_bytes_not_characters() -> None:
    text = "a: " + "é" * (MAX_BYTES // 2)
    with pytest.raises(DocumentError, match="limited to 1 MiB"):
        parse_document(text, file="p.yaml")


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_document(tmp_path / "absent.yaml")


# -- what loads, and how -------------------------------------------------------------------------


def test_valid_file_loads_as_plain_json_data(tmp_path: Path) -> None:
    text = (
        "\ufeffversion: 1\n"  # a UTF-8 BOM is fine
        "when: 2024-01-01\n"
        "stamp: 2024-01-01 10:00:00\n"
        "kinds: [1, 2.5, true, null, ~, !!str 7, '3', 0x10]\n"
        "base: &b {x: [1, {y: 2}]}\n"
        "copy: *b\n"
        "empty:\n"
    )
    doc = load(tmp_path, text)
    assert doc.data == {
        "version": 1,
        "when": "2024-01-01",
        "stamp": "2024-01-01 10:00:00",
        "kinds": [1, 2.5, True, None, None, "7", "3", 16],
        "base": {"x": [1, {"y": 2}]},
        "copy": {"x": [1, {"y": 2}]},
        "empty": None,
    }
    assert only_plain_json(doc.data)
    assert doc.data["copy"] is not doc.data["base"]  # aliases are copied, never shared


def test_file_is_kept_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a: 1\n", "given.yml")
    monkeypatch.chdir(tmp_path)
    assert load_document("given.yml").file == "given.yml"
    assert parse_document("a: 1\n", file="<stdin>").file == "<stdin>"


def test_parse_document_accepts_text_and_bytes_alike() -> None:
    assert parse_document("a: [1]\n", file="t").data == parse_document(b"a: [1]\n", file="b").data


SOURCE = """\
version: 1
agents:
  helper:
    limits:
      max_turns: 3
    tools: {a/b: x, c~d: y}
steps:
  - id: one
  -   {id: two}
"""


@pytest.mark.parametrize(
    ("pointer", "key", "expected"),
    [
        pytest.param("", False, (1, 1), id="root"),
        pytest.param("/version", False, (1, 10), id="scalar-value"),
        pytest.param("/version", True, (1, 1), id="scalar-key"),
        pytest.param("/agents/helper/limits", False, (5, 7), id="block-mapping-value"),
        pytest.param("/agents/helper/limits", True, (4, 5), id="block-mapping-key"),
        pytest.param("/agents/helper/limits/max_turns", False, (5, 18), id="nested-value"),
        pytest.param("/agents/helper/tools/a~1b", True, (6, 13), id="slash-escaped"),
        pytest.param("/agents/helper/tools/c~0d", False, (6, 26), id="tilde-escaped"),
        pytest.param("/steps/1", False, (9, 7), id="list-item"),
        pytest.param("/steps/1/id", False, (9, 12), id="flow-value-in-list"),
        pytest.param("/agents/helper/decide", False, (4, 5), id="missing-falls-back-to-parent"),
        pytest.param("/agents/helper/decide", True, (4, 5), id="missing-key-falls-back"),
        pytest.param("/steps/7/run", False, (8, 3), id="missing-item-falls-back-to-list"),
        pytest.param("/nowhere/at/all", False, (1, 1), id="missing-top-level-falls-back-to-root"),
    ],
)
def test_source_map_locates_values_and_keys(
    tmp_path: Path, pointer: str, key: bool, expected: tuple[int, int]
) -> None:
    assert load(tmp_path, SOURCE).source.locate(pointer, key=key) == expected
