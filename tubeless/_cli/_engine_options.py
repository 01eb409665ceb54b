"""The engine options ``tubeless batch`` and ``tubeless eval`` share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

__all__ = ["ENGINES", "engine_options"]

ENGINES = ("local", "process", "ray")

_F = TypeVar("_F", bound=Callable[..., object])


def engine_options(unit: str, whole: str) -> Callable[[_F], _F]:
    """``--engine``, ``--concurrency``/``-c``, ``--ray-address``, ``--row-retries`` and
    ``--trace``.

    ``unit`` names one thing that runs ("row", "case"), ``whole`` what they make up ("batch",
    "run").
    """
    options = (
        click.option(
            "--engine",
            type=click.Choice(ENGINES),
            default="local",
            show_default=True,
            help="local: asyncio tasks here; process: worker processes; ray: Ray actors.",
        ),
        click.option(
            "--concurrency",
            "-c",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help=f"{unit.capitalize()}s in flight at once (process and ray: workers).",
        ),
        click.option(
            "--ray-address",
            default=None,
            metavar="ADDR",
            help=f"The Ray cluster (default: RAY_ADDRESS, else a local Ray for the {whole}).",
        ),
        click.option(
            "--row-retries",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            metavar="N",
            help=f"Run a {unit} whose worker died (process, ray) again on another worker, "
            "N more times at most.",
        ),
        click.option(
            "--trace",
            multiple=True,
            metavar="PATH",
            help=f"Record every {unit}: .ndjson/.jsonl, .sqlite/.sqlite3/.db or a "
            "postgresql:// URL (repeatable).",
        ),
    )

    def apply(command: _F) -> _F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply
