"""The runs of one server worker: started, resumed, cancelled and answered here.

Every run is a checkpointed run under its key in the checkpoint store, recorded first in the
run registry (``_registry``). A worker runs a run as a background asyncio task while it holds
the run's claim (``_claims``); a sweep every ``sweep_s`` picks up queued runs and runs whose
worker died (with SQLite stores the claim and the checkpoint lock died with it; with PostgreSQL
stores, shared by several hosts, the claim and the checkpoint lease expire ``lease_ttl_s``
after their last renewal, and claims are renewed here), and passes on cancel requests made
through another worker. A worker whose claim was taken over stops that run. A run that needs
approval stops ``waiting`` (its pending requests are copied into the registry, so any worker
answers them); an answer records the decision in the checkpoint as ``tubeless approve`` does
and starts the run again, which resumes.
A worker shutting down cancels its tasks without marking them: their checkpoints stay
resumable and the next sweep (here or elsewhere) resumes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tubeless.errors import (
    RUN_CANCELLED,
    SERVE_BAD_REQUEST,
    SERVE_BUSY,
    SERVE_CONFLICT,
    SERVE_NOT_FOUND,
    UNKNOWN_ERROR,
)
from tubeless.serve._claims import Claims, RegistryClaims
from tubeless.serve._ends import read_document, record_end, run_view
from tubeless.serve._entries import Entries, RequestError
from tubeless.serve._metrics import Metrics
from tubeless.serve._progress import Progress
from tubeless.serve._registry import LIVE, RunRegistry, RunRow

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import CancelToken, PipelineRun
    from tubeless.serve._config import ServeConfig

__all__ = ["RunManager"]

log = logging.getLogger("tubeless.serve")


@dataclass
class _Local:
    """A run executing in this worker."""

    token: CancelToken
    task: asyncio.Task[None] | None = None
    progress: Progress | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    user_cancelled: bool = False


class RunManager:
    """Starts and follows the runs of one project in one worker process."""

    def __init__(self, config: ServeConfig) -> None:
        from tubeless.durable import open_checkpoints
        from tubeless.project import load_project
        from tubeless.tracing.reader import open_sink

        self.config = config
        self.entries = Entries(load_project(config.project))
        self.store = open_checkpoints(config.checkpoints, lease_ttl_s=config.lease_ttl_s)
        self.sink = open_sink(config.trace)
        self.registry = RunRegistry(config.registry)
        self.claims: Claims | RegistryClaims
        self._probe: CheckpointStore | None = None
        if config.shared:
            # Another pair of connections for the claims' probes: the store's own connection
            # serves the runs.
            self._probe = open_checkpoints(config.checkpoints, lease_ttl_s=config.lease_ttl_s)
            self.claims = RegistryClaims(
                self.registry,
                owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}",
                ttl_s=config.lease_ttl_s,
                lease_held=self._lease_held,
            )
        else:
            self.claims = Claims(config.claims)
        self.metrics = Metrics()
        self._local: dict[str, _Local] = {}
        # Event streams read the trace store here, not in the default executor, where
        # synchronous tool handlers may hold every thread for as long as they run.
        self.readers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tubeless-serve-read")
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = False
        #: Called in a run's own task just before it runs (``row``) and after its end was
        #: recorded (``row`` as it was launched): the protocols follow their runs here.
        self.on_launch: list[Callable[[RunRow], None]] = []
        self.on_end: list[Callable[[RunRow], None]] = []

    def _lease_held(self, key: str) -> bool:
        """Whether a live checkpoint lease is held on ``key`` (by anyone)."""
        probe = getattr(self._probe, "holder", None)
        return callable(probe) and probe(key) is not None

    @staticmethod
    def check_stores(config: ServeConfig) -> None:
        """Open and close the stores once, so a store that cannot be used fails here, with its
        code, rather than in every worker process as it starts."""
        from tubeless.durable import open_checkpoints
        from tubeless.tracing.reader import open_sink

        store = open_checkpoints(config.checkpoints, lease_ttl_s=config.lease_ttl_s)
        try:
            store.list()  # a database is reached (and its tables made) only when used
        finally:
            store.close()
        open_sink(config.trace).close()
        RunRegistry(config.registry).close()

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._sweep()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="tubeless-serve-sweep")

    async def stop(self) -> None:
        """Cancel this worker's runs (left resumable) and close the stores.

        A run whose tool is a synchronous handler cannot be interrupted: it settles when the
        handler returns. After ``stop_grace_s`` the worker stops waiting for such runs; with
        ``exit_when_stuck`` (the CLI) it then leaves at once, everything flushed and closed, as
        ``tubeless run`` does after a second signal: their checkpoints resume at the next start
        (an unsafe call that was running is not run again).
        """
        self._stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        tasks = [local.task for local in self._local.values() if local.task is not None]
        for task in tasks:
            task.cancel()
        stuck: set[asyncio.Task[None]] = set()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=self.config.stop_grace_s)
        self.claims.release_all()
        self.readers.shutdown(wait=False, cancel_futures=True)
        closing = [self.sink.close, self.store.close, self.registry.close]
        if self._probe is not None:
            closing.append(self._probe.close)
        for close in closing:
            with contextlib.suppress(Exception):
                close()
        if stuck:
            log.warning(
                "serve: stopped while %d run(s) were in a tool call; they resume at the next start",
                len(stuck),
            )
            if self.config.exit_when_stuck:
                import os
                import sys

                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os._exit(0)

    async def _sweep_forever(self) -> None:
        # Claims are renewed three times per time to live, and runs swept every ``sweep_s``.
        tick = min(self.config.sweep_s, self.config.lease_ttl_s / 3)
        last_sweep = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            try:
                for run_id in self.claims.renew():
                    self._lost(run_id)
                if time.monotonic() - last_sweep >= self.config.sweep_s:
                    last_sweep = time.monotonic()
                    self._sweep()
            except Exception:  # a busy store now is tried again at the next sweep
                log.exception("serve: the run sweep failed")

    def _lost(self, run_id: str) -> None:
        """Another worker took ``run_id`` over (this one was too slow to renew): stop it here,
        resumable; the checkpoint's fence keeps this worker from writing anything more."""
        local = self._local.get(run_id)
        if local is not None:
            log.warning("serve: run %s was taken over by another worker; it stops here", run_id)
            local.token.cancel("another worker took the run over")

    def _sweep(self) -> None:
        """Pick up queued and orphaned runs; pass on cancel requests to this worker's runs."""
        for row in self.registry.with_status(("queued", "running")):
            local = self._local.get(row.run_id)
            if local is not None:
                if row.cancel_requested and not local.token.cancelled:
                    local.user_cancelled = True
                    local.token.cancel("cancelled through the API")
                continue
            if not self.claims.take(row.run_id, row.key):
                continue  # another worker runs it
            if row.cancel_requested:
                self._finish_cancelled(row.run_id)
                self.claims.release(row.run_id)
                continue
            self._launch(row)

    # -- starting --------------------------------------------------------------------------------
    def live_count(self) -> int:
        counts = self.registry.counts()
        return counts.get("queued", 0) + counts.get("running", 0)

    def submit(
        self,
        entry_id: str,
        raw_input: Any,
        *,
        key: str | None,
        limits: Any,
        idempotency_key: str | None,
        caller: str | None = None,
        restart: bool = False,
    ) -> tuple[RunRow, bool]:
        """Record and start a run; ``(row, created)``. Raises :class:`RequestError`.

        ``caller`` names who started it through a protocol; ``restart`` starts the key over
        instead of resuming it (or answering its saved end)."""
        if idempotency_key is not None:
            seen = self.registry.by_idempotency_key(idempotency_key)
            if seen is not None:
                return seen, False
        entry = self.entries.get(entry_id)
        checked_limits = self.entries.check_limits(entry_id, limits)
        validated = self.entries.validate_input(entry, raw_input)
        if key is None:
            from tubeless.pipeline._spi import checkpoint_keys

            key, _ = checkpoint_keys(entry_id, raw_input, validated, earlier=False)
        else:
            from tubeless.durable._spi import check_key

            try:
                check_key(key)
            except Exception as exc:
                code = getattr(exc, "code", SERVE_BAD_REQUEST)
                raise RequestError(422, code, str(exc)) from None
        live = self.registry.live_on_key(key)
        if live is not None:
            raise RequestError(
                409, SERVE_CONFLICT, f"run {live.run_id} is live on key {key!r}", run_id=live.run_id
            )
        if self.live_count() >= self.config.max_runs:
            raise RequestError(
                429, SERVE_BUSY, f"{self.config.max_runs} runs are running; try again shortly"
            )
        row, created = self.registry.create(
            run_id=f"run_{uuid.uuid4().hex}",
            entry=entry_id,
            key=key,
            raw_input=raw_input,
            limits=checked_limits,
            idempotency_key=idempotency_key,
            caller=caller,
            restart=restart,
        )
        if not created:
            if idempotency_key is not None and row.idempotency_key == idempotency_key:
                return row, False
            raise RequestError(
                409, SERVE_CONFLICT, f"run {row.run_id} is live on key {key!r}", run_id=row.run_id
            )
        if self.claims.take(row.run_id, row.key):
            self._launch(row)
        return row, True

    def _launch(self, row: RunRow) -> None:
        """Run ``row`` here (its claim is held)."""
        from tubeless.pipeline import CancelToken

        local = _Local(token=CancelToken())
        self._local[row.run_id] = local
        self.registry.set_status_if(row.run_id, ("queued", "running"), "running")
        local.task = asyncio.get_running_loop().create_task(
            self._execute(row, local), name=f"tubeless-serve-{row.run_id}"
        )

    async def _execute(self, row: RunRow, local: _Local) -> None:
        started = time.perf_counter()
        finished: PipelineRun | None = None
        try:
            entry = self.entries.for_run(row.entry, row.limits)
            first = row.status == "queued"
            for hook in self.on_launch:
                hook(row)
            local.progress = self._observe(row)
            finished = await entry.run(
                row.input,
                trace=[self.sink, self.metrics.sink],
                signal=local.token,
                run_id=row.run_id if first else None,
                correlation_id=row.run_id,
                checkpoints=self.store,
                checkpoint_key=row.key,
                restart=row.restart and first,
            )
        except asyncio.CancelledError:
            pass  # this worker stops: the checkpoint stays resumable, the run stays running
        except RequestError as exc:
            self.registry.update(
                row.run_id, status="failed", error={"code": exc.code, "message": exc.message}
            )
        except Exception as exc:
            log.exception("serve: run %s failed outside the run", row.run_id)
            self.registry.update(
                row.run_id,
                status="failed",
                error={"code": getattr(exc, "code", UNKNOWN_ERROR), "message": "internal"},
            )
        finally:
            if local.progress is not None:
                local.progress.close()
            try:
                if finished is not None and not self._stopping:
                    self._record_end(row, finished, local)
                    self.metrics.run_ended(finished.status, time.perf_counter() - started)
            except Exception:
                log.exception("serve: recording the end of run %s failed", row.run_id)
            finally:
                self._local.pop(row.run_id, None)
                self.claims.release(row.run_id)
                local.done.set()
                for hook in self.on_end:
                    try:
                        hook(row)
                    except Exception:
                        log.exception("serve: a hook on the end of run %s failed", row.run_id)

    def _observe(self, row: RunRow) -> Progress:
        """Count the run's turns and calls as it goes (in this task's context only), around
        the hooks a protocol's ``on_launch`` installed, if any."""
        from tubeless.agent._spi import OBSERVER

        owner = getattr(self.claims, "owner", None)

        def write(turns: int, calls: int) -> None:
            self.registry.update_live(row.run_id, owner, turns=turns, calls=calls)

        progress = Progress(write, asyncio.get_running_loop(), inner=OBSERVER.get())
        OBSERVER.set(progress)
        return progress

    def _record_end(self, row: RunRow, run: PipelineRun, local: _Local) -> None:
        record_end(
            self.registry, row, run, read_document(self.store, row.key), local.user_cancelled
        )

    # -- reading ---------------------------------------------------------------------------------
    def get(self, run_id: str) -> RunRow:
        row = self.registry.get(run_id)
        if row is None:
            raise RequestError(404, SERVE_NOT_FOUND, f"no run {run_id!r}")
        return row

    def current(self, row: RunRow) -> RunRow:
        """``row`` with the live ``turns`` and ``calls`` of a run this worker is running
        (another worker has those last written to the registry)."""
        local = self._local.get(row.run_id)
        progress = local.progress if local is not None else None
        if progress is None or row.status != "running":
            return row
        from dataclasses import replace

        return replace(
            row, turns=max(row.turns, progress.turns), calls=max(row.calls, progress.calls)
        )

    def view(self, row: RunRow) -> dict[str, Any]:
        """The run object of the API (its counts live while this worker runs it)."""
        return run_view(self.registry, self.current(row))

    async def wait(self, run_id: str, wait_s: float) -> RunRow:
        """The run once it is no longer queued or running, or after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            row = self.get(run_id)
            left = deadline - time.monotonic()
            if row.status not in ("queued", "running") or left <= 0:
                return row
            local = self._local.get(run_id)
            if local is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(local.done.wait(), timeout=min(left, 1.0))
            else:
                await asyncio.sleep(min(left, 0.05))

    # -- cancel and approvals ----------------------------------------------------------------------
    def cancel(self, run_id: str) -> RunRow:
        row = self.get(run_id)
        if row.status not in LIVE:
            return row
        local = self._local.get(run_id)
        if local is not None:
            local.user_cancelled = True
            local.token.cancel("cancelled through the API")
            return row
        self.registry.update(run_id, durable=True, cancel_requested=True)
        if self.claims.take(run_id, row.key):  # nobody runs it (waiting, or not yet picked up)
            try:
                self._finish_cancelled(run_id)
            finally:
                self.claims.release(run_id)
        return self.get(run_id)

    def _finish_cancelled(self, run_id: str) -> None:
        if self.registry.set_status_if(run_id, LIVE, "cancelled"):
            self.registry.update(
                run_id,
                durable=True,
                error={"code": RUN_CANCELLED, "message": "the run was cancelled"},
            )

    def answer(
        self, run_id: str, call_id: str, *, approve: bool, digest: str, reason: str | None
    ) -> RunRow:
        """Record a decision for a pending call and, once none is left, resume the run."""
        from tubeless.durable._spi import record_decision

        row = self.get(run_id)
        pending = self.registry.pending(run_id) if row.status == "waiting" else []
        calls = [p for p in pending if p.get("call_id") == call_id]
        if not calls:
            raise RequestError(
                404, SERVE_NOT_FOUND, f"run {run_id} has no call {call_id!r} waiting"
            )
        chosen = [p for p in calls if p.get("digest") == digest]
        if not chosen:
            raise RequestError(
                409,
                SERVE_CONFLICT,
                f"digest does not match call {call_id!r}'s pending request "
                "(its arguments may have changed: read the run again)",
            )
        request = chosen[0]
        if not self.claims.take(run_id, row.key):
            raise RequestError(409, SERVE_CONFLICT, f"run {run_id} is being resumed; try again")
        launched = False
        try:
            with self.store.acquire(row.key) as lease:
                text = lease.read() or ""
                try:
                    updated = record_decision(
                        text,
                        row.key,
                        call_id,
                        approved=approve,
                        reason=reason,
                        route=str(request.get("route")),
                    )
                except LookupError as exc:
                    raise RequestError(404, SERVE_NOT_FOUND, str(exc)) from None
                lease.write(updated)
            left = [p for p in pending if p is not request]
            self.registry.update(run_id, pending=left)
            if not left and self.registry.set_status_if(run_id, ("waiting",), "running"):
                fresh = self.get(run_id)
                self._launch(fresh)
                launched = True
        finally:
            if not launched:
                self.claims.release(run_id)
        return self.get(run_id)

    def approvals(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for row in self.registry.with_status(("waiting",)):
            found.extend(self.registry.pending(row.run_id))
        return found
