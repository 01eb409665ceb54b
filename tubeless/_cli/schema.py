"""``tubeless schema``: print the project meta-schema that editors and ``validate`` use."""

from __future__ import annotations

import click

__all__ = ["schema"]


@click.command("schema")
def schema() -> None:
    """Print the project meta-schema (JSON Schema, draft 2020-12) on stdout.

    It is the schemas/project.schema.json shipped with tubeless, the one the first line of a
    project file (# yaml-language-server: $schema=...) points editors at.
    """
    # Imported here: tubeless --help must not pay for the project package.
    from tubeless.project import metaschema

    click.echo(metaschema.render(metaschema.load()), nl=False)
