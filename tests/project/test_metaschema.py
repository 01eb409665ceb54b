"""The committed meta-schema is what the spec models generate, and a valid 2020-12 schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from tubeless.project import metaschema

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_file_matches_the_models() -> None:
    """Run `make schema` after changing tubeless/project/spec.py; this test says when."""
    committed = (ROOT / "schemas" / "project.schema.json").read_text(encoding="utf-8")
    assert committed == metaschema.render(metaschema.generate())


def test_the_shipped_copy_is_the_committed_file() -> None:
    """The package data that `tubeless schema` prints is the file editors point at."""
    committed = json.loads((ROOT / "schemas" / "project.schema.json").read_text(encoding="utf-8"))
    assert metaschema.load() == committed


def test_it_passes_the_draft_2020_12_metaschema() -> None:
    jsonschema.Draft202012Validator.check_schema(metaschema.load())
    assert metaschema.load()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _properties(node: Any, path: str = "#") -> list[tuple[str, str, Any]]:
    found: list[tuple[str, str, Any]] = []
    if isinstance(node, dict):
        for name, value in node.get("properties", {}).items():
            found.append((path, name, value))
        for key, value in node.items():
            found.extend(_properties(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_properties(value, f"{path}/{index}"))
    return found


def test_every_property_has_a_description_for_editors() -> None:
    """Editors show these as hover help and completion details."""
    missing = [
        f"{path}/{name}"
        for path, name, value in _properties(metaschema.load())
        if not (isinstance(value, dict) and value.get("description"))
    ]
    assert missing == []


def test_every_shipped_project_validates_against_it() -> None:
    import yaml

    validator = jsonschema.Draft202012Validator(metaschema.load())
    for path in sorted((ROOT / "projects").glob("*.yaml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert list(validator.iter_errors(document)) == [], path.name


def test_optional_keys_are_never_null() -> None:
    """Optional keys are left out in YAML: the schema offers no null branch for them."""
    assert '"type": "null"' not in json.dumps(metaschema.load())
