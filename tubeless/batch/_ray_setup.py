"""What the ``ray`` engine does before its actors exist: the folder it ships, connecting to Ray
(and saying what to set when the cluster wants a token), and the identity of the driver's
files, which an actor compares with what it sees on its own host.

Ray is imported lazily: this module is imported only by the ``ray`` engine and its tests.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from tubeless.batch._entry_source import EntrySource
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BatchError

__all__ = [
    "EXCLUDES",
    "check_token_auth",
    "file_identity",
    "init_ray",
    "not_the_drivers",
    "shipped_folder",
]

#: Left out of the shipped folder (gitignore patterns, at any depth): caches, virtual
#: environments, version control, traces, SQLite files with their journals and lease folders.
#: Ray also leaves out what a ``.gitignore`` names; these apply without one.
EXCLUDES = [
    "venv",
    ".venv",
    ".env",
    "node_modules",
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".import_linter_cache",
    ".tox",
    ".nox",
    ".tubeless",
    "*.sqlite",
    "*.sqlite3",
    "*.db",
    "*.sqlite-wal",
    "*.sqlite-shm",
    "*.sqlite-journal",
    "*.sqlite3-wal",
    "*.sqlite3-shm",
    "*.sqlite3-journal",
    "*.db-wal",
    "*.db-shm",
    "*.db-journal",
    "*.leases",
    "*.ndjson",
]

#: Seconds the token probe waits for the cluster's answer.
_PROBE_S = 5.0


def shipped_folder(source: EntrySource) -> tuple[Path, str]:
    """The folder shipped to the workers, and the project file's path inside it."""
    from tubeless.project import check_project

    project = Path(source.path)
    spec = check_project(project).spec
    folders = [project.parent, *((project.parent / p).resolve() for p in spec.python_path)]
    root = Path(os.path.commonpath([str(folder) for folder in folders]))
    if root == Path(root.anchor) or root == Path.home():
        # Ray would pack and upload everything below it (the whole disk, a home folder).
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE,
            f"the Ray engine ships the folder that holds {project.name} and its python_path "
            f"folders, and here that is {str(root)!r}: keep the python_path folders inside the "
            "project's folder (or beside it under one parent folder)",
        )
    return root, project.relative_to(root).as_posix()


def init_ray(ray: Any, source: EntrySource, address: str | None) -> str:
    """``ray.init`` for a batch: connected to ``address`` or a new local Ray, the project's
    folder shipped; the project file's path for the actors."""
    root, relative = shipped_folder(source)
    settings: dict[str, Any] = {
        # Ray uploads a local folder only for a whole job, so the project ships here.
        "runtime_env": {"working_dir": str(root), "excludes": EXCLUDES},
        "logging_level": "warning",
        "log_to_driver": False,
    }
    if address is not None:
        check_token_auth(address)
        settings["address"] = address
    else:
        # "local": a Ray of its own, never one that another program started on this machine.
        settings.update(
            address="local", num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False
        )
    # ray.init replaces the SIGTERM handler (with a sys.exit) on the main thread: keep the
    # caller's (the CLI's cooperative cancellation) in place.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(**settings)
    except ConnectionError as exc:
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE, f"cannot connect to the Ray cluster at {address}: {exc}"
        ) from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
    return relative


def check_token_auth(address: str) -> None:
    """Refuse at once, saying what to set, a cluster that wants a token Ray would not send.

    Ray 2.60 clusters start with token authentication; a driver without ``RAY_AUTH_MODE=token``
    (and no token of its own) would otherwise retry for 20 s, printing ``InvalidAuthToken``
    lines, and fail with a bare ``ConnectionError``. One unauthenticated connection to the
    cluster's GCS tells at once.
    """
    if _sends_token() or "://" in address or ":" not in address:
        return  # Ray will send a token; or a Ray Client / "auto" address: Ray says what it says
    if _wants_token(address):
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE,
            f"the Ray cluster at {address} requires token authentication: set "
            "RAY_AUTH_MODE=token and give the cluster's token in RAY_AUTH_TOKEN (or in a file "
            "named by RAY_AUTH_TOKEN_PATH; default ~/.ray/auth_token); `ray get-auth-token` "
            "on the head node prints it",
        )


def _sends_token() -> bool:
    """Whether Ray will authenticate: ``RAY_AUTH_MODE=token``, or the mode unset and a token at
    hand (Ray then turns token mode on by itself)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.strip().lower() == "token"
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"
    return path.is_file()


def _wants_token(address: str) -> bool:
    """One connection to the cluster's GCS without a token: Ray's own client raises
    ``AuthenticationError`` at once when a token is needed (any other failure is left to
    ``ray.init`` to report)."""
    import importlib

    import ray

    raylet: Any = importlib.import_module("ray._raylet")  # compiled, untyped
    try:
        raylet.InnerGcsClient.standalone(address, None, int(_PROBE_S * 1000))
    except ray.exceptions.AuthenticationError:
        return True
    except Exception:  # unreachable, or not a GCS: ray.init says so in its own words
        return False
    return False


# -- files the driver names, seen from a worker's host ---------------------------------------------
def file_identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(device, inode)`` of ``path`` on this host; ``None`` when it does not exist."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def not_the_drivers(
    path: str, expected: tuple[int, int] | list[int] | None, what: str
) -> str | None:
    """Why ``path`` on this host is not the driver's file (``None``: it is, or the driver had
    none to compare). Checked before anything opens it: opening would create a fresh, empty
    store on a host that lacks it, and a resume would then depend on where a row lands."""
    if expected is None:
        return None
    found = file_identity(path)
    if found is not None and tuple(found) == tuple(expected):
        return None
    seen = "does not exist" if found is None else "is another file than the driver's"
    return (
        f"the {what} {path} {seen} on the Ray worker host {socket.gethostname()}: the ray "
        "engine uses a local file only where every worker sees the driver's own file (SQLite "
        "and file locks do not work across machines); run the batch where its workers share "
        "the driver's host, or with --engine process"
    )
