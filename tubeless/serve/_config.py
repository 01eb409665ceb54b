"""What one server is: its project, stores, token and the bounds it enforces.

Defaults are durable: ``.tubeless/checkpoints.sqlite`` and ``.tubeless/traces.sqlite`` beside
the project file. Beside the checkpoint file the server keeps its run registry
(``<checkpoints>.serve-runs``, a data file: it holds run inputs) and a folder of claim files
(``<checkpoints>.serve-claims/``); with ``--checkpoints postgresql://...`` the registry is in
that database (``tubeless_serve_*`` tables) and claims are rows there. Workers of one server
get the same config through the environment (:func:`to_environment` /
:func:`from_environment`): the token travels there too, never on a command line.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "CONFIG_ENV",
    "LOOPBACK_HOSTS",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "ServeConfig",
    "from_environment",
    "is_loopback",
    "to_environment",
]

CONFIG_ENV = "TUBELESS_SERVE_CONFIG"
#: Request bodies above this are refused (413) before they are read in full.
MAX_BODY_BYTES = 1024 * 1024
#: Deepest nesting of a request's JSON (objects and arrays).
MAX_JSON_DEPTH = 64
#: Host names a loopback-bound server answers to without ``--allow-host``.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Everything a worker needs to serve ``project``."""

    project: str
    checkpoints: str
    trace: str
    token: str | None
    """``None`` only under ``--no-auth`` on a loopback address."""
    host: str = "127.0.0.1"
    port: int = 8421
    allow_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_runs: int = 16
    sweep_s: float = 1.0
    keepalive_s: float = 15.0
    stop_grace_s: float = 5.0
    """How long a stopping worker waits for runs to settle (a synchronous tool cannot be
    interrupted)."""
    lease_ttl_s: float = 30.0
    """Time to live of checkpoint leases and run claims: how soon another worker or host takes
    over the runs of one that died."""
    exit_when_stuck: bool = False
    """Leave the process at once when runs did not settle in time (the CLI sets it)."""
    extra: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def for_project(
        project: str | os.PathLike[str],
        *,
        checkpoints: str | None = None,
        trace: str | None = None,
        **options: object,
    ) -> ServeConfig:
        """The config of ``project`` with its stores beside it unless named."""
        path = Path(project).resolve()
        home = path.parent / ".tubeless"
        return ServeConfig(
            project=str(path),
            checkpoints=checkpoints or str(home / "checkpoints.sqlite"),
            trace=trace or str(home / "traces.sqlite"),
            **options,  # type: ignore[arg-type]
        )

    @property
    def shared(self) -> bool:
        """Whether the stores are a PostgreSQL database (several hosts may serve them)."""
        return self.checkpoints.lower().startswith(("postgresql://", "postgres://"))

    @property
    def registry(self) -> str:
        """Where the run registry is: the checkpoint database, or a file beside the checkpoints."""
        return self.checkpoints if self.shared else f"{self.checkpoints}.serve-runs"

    @property
    def claims(self) -> Path:
        return Path(f"{self.checkpoints}.serve-claims")

    def hosts(self) -> frozenset[str]:
        """Host header names accepted (without ports, lower case)."""
        names = {*LOOPBACK_HOSTS, *(h.lower() for h in self.allow_hosts)}
        if not is_loopback(self.host) and self.host not in ("0.0.0.0", "::"):
            names.add(self.host.lower())
        return frozenset(names)


def to_environment(config: ServeConfig) -> str:
    data = asdict(config)
    data["allow_hosts"] = list(config.allow_hosts)
    data["cors_origins"] = list(config.cors_origins)
    return json.dumps(data)


def from_environment(environ: dict[str, str] | None = None) -> ServeConfig:
    """The config a worker was given, taken out of the environment (it holds the token, which
    the processes a tool starts must not inherit)."""
    text = (os.environ if environ is None else environ).pop(CONFIG_ENV)
    data = json.loads(text)
    data["allow_hosts"] = tuple(data["allow_hosts"])
    data["cors_origins"] = tuple(data["cors_origins"])
    return ServeConfig(**data)
