"""A ``tubeless run`` input from ``--input``, ``--input-file`` and the entry's derived flags."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tubeless._cli._exit import CliInputError
from tubeless._cli._flags import DerivedFlag, InputRejected

__all__ = ["build_input", "read_input_file"]


def read_input_file(name: str) -> Any:
    import yaml

    if name == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise click.FileError(name, hint=exc.strerror) from None
    try:
        if name.endswith((".yaml", ".yml")):
            from tubeless.batch._spi import yaml_value

            # The project loader's bounds (depth, aliases, values), as for inputs files.
            return yaml_value(text, name)
        return json.loads(text)
    except ValueError as exc:
        if name.endswith((".yaml", ".yml")):
            raise CliInputError(f"--input-file {exc}") from None
        raise CliInputError(f"--input-file {name}: not valid input: {exc}") from None
    except (RecursionError, yaml.YAMLError) as exc:
        raise CliInputError(f"--input-file {name}: not valid input: {exc}") from None


def build_input(
    flags: Sequence[DerivedFlag], options: dict[str, Any], schema: dict[str, Any] | None
) -> Any:
    """``--input`` / ``--input-file``, then each given flag overriding a top-level key."""
    raw: Any = None
    if options.get("input_json") is not None and options.get("input_file") is not None:
        raise click.UsageError("Give --input or --input-file, not both.")
    if options.get("input_json") is not None:
        try:
            raw = json.loads(options["input_json"])
        except (ValueError, RecursionError) as exc:
            hint = ""
            text = options["input_json"].strip()
            if text and text[0] not in '{["' and not text[0].isdigit():
                hint = f" (a string must be quoted as JSON: --input '{json.dumps(text)}')"
            raise CliInputError(f"--input is not valid JSON: {exc}{hint}") from None
    elif options.get("input_file") is not None:
        raw = read_input_file(options["input_file"])
    given = {}
    for flag in flags:
        value = options.get(flag.property)
        if value is None or (flag.multiple and not value):
            continue
        try:
            given[flag.property] = flag.convert(value)
        except InputRejected as exc:
            raise CliInputError(str(exc)) from None
    is_object = schema is not None and (schema.get("type") == "object" or "properties" in schema)
    if raw is None and (given or is_object):
        raw = {}
    if given:
        if not isinstance(raw, dict):
            raise CliInputError("flags set top-level keys, so --input must be a JSON object")
        raw = {**raw, **given}
    return raw
