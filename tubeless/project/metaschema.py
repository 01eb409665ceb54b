"""The project meta-schema: generated from :mod:`tubeless.project.spec`, committed, shipped.

``python -m tubeless.project.metaschema`` (``make schema``) rewrites the committed file, and the
eval cases schema generated from :mod:`tubeless.project.cases` beside it; a test fails when a
file and its models disagree.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "CASES_SCHEMA_ID",
    "SCHEMA_ID",
    "generate",
    "generate_cases",
    "load",
    "load_cases_schema",
    "render",
]

SCHEMA_ID = "https://tubeless.dev/schemas/project.schema.json"
CASES_SCHEMA_ID = "https://tubeless.dev/schemas/cases.schema.json"
_PACKAGE_FILE = ("tubeless", "schemas/project.schema.json")
_CASES_FILE = ("tubeless", "schemas/cases.schema.json")


def _strip_nulls(node: Any) -> Any:
    """Optional fields are omitted in YAML, never null: drop pydantic's null branches."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "title":
                continue  # pydantic's titles repeat the property names
            out[key] = _strip_nulls(value)
        branches = out.get("anyOf")
        if isinstance(branches, list) and {"type": "null"} in branches:
            kept = [b for b in branches if b != {"type": "null"}]
            out.pop("anyOf")
            if out.get("default", 0) is None:
                out.pop("default")
            if len(kept) == 1:
                merged = dict(kept[0])
                merged.update({k: v for k, v in out.items() if k not in merged})
                return merged
            out["anyOf"] = kept
        return out
    if isinstance(node, list):
        return [_strip_nulls(item) for item in node]
    return node


def generate() -> dict[str, Any]:
    """The meta-schema as the spec models describe it today."""
    from tubeless.project.spec import ProjectSpec

    body = _strip_nulls(ProjectSpec.model_json_schema(by_alias=True, mode="validation"))
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "tubeless project",
    }
    schema.update(body)
    return schema


def generate_cases() -> dict[str, Any]:
    """The eval cases schema as :mod:`tubeless.project.cases` describes it today."""
    from tubeless.project.cases import CasesSpec

    body = _strip_nulls(CasesSpec.model_json_schema(by_alias=True, mode="validation"))
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": CASES_SCHEMA_ID,
        "title": "tubeless eval cases",
    }
    schema.update(body)
    return schema


@cache
def load_cases_schema() -> dict[str, Any]:
    """The shipped eval cases schema."""
    text = resources.files(_CASES_FILE[0]).joinpath(_CASES_FILE[1]).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def render(schema: dict[str, Any]) -> str:
    """The committed text form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@cache
def load() -> dict[str, Any]:
    """The shipped meta-schema (the committed file inside the package)."""
    text = resources.files(_PACKAGE_FILE[0]).joinpath(_PACKAGE_FILE[1]).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def main() -> int:
    """Write the generated meta-schema into the package (``make schema``)."""
    target = Path(__file__).resolve().parents[1] / "schemas" / "project.schema.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(generate()), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    cases = target.with_name("cases.schema.json")
    cases.write_text(render(generate_cases()), encoding="utf-8")
    print(f"wrote {cases}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
