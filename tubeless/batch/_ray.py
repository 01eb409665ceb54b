"""The ``ray`` engine: one Ray actor per slot, each loading the project from its files.

The project is shipped with Ray's runtime environment: its ``working_dir`` is the folder that
holds the project file and every ``python_path`` folder it names (caches, virtual environments
and version control left out), and actors load the project by its path inside it. The driver
connects to ``address`` (or ``RAY_ADDRESS``), else starts a local Ray for the batch, and
disconnects (a local Ray stops) afterwards. A Ray the caller already initialised in this process
is used as it is, with its own runtime environment: actors then load the project by its absolute
path. An actor that dies fails
only the row it was running and is replaced. Ray is imported only by this engine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._engine import EntrySource
from tubeless.batch._inputs import InputRow
from tubeless.batch._row import NO_PLAN, RowOutcome, RowPlan, failed_row, run_row
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BATCH_WORKER_DIED, BatchError

if TYPE_CHECKING:
    from tubeless.pipeline import CancelToken

__all__ = ["RayEngine", "shipped_folder"]

#: Left out of the shipped folder: caches, environments, version control, traces and databases.
EXCLUDES = [
    "venv",
    "node_modules",
    "**/__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".import_linter_cache",
    "*.sqlite",
    "*.sqlite3",
    "*.db",
    "*.ndjson",
]


def shipped_folder(source: EntrySource) -> tuple[Path, str]:
    """The folder shipped to the workers, and the project file's path inside it."""
    from tubeless.project import check_project

    project = Path(source.path)
    spec = check_project(project).spec
    folders = [project.parent, *((project.parent / p).resolve() for p in spec.python_path)]
    root = Path(os.path.commonpath([str(folder) for folder in folders]))
    return root, project.relative_to(root).as_posix()


class _Actor:
    """Loads the entry once, then runs the rows it is sent (an async actor: cancellable)."""

    def __init__(
        self,
        path: str,
        entry_id: str | None,
        traced: bool,
        tools: bool,
        checkpoints: str | None = None,
    ) -> None:
        self._entry = EntrySource(path=str(Path(path).resolve()), entry_id=entry_id).load()
        self._traced = traced
        self._tools = tools
        self._store = None
        if checkpoints is not None:  # an absolute path every actor can reach
            from tubeless.durable import SqliteCheckpoints

            self._store = SqliteCheckpoints(checkpoints)

    async def run(
        self,
        index: int,
        line: int,
        raw: Any,
        problem: str | None,
        text: str,
        key: str,
        plan: dict[str, Any] | None = None,
    ) -> tuple[str, dict[str, int], list[str]]:
        item = InputRow(index=index, line=line, raw=raw, problem=problem, text=text)
        outcome = await run_row(
            self._entry,
            item,
            key,
            traced=self._traced,
            tools=self._tools,
            store=self._store,
            plan=RowPlan.from_wire(plan),
        )
        return outcome.to_wire()


class RayEngine:
    """``actors`` Ray actors, one row in flight each."""

    def __init__(
        self,
        source: EntrySource,
        *,
        actors: int,
        traced: bool,
        tools: bool,
        signal: CancelToken,
        address: str | None,
        store_path: str | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise BatchError(
                BATCH_ENGINE_UNAVAILABLE, "the ray engine needs Ray: pip install 'tubeless[ray]'"
            ) from None
        self._ray = ray
        self._source = source
        self._store_path = store_path
        self._size = actors
        self._traced = traced
        self._tools = tools
        self._signal = signal
        self._address = address or os.environ.get("RAY_ADDRESS") or None
        self._started_ray = False
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        self._running: dict[Any, Any] = {}
        self._options: dict[str, Any] = {}
        self._remove_callback: Any = None

    async def start(self) -> None:
        ray = self._ray
        self._relative = self._source.path
        if not ray.is_initialized():
            # Ray uploads a local folder only for a whole job, so the project ships here.
            root, self._relative = shipped_folder(self._source)
            settings: dict[str, Any] = {
                "runtime_env": {"working_dir": str(root), "excludes": EXCLUDES},
                "logging_level": "warning",
                "log_to_driver": False,
            }
            if self._address is not None:
                settings["address"] = self._address
            else:
                settings.update(num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False)
            # ray.init replaces the SIGTERM handler (with a sys.exit) on the main thread: keep
            # the caller's (the CLI's cooperative cancellation) in place.
            handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
            ray.init(**settings)
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():
                    if handler is not None:
                        signal.signal(sig, handler)
            self._started_ray = True
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self._options = {"num_cpus": min(1.0, cpus / self._size), "max_restarts": 0}
        for _ in range(self._size):
            self._idle.put_nowait(self._spawn())
        self._remove_callback = self._signal.add_callback(lambda: self.cancel("cancelled"))

    def _spawn(self) -> Any:
        actor_class = self._ray.remote(_Actor)
        return actor_class.options(**self._options).remote(
            self._relative, self._source.entry_id, self._traced, self._tools, self._store_path
        )

    async def run(
        self, item: InputRow, key: str, *, retry: bool = False, plan: RowPlan = NO_PLAN
    ) -> RowOutcome:
        ray = self._ray
        actor = await self._idle.get()
        ref = actor.run.remote(
            item.index, item.line, item.raw, item.problem, item.text, key, plan.to_wire()
        )
        self._running[ref] = actor
        try:
            wire = await ref
        except ray.exceptions.TaskCancelledError:
            self._idle.put_nowait(actor)
            outcome = failed_row(item, key, "TUBELESS_RUN_CANCELLED", "the row was cancelled")
            outcome.row["status"] = "cancelled"
            return outcome
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
            self._idle.put_nowait(self._spawn())
            reason = type(exc).__name__
            return failed_row(
                item, key, BATCH_WORKER_DIED, f"the Ray actor running the row died ({reason})"
            )
        finally:
            self._running.pop(ref, None)
        self._idle.put_nowait(actor)
        return RowOutcome.from_wire(wire)

    def cancel(self, reason: str) -> None:
        for ref in list(self._running):
            self._ray.cancel(ref)

    async def close(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        while not self._idle.empty():
            self._ray.kill(self._idle.get_nowait())
        for actor in list(self._running.values()):
            self._ray.kill(actor)
        if self._started_ray:
            self._ray.shutdown()
