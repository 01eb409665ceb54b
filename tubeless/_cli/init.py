"""``tubeless init [DIR]``: write a first project that runs, validates and tests at once.

The files are templates shipped in ``_init_files/``: a project YAML whose first line points
editors at a copy of the meta-schema written beside it, a Python module with a tool, a decide
callback and a reducer, and a pytest file using ``tubeless.testing``.
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

    It writes project.yaml, a Python module with a tool, decide and reduce, a test file, and
    schemas/project.schema.json for editors. Then: `tubeless run project.yaml --text "hi there"`
    and `pytest`.
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
    where = "" if directory == Path(".") else f"cd {directory} && "
    click.echo(
        f'next: {where}tubeless run project.yaml --text "hello tubeless" && pytest', err=True
    )
