"""``tubeless init [DIR]``: write a first project that runs, validates and tests at once.

The files are templates shipped in ``_init_files/``: a project YAML whose first line points
editors at a copy of the meta-schema written beside it, a Python module with a tool, a decide
callback and a reducer, and a pytest file using ``tubeless.testing``. A ``.gitignore`` keeps
what runs write (checkpoints, traces, cassettes) out of commits; one that exists is left alone.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import click

__all__ = ["init"]

_FILES = {
    "project.yaml": "project.yaml.tmpl",
    "{module}.py": "module.py.tmpl",
    "test_{module}.py": "test_module.py.tmpl",
}

#: What tubeless runs write beside a project: data files that may hold inputs and outputs.
_GITIGNORE = """\
# Written by tubeless runs; they may hold inputs, outputs and state, so they stay out of commits.
# Checkpoint files (--checkpoints) and SQLite traces, their write-ahead logs and lease folders
*.sqlite
*.sqlite-wal
*.sqlite-shm
*.sqlite.leases/
# NDJSON traces (--trace runs.ndjson) and a folder of traces
*.ndjson
traces/
# Cassettes (--record, --record-dir): commit one you replay in CI with `git add -f`
*.cassette.jsonl
cassettes/
# tubeless serve's checkpoints, traces and token
.tubeless/
# Python and pytest
__pycache__/
.pytest_cache/
"""


def _slug(name: str) -> str:
    """A Python identifier made from a folder name: ``My-App`` -> ``my_app``."""
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    if not slug or slug[0].isdigit():
        slug = f"project_{slug}".rstrip("_")
    return slug


def _render(template: str, values: dict[str, str]) -> str:
    text = resources.files("tubeless._cli").joinpath("_init_files", template).read_text("utf-8")
    return text.format(**values)


@click.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
def init(directory: Path, force: bool) -> None:
    """Write a first project into DIRECTORY (default: the current folder).

    It writes project.yaml, a Python module with a tool, decide and reduce, a test file,
    schemas/project.schema.json for editors, and a .gitignore for what runs write (an existing
    .gitignore is kept). Then: `tubeless run project.yaml --text "hi there"` and `pytest`
    (`pip install 'tubeless[test]'` installs it).
    """
    from tubeless.project import metaschema

    slug = _slug(directory.resolve().name)
    module = f"{slug}_agent"
    values = {
        "project_id": slug.replace("_", "-"),
        "project_name": slug.replace("_", " ").capitalize(),
        "agent_id": f"{slug.replace('_', '-')}-agent",
        "module": module,
    }
    planned = {
        directory / name.format(module=module): _render(tmpl, values)
        for name, tmpl in _FILES.items()
    }
    planned[directory / "schemas" / "project.schema.json"] = metaschema.render(metaschema.load())
    existing = [path for path in planned if path.exists()]
    if existing and not force:
        names = ", ".join(str(path) for path in existing)
        raise click.UsageError(f"{names} already exist; pass --force to overwrite them.")
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        click.echo(f"wrote {path}", err=True)
    _write_gitignore(directory / ".gitignore")
    where = "" if directory == Path(".") else f"cd {directory} && "
    # The generated tests need pytest, which `pip install tubeless` does not bring.
    click.echo(
        f"next: {where}pip install 'tubeless[test]' && "
        'tubeless run project.yaml --text "hello tubeless" && pytest',
        err=True,
    )


def _write_gitignore(path: Path) -> None:
    """Write the .gitignore, or say what to add to the user's own (never overwritten, even with
    ``--force``: it holds the user's rules, not ours)."""
    if path.exists():
        patterns = " ".join(
            line for line in _GITIGNORE.splitlines() if line and not line.startswith("#")
        )
        click.echo(f"note: kept {path} as it is; the one init writes ignores {patterns}", err=True)
        return
    path.write_text(_GITIGNORE, encoding="utf-8")
    click.echo(f"wrote {path}", err=True)
