"""Which files are project files: one rule for ``validate DIR``, named files and pre-commit.

A project that ``tubeless run`` refuses must never be passed over as "not a project", so the
rule looks for *any* sign of a project rather than for a complete one: a ``.yaml`` / ``.yml``
file is a project file when its top level has a project key (``version: 1``, ``project``,
``agents``, ``pipelines``, ``python_path``, ``mcp_servers``, ``allow_modules``), or when its
``yaml-language-server`` header (or ``$schema:`` key) names the project schema. A copy whose
``project:`` key is misspelt still has its ``version:`` and ``agents:``, so it is checked, and
refused with the misspelling named.

Two kinds of YAML share keys with projects and are told apart here:

- eval cases files (``schemas/cases.schema.json``) have ``version:`` and ``python_path:`` too;
  they are the files with ``cases:`` or ``entry:`` (or the cases schema in their header) and no
  key only a project has;
- other tools' configurations use ``version:`` (docker-compose's ``'3.8'``, Read the Docs'
  ``2``); ``version:`` alone makes a project unless its value is another version number than ``1``.

The scan is textual (a key at the start of a line is a top-level key), so a project with a
YAML syntax error is still found, and reported.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from typing import Final

__all__ = ["PROJECT_KEYS", "RULE", "SUFFIXES", "not_a_project", "projects_in", "sniff"]

#: The top-level keys of a project document (the meta-schema's properties, ``$schema`` aside).
PROJECT_KEYS: Final = (
    "version",
    "project",
    "agents",
    "pipelines",
    "python_path",
    "mcp_servers",
    "allow_modules",
    "pricing",
)
#: Keys an eval cases file never has: one of them makes a file a project whatever else it holds.
_PROJECT_ONLY: Final = frozenset(PROJECT_KEYS) - {"version", "python_path"}
_CASES_KEYS: Final = frozenset({"cases", "entry"})
SUFFIXES: Final = (".yaml", ".yml")
#: The rule, as the "no project files found" error states it.
RULE: Final = (
    "a project file is a .yaml/.yml file whose top level has a project key: version: 1, "
    "project:, agents:, pipelines:, python_path:, mcp_servers: or allow_modules:, or whose "
    "yaml-language-server header names the project schema; eval cases files are not"
)
_NO_KEY: Final = "no top-level project key"
_CASES: Final = "an eval cases file: cases: or entry:, no project-only key"

#: How much of a file is read (a project is at most 1 MiB; ``tubeless.project._yaml.MAX_BYTES``).
_SNIFF_BYTES: Final = 1024 * 1024 + 1
#: A block mapping key at the start of a line (column 1 is the top level), plain or quoted, and
#: the rest of its line (its value when the value is a scalar on the same line).
_TOP_LEVEL_KEY: Final = re.compile(
    r"^(?P<q>[\"']?)(?P<key>[$A-Za-z_][A-Za-z0-9_]*)(?P=q)[ \t]*:(?=[ \t\r]|$)(?P<rest>.*)$",
    re.MULTILINE,
)
#: yaml-language-server's modeline, ``# yaml-language-server: $schema=<url or path>``.
_MODELINE: Final = re.compile(
    r"^[ \t]*#[ \t]*yaml-language-server[ \t]*:[ \t]*\$schema=(\S+)", re.MULTILINE
)
#: Another format's version number (``2``, ``'3.8'``).
_OTHER_VERSION: Final = re.compile(r"[0-9]+(?:\.[0-9]+)*")
#: A scalar value and its trailing comment: ``1``, ``'1'``, ``"1" # the format``.
_VALUE: Final = re.compile(r"(?P<value>\"[^\"]*\"|'[^']*'|[^#]*?)[ \t]*(?:#.*)?")


def _schema_name(reference: str) -> str:
    """``project`` for ``../schemas/project.schema.json`` or its URL (query, fragment dropped)."""
    base = re.split(r"[?#]", reference.strip().strip("\"'"), maxsplit=1)[0]
    return base.rsplit("/", 1)[-1].removesuffix(".schema.json")


def sniff(text: str) -> str | None:
    """Why the YAML ``text`` is not a project document, or ``None`` when it is one."""
    keys: dict[str, str] = {}
    for match in _TOP_LEVEL_KEY.finditer(text.removeprefix("\ufeff")):
        value = _VALUE.fullmatch(match.group("rest").strip())
        keys.setdefault(match.group("key"), value.group("value") if value else "")
    schemas = {_schema_name(found) for found in _MODELINE.findall(text)}
    if "$schema" in keys:
        schemas.add(_schema_name(keys["$schema"]))
    if "project" in schemas or _PROJECT_ONLY & keys.keys():
        return None
    if "cases" in schemas or _CASES_KEYS & keys.keys():
        return _CASES
    if "python_path" in keys:
        return None
    version = keys.get("version")
    if version is None:
        return _NO_KEY
    number = version.strip("\"'")
    if number == "1" or not _OTHER_VERSION.fullmatch(number):
        return None  # a project's version, or a broken one: not another tool's version number
    shown = version if len(version) <= 40 else version[:37] + "..."
    return f"{_NO_KEY}; version: {shown} is not a project's 1"


def not_a_project(path: str) -> str | None:
    """Why the file at ``path`` is not a project file, or ``None`` when it is one.

    A path that cannot be opened or read is ``None``: checking it reports why. A named pipe,
    a device or a socket is "not a regular file": reading one could block or never end.
    """
    if not path.endswith(SUFFIXES):
        return "not a .yaml/.yml file"
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with open(descriptor, "rb", closefd=True) as stream:
        try:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                return "not a regular file"
            data = stream.read(_SNIFF_BYTES)
        except OSError:
            return None
    return sniff(data.decode("utf-8", errors="replace"))


def projects_in(folder: str) -> Iterator[str]:
    """The project files under ``folder``, recursively, in sorted order (hidden folders such as
    ``.git`` are not entered)."""
    candidates: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        candidates.extend(os.path.join(root, name) for name in files if name.endswith(SUFFIXES))
    for path in sorted(candidates):
        if not_a_project(path) is None:
            yield path
