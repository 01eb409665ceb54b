"""The runs a server was asked for: one SQLite table every worker of the server shares.

A checkpoint document says where a task is; it does not say which HTTP run it belongs to, what
input started it, or that a client asked to cancel it. This table does, so any worker (and a
server started after a crash) can answer for any run and resume it. It holds run inputs, so
the file is a data file: created 0600, never a trace. A new run and a cancellation are synced
to disk before they are answered (``synchronous=FULL``); other updates survive a killed
process, and one lost to a power cut is recorded again when the run is next picked up.

Statuses: ``queued`` (recorded, not yet picked up), ``running``, ``waiting`` (for approvals; no
worker runs it), ``completed``, ``failed``, ``cancelled``. A run is *live* in the first three.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LIVE", "TERMINAL", "RunRegistry", "RunRow"]

LIVE = ("queued", "running", "waiting")
TERMINAL = ("completed", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS serve_runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    entry TEXT NOT NULL,
    key TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    input_json TEXT NOT NULL,
    limits_json TEXT,
    status TEXT NOT NULL,
    result_json TEXT,
    error_json TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 0,
    usage_json TEXT,
    pending_json TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    caller TEXT,
    restart INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
)
"""
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS serve_runs_key_idx ON serve_runs (key, status)",
    "CREATE INDEX IF NOT EXISTS serve_runs_status_idx ON serve_runs (status)",
)
#: Columns added after the first release of the table: (name, declaration).
_ADDED = (("caller", "TEXT"), ("restart", "INTEGER NOT NULL DEFAULT 0"))
_COLUMNS = (
    "seq, run_id, entry, key, idempotency_key, input_json, limits_json, status, result_json, "
    "error_json, turns, calls, usage_json, cancel_requested, created_at_ms, updated_at_ms, "
    "caller, restart"
)


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run as the table holds it (JSON columns decoded)."""

    seq: int
    run_id: str
    entry: str
    key: str
    idempotency_key: str | None
    input: Any
    limits: dict[str, Any] | None
    status: str
    result: Any
    error: dict[str, Any] | None
    turns: int
    calls: int
    usage: dict[str, Any] | None
    cancel_requested: bool
    created_at_ms: int
    updated_at_ms: int
    has_result: bool
    caller: str | None = None
    """Who started the run through a protocol (a hash of its bearer token); ``None``: the API."""
    restart: bool = False
    """Start the key over instead of resuming it (first launch only)."""

    @property
    def live(self) -> bool:
        return self.status in LIVE


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _row(values: Sequence[Any]) -> RunRow:
    (seq, run_id, entry, key, idem, input_json, limits_json, status, result_json, error_json,
     turns, calls, usage_json, cancel, created, updated, caller, restart) = values  # fmt: skip
    return RunRow(
        seq=seq,
        run_id=run_id,
        entry=entry,
        key=key,
        idempotency_key=idem,
        input=_loads(input_json),
        limits=_loads(limits_json),
        status=status,
        result=_loads(result_json),
        error=_loads(error_json),
        turns=turns,
        calls=calls,
        usage=_loads(usage_json),
        cancel_requested=bool(cancel),
        created_at_ms=created,
        updated_at_ms=updated,
        has_result=result_json is not None,
        caller=caller,
        restart=bool(restart),
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


class RunRegistry:
    """The ``serve_runs`` table of one SQLite file (made 0600 on first use)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(
                os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            )
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 10000")
        self._db.execute("PRAGMA journal_mode = WAL")
        # Updates are synced with the write-ahead log's checkpoints only (NORMAL: they survive
        # a killed process, and a power cut can only lose a status the checkpoint still holds,
        # so the next sweep records it again); a new run is synced before it is answered.
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(_SCHEMA)
            present = {row[1] for row in self._db.execute("PRAGMA table_info(serve_runs)")}
            for name, declaration in _ADDED:  # a registry made before the column existed
                if name not in present:
                    self._db.execute(f"ALTER TABLE serve_runs ADD COLUMN {name} {declaration}")
            for statement in _INDEXES:
                self._db.execute(statement)
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _one(self, where: str, params: tuple[Any, ...]) -> RunRow | None:
        with self._lock:
            found = self._db.execute(
                f"SELECT {_COLUMNS} FROM serve_runs WHERE {where}", params
            ).fetchone()
        return None if found is None else _row(found)

    def get(self, run_id: str) -> RunRow | None:
        return self._one("run_id = ?", (run_id,))

    def by_idempotency_key(self, idempotency_key: str) -> RunRow | None:
        return self._one("idempotency_key = ?", (idempotency_key,))

    def live_on_key(self, key: str) -> RunRow | None:
        """The live run of checkpoint ``key``, if one is."""
        marks = ",".join("?" * len(LIVE))
        return self._one(f"key = ? AND status IN ({marks}) ORDER BY seq DESC", (key, *LIVE))

    def create(
        self,
        *,
        run_id: str,
        entry: str,
        key: str,
        raw_input: Any,
        limits: dict[str, Any] | None,
        idempotency_key: str | None,
        caller: str | None = None,
        restart: bool = False,
    ) -> tuple[RunRow, bool]:
        """Record a queued run; ``(row, True)``. When the idempotency key or a live run on the
        checkpoint key got there first (another worker at the same moment), ``(that, False)``."""
        now = _now_ms()
        marks = ",".join("?" * len(LIVE))
        with self._lock:
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                found = None
                if idempotency_key is not None:
                    found = self._db.execute(
                        f"SELECT {_COLUMNS} FROM serve_runs WHERE idempotency_key = ?",
                        (idempotency_key,),
                    ).fetchone()
                if found is None:
                    found = self._db.execute(
                        f"SELECT {_COLUMNS} FROM serve_runs WHERE key = ? AND status IN ({marks})",
                        (key, *LIVE),
                    ).fetchone()
                if found is not None:
                    self._db.execute("COMMIT")
                    return _row(found), False
                self._db.execute(
                    "INSERT INTO serve_runs (run_id, entry, key, idempotency_key, input_json, "
                    "limits_json, status, created_at_ms, updated_at_ms, caller, restart) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                    (
                        run_id,
                        entry,
                        key,
                        idempotency_key,
                        json.dumps(raw_input, ensure_ascii=True),
                        None if limits is None else json.dumps(limits),
                        now,
                        now,
                        caller,
                        int(restart),
                    ),
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            finally:
                self._db.execute("PRAGMA synchronous = NORMAL")
        row = self.get(run_id)
        assert row is not None
        return row, True

    def update(self, run_id: str, *, durable: bool = False, **fields: Any) -> None:
        """Set columns of one run (``result``/``error``/``usage``/``pending`` JSON-encoded);
        ``durable``: synced to disk before this returns."""
        columns: list[str] = []
        values: list[Any] = []
        for name, value in fields.items():
            if name in ("result", "error", "usage", "pending"):
                columns.append(f"{name}_json = ?")
                values.append(None if value is None else json.dumps(value, ensure_ascii=True))
            elif name in ("status", "turns", "calls", "cancel_requested"):
                columns.append(f"{name} = ?")
                values.append(int(value) if name == "cancel_requested" else value)
            else:
                raise ValueError(f"unknown run column {name!r}")
        columns.append("updated_at_ms = ?")
        values.append(_now_ms())
        with self._lock:
            if durable:
                self._db.execute("PRAGMA synchronous = FULL")
            try:
                self._db.execute(
                    f"UPDATE serve_runs SET {', '.join(columns)} WHERE run_id = ?",
                    (*values, run_id),
                )
            finally:
                if durable:
                    self._db.execute("PRAGMA synchronous = NORMAL")

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """The approval requests a waiting run copied here (``[]`` for none)."""
        with self._lock:
            found = self._db.execute(
                "SELECT pending_json FROM serve_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        value = None if found is None else _loads(found[0])
        return value if isinstance(value, list) else []

    def set_status_if(self, run_id: str, expected: Sequence[str], status: str) -> bool:
        """Move a run to ``status`` only from one of ``expected``; whether it moved."""
        marks = ",".join("?" * len(expected))
        with self._lock:
            cursor = self._db.execute(
                f"UPDATE serve_runs SET status = ?, updated_at_ms = ? "
                f"WHERE run_id = ? AND status IN ({marks})",
                (status, _now_ms(), run_id, *expected),
            )
        return cursor.rowcount == 1

    def listing(
        self,
        *,
        entry: str | None = None,
        status: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[RunRow]:
        """Newest first; ``before`` is a ``seq`` cursor (exclusive)."""
        where: list[str] = ["1 = 1"]
        params: list[Any] = []
        if entry is not None:
            where.append("entry = ?")
            params.append(entry)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if before is not None:
            where.append("seq < ?")
            params.append(before)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM serve_runs WHERE {' AND '.join(where)} "
                "ORDER BY seq DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [_row(r) for r in rows]

    def latest_on_key(self, key: str) -> RunRow | None:
        """The newest run of checkpoint ``key``, whatever its status."""
        return self._one("key = ? ORDER BY seq DESC", (key,))

    def owned_by(self, caller: str | None) -> list[RunRow]:
        """The runs ``caller`` started through a protocol, oldest first."""
        where = "caller IS NULL" if caller is None else "caller = ?"
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM serve_runs WHERE {where} ORDER BY seq",
                () if caller is None else (caller,),
            ).fetchall()
        return [_row(r) for r in rows]

    def with_status(self, statuses: Sequence[str]) -> list[RunRow]:
        marks = ",".join("?" * len(statuses))
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM serve_runs WHERE status IN ({marks}) ORDER BY seq",
                tuple(statuses),
            ).fetchall()
        return [_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        """Runs by status."""
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) FROM serve_runs GROUP BY status")
            return {status: count for status, count in rows}

    def totals(self) -> tuple[int, int]:
        """All calls and turns the recorded runs made."""
        with self._lock:
            found = self._db.execute(
                "SELECT COALESCE(SUM(calls), 0), COALESCE(SUM(turns), 0) FROM serve_runs"
            ).fetchone()
        return int(found[0]), int(found[1])
