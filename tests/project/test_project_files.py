"""The rule for what a project file is (``tubeless validate``, the pre-commit hook)."""

from __future__ import annotations

import pytest

from tubeless.project import metaschema
from tubeless.project._files import PROJECT_KEYS, sniff


def test_the_project_keys_are_the_meta_schema_top_level_properties() -> None:
    """A key added to the spec makes a file a project too (or this test names it)."""
    assert set(PROJECT_KEYS) == set(metaschema.load()["properties"]) - {"$schema"}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("version: 1\r\nprojet: {id: x}\r\n", id="crlf"),
        pytest.param("\ufeffversion: 1\n", id="byte-order-mark"),
        pytest.param("version: 1 # the format\n", id="comment"),
        pytest.param('version: "1"\n', id="double-quoted"),
        pytest.param("version:\n  1\n", id="value-on-the-next-line"),
        pytest.param("version: [\n", id="syntax-error-with-a-project-key"),
        pytest.param(
            "#yaml-language-server: $schema=https://tubeless.dev/schemas/project.schema.json\n",
            id="schema-url",
        ),
    ],
)
def test_a_project_is_recognised_however_its_keys_are_written(text: str) -> None:
    assert sniff(text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("  agents: {}\n", "no top-level project key", id="indented"),
        pytest.param("# agents: {}\n", "no top-level project key", id="comment"),
        pytest.param("agents_x: {}\n", "no top-level project key", id="longer-key"),
        pytest.param(
            "version: 1.0\n",
            "no top-level project key; version: 1.0 is not a project's 1",
            id="version-1.0",
        ),
        pytest.param(
            "# yaml-language-server: $schema=../schemas/cases.schema.json\nversion: 1\n",
            "an eval cases file: cases: or entry:, no project-only key",
            id="cases-header",
        ),
    ],
)
def test_other_yaml_is_not_a_project(text: str, reason: str) -> None:
    assert sniff(text) == reason
