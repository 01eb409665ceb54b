"""``tubeless ui [TRACE...]``: the web pages over trace and checkpoint stores, on uvicorn.

No project is needed (``--project`` adds the graph page). The token is serve's: the
``TUBELESS_SERVE_TOKEN`` variable, ``--token-file``, else ``.tubeless/serve-token`` (made once,
printed only when made). The server binds loopback unless ``--host`` says otherwise, and answers
only requests addressed to a loopback name or that host (a DNS-rebinding guard).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import click

from tubeless._cli._exit import CliLoadError

__all__ = ["ui"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hidden(store: str) -> str:
    """``store`` with the password of a URL hidden."""
    head, sep, tail = store.partition("@")
    if not sep or "://" not in head or ":" not in head.split("://", 1)[1]:
        return store
    scheme, rest = head.split("://", 1)
    return f"{scheme}://{rest.split(':', 1)[0]}:***@{tail}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise CliLoadError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@click.command("ui", short_help="Web pages over trace and checkpoint stores.")
@click.argument("traces", nargs=-1, metavar="[TRACE]...")
@click.option(
    "--checkpoints",
    metavar="PATH|URL",
    default=None,
    help="A checkpoint store whose waiting calls the approvals page lists and answers.",
)
@click.option(
    "--project",
    type=click.Path(dir_okay=False),
    default=None,
    help="A project file whose entries the graph page draws.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8422, show_default=True)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The login token's file (else TUBELESS_SERVE_TOKEN, or .tubeless/serve-token).",
)
def ui(
    traces: tuple[str, ...],
    checkpoints: str | None,
    project: str | None,
    host: str,
    port: int,
    token_file: Path | None,
) -> None:
    """Serve web pages over TRACE stores (NDJSON, SQLite, postgresql:// URLs; batch outputs
    and eval JUnit files too): runs, a run's turns and calls, approvals, compare, graph.

    Without TRACE (or --checkpoints), the stores serve keeps in .tubeless/ are read when they
    exist."""
    from tubeless._serve_token import load_token

    home = Path(".tubeless")
    if not traces and (home / "traces.sqlite").exists():
        traces = (str(home / "traces.sqlite"),)  # what serve keeps here by default
    if checkpoints is None and (home / "checkpoints.sqlite").exists():
        checkpoints = str(home / "checkpoints.sqlite")
    for trace in traces:
        if "://" not in trace and not os.path.exists(trace):
            raise FileNotFoundError(2, "No such file or directory", trace)
    if checkpoints is not None and "://" not in checkpoints and not os.path.exists(checkpoints):
        raise FileNotFoundError(2, "No such file or directory", checkpoints)
    if project is not None and not os.path.exists(project):
        raise FileNotFoundError(2, "No such file or directory", project)
    try:
        token = load_token(home, token_file=token_file)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        import uvicorn

        from tubeless.ui import create_ui_app
    except ImportError as exc:
        raise CliLoadError(
            f"tubeless ui needs the serve extra: pip install 'tubeless[serve]' ({exc})"
        ) from None
    app = create_ui_app(list(traces), checkpoints=checkpoints, token=token.value, project=project)
    if host in ("0.0.0.0", "::"):
        allowed = ["*"]
    else:
        allowed = [*_LOOPBACK_NAMES, host] if not _is_loopback(host) else list(_LOOPBACK_NAMES)
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    guarded = TrustedHostMiddleware(app, allowed_hosts=[h.strip("[]") for h in allowed])
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    if token.made:
        click.echo(f"tubeless ui: login token (saved in {token.source}): {token.value}", err=True)
    else:
        click.echo(f"tubeless ui: log in with the token from {token.source}", err=True)
    for store in (*traces, *([checkpoints] if checkpoints else [])):
        click.echo(f"tubeless ui: reading {_hidden(store)}", err=True)
    click.echo(f"tubeless ui: http://{shown}:{bound}/", err=True)
    config = uvicorn.Config(guarded, log_level="warning", access_log=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
