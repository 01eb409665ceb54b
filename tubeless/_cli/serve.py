"""``tubeless serve PROJECT``: the project as an HTTP service (uvicorn, one or more workers).

The project is loaded here first, so a broken file fails with the usual line and exit code
before anything listens. The URL goes to stderr, and the token too when this start made it
(once: it is kept 0600 in ``.tubeless/serve-token`` and reused).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

__all__ = ["serve"]

KEEPALIVE_ENV = "TUBELESS_SERVE_KEEPALIVE_S"


def _is_url(value: str | None) -> bool:
    return value is not None and value.startswith(("postgresql://", "postgres://"))


@click.command("serve", short_help="Serve a project over HTTP (runs, approvals, event streams).")
@click.argument("project", type=click.Path(dir_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8421, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--checkpoints",
    default=None,
    help="Checkpoint store (default .tubeless/checkpoints.sqlite beside PROJECT).",
)
@click.option(
    "--trace", default=None, help="Trace store (default .tubeless/traces.sqlite beside PROJECT)."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read the bearer token from this file.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Another Host header name to answer (repeatable).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="An origin allowed cross-origin requests (repeatable).",
)
@click.option(
    "--max-runs",
    default=16,
    show_default=True,
    type=click.IntRange(1, 100000),
    help="Runs queued or running at once (then 429).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="uvicorn worker processes sharing the stores.",
)
@click.option(
    "--lease-ttl",
    "lease_ttl_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="Seconds before another worker or host takes over the runs of one that died.",
)
@click.option("--no-auth", is_flag=True, help="No token (only on a loopback address).")
def serve(
    project: str,
    host: str,
    port: int,
    checkpoints: str | None,
    trace: str | None,
    token_file: Path | None,
    allow_hosts: tuple[str, ...],
    cors_origins: tuple[str, ...],
    max_runs: int,
    workers: int,
    lease_ttl_s: float,
    no_auth: bool,
) -> None:
    """Serve PROJECT's agents and pipelines over HTTP: durable runs, approvals, event streams.

    Every run is checkpointed; a server started again resumes the runs a crash interrupted.
    Requests need `Authorization: Bearer <token>` (the token is made once and printed)."""
    from tubeless.serve import missing_extra
    from tubeless.serve._spi import ServeConfig, is_loopback

    problem = missing_extra()
    if problem is not None:
        raise click.ClickException(problem)
    if no_auth and not is_loopback(host):
        raise click.UsageError(
            f"--no-auth is refused on {host}: without a token anyone who reaches the address "
            "can run the project; bind 127.0.0.1, or drop --no-auth"
        )
    if _is_url(trace) and not _is_url(checkpoints):
        raise click.UsageError(
            "--trace names a PostgreSQL database but --checkpoints does not: runs served from "
            "several hosts need both; give --checkpoints postgresql://... too"
        )
    if not Path(project).exists():
        raise FileNotFoundError(2, "No such file or directory", project)
    from tubeless.project import load_project

    load_project(project)  # a broken project fails here, with its usual line and exit code
    home = Path(project).resolve().parent / ".tubeless"
    token: str | None = None
    if not no_auth:
        from tubeless._serve_token import TOKEN_ENV, load_token

        try:
            found = load_token(home, token_file=token_file)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        token = found.value
        # Read once: the processes that tools start never inherit it from this server.
        os.environ.pop(TOKEN_ENV, None)
        if found.made:
            click.echo(
                f"token: {found.value}  (saved 0600 to {found.source}; shown only now)", err=True
            )
    config = ServeConfig.for_project(
        project,
        checkpoints=checkpoints,
        trace=trace,
        token=token,
        host=host,
        port=port,
        allow_hosts=allow_hosts,
        cors_origins=cors_origins,
        max_runs=max_runs,
        lease_ttl_s=lease_ttl_s,
        keepalive_s=_keepalive_s(),
        exit_when_stuck=True,
    )
    if not _is_url(config.trace) and os.path.abspath(config.checkpoints) == os.path.abspath(
        config.trace
    ):
        raise click.UsageError(
            "--checkpoints and --trace name the same file: checkpoints hold inputs, traces never"
        )
    from tubeless.durable import redact_dsn
    from tubeless.serve._spi import RunManager

    try:  # a store that cannot be used fails before anything listens
        RunManager.check_stores(config)
    except RuntimeError as exc:  # the serve tables (their message names the store, no password)
        raise click.ClickException(str(exc)) from None
    shown = f"[{host}]" if ":" in host else host
    auth = "no auth" if token is None else "bearer token required"
    click.echo(
        f"serving {project} at http://{shown}:{port} ({auth}; {workers} worker"
        f"{'' if workers == 1 else 's'}; checkpoints {redact_dsn(config.checkpoints)})",
        err=True,
    )
    _run_uvicorn(config, workers)


def _keepalive_s() -> float:
    """Seconds between the event streams' keep-alive comments (``TUBELESS_SERVE_KEEPALIVE_S``,
    default 15: proxies commonly close a connection quiet for 30 to 60 seconds)."""
    text = os.environ.get(KEEPALIVE_ENV, "15")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise click.UsageError(f"{KEEPALIVE_ENV} must be a number of seconds (0.05-3600)")
    return value


def _run_uvicorn(config: object, workers: int) -> None:
    import uvicorn

    from tubeless.serve._spi import CONFIG_ENV, ServeConfig, to_environment

    assert isinstance(config, ServeConfig)
    common = {
        "host": config.host,
        "port": config.port,
        "log_level": "warning",
        "timeout_graceful_shutdown": 5,
        "proxy_headers": False,
    }
    if workers == 1:
        from tubeless.serve import create_app

        uvicorn.run(create_app(config.project, config=config), **common)  # type: ignore[arg-type]
        return
    os.environ[CONFIG_ENV] = to_environment(config)
    uvicorn.run(
        "tubeless.serve._worker:app_from_environment",
        factory=True,
        workers=workers,
        **common,  # type: ignore[arg-type]
    )
