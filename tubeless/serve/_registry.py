"""The runs a server was asked for: one table every worker (and, on PostgreSQL, every host) of
the server shares.

A checkpoint document says where a task is; it does not say which HTTP run it belongs to, what
input started it, or that a client asked to cancel it. This table does, so any worker (and a
server started after a crash) can answer for any run and resume it. It holds run inputs, so
a SQLite file is a data file: created 0600, never a trace (on PostgreSQL the table is
``tubeless_serve_runs`` beside the checkpoints, see ``_db``). A new run and a cancellation
are synced to disk before they are answered (``synchronous=FULL``); other updates survive a killed
process, and one lost to a power cut is recorded again when the run is next picked up.

Statuses: ``queued`` (recorded, not yet picked up), ``running``, ``waiting`` (for approvals; no
worker runs it), ``completed``, ``failed``, ``cancelled``. A run is *live* in the first three.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tubeless.serve._db import ServeDb, open_db

__all__ = ["LIVE", "TERMINAL", "RunRegistry", "RunRow"]

LIVE = ("queued", "running", "waiting")
TERMINAL = ("completed", "failed", "cancelled")


def _schema(db: ServeDb) -> list[str]:
    runs = db.table("serve_runs")
    return [
        f"""
CREATE TABLE IF NOT EXISTS {runs} (
    seq {db.serial},
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
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
)
""",
        f"CREATE INDEX IF NOT EXISTS {runs}_key_idx ON {runs} (key, status)",
        f"CREATE INDEX IF NOT EXISTS {runs}_status_idx ON {runs} (status)",
    ]


#: Columns added after the first release of the table: (name, declaration).
_ADDED = (
    ("caller", "TEXT"),
    ("restart", "INTEGER NOT NULL DEFAULT 0"),
    ("claim_owner", "TEXT"),
    ("claim_until_ms", "BIGINT"),
    ("tokens", "BIGINT NOT NULL DEFAULT 0"),
    ("cost_usd", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
)
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
    """The runs table of a server's store: a SQLite file (made 0600 on first use) or the
    PostgreSQL database of the checkpoints (``tubeless_serve_runs``)."""

    def __init__(self, where: str) -> None:
        self.db = open_db(where)
        self._t = self.db.table("serve_runs")
        try:
            self.db.ensure(_schema(self.db), [(self._t, n, d) for n, d in _ADDED])
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def _select(self, where: str, params: Sequence[Any], tail: str = "") -> list[RunRow]:
        rows = self.db.rows(f"SELECT {_COLUMNS} FROM {self._t} WHERE {where} {tail}", params)
        return [_row(r) for r in rows]

    def _one(self, where: str, params: tuple[Any, ...]) -> RunRow | None:
        found = self._select(where, params, "LIMIT 1")
        return found[0] if found else None

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
        with self.db.transaction(durable=True):
            found = None
            if idempotency_key is not None:
                found = self._one("idempotency_key = ?", (idempotency_key,))
            if found is None:
                found = self._one(f"key = ? AND status IN ({marks})", (key, *LIVE))
            if found is not None:
                return found, False
            self.db.run(
                f"INSERT INTO {self._t} (run_id, entry, key, idempotency_key, input_json, "
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
        row = self.get(run_id)
        assert row is not None
        return row, True

    def update_live(self, run_id: str, owner: str | None, *, turns: int, calls: int) -> None:
        """A running run's counts, written only while it is still running here: a worker that
        lost the run (paused past its claim, then woken) never overwrites the new holder's or
        the final counts."""
        claim = "" if owner is None else " AND (claim_owner IS NULL OR claim_owner = ?)"
        self.db.run(
            f"UPDATE {self._t} SET turns = ?, calls = ?, updated_at_ms = ?"
            f" WHERE run_id = ? AND status = 'running'{claim}",
            (turns, calls, _now_ms(), run_id, *(() if owner is None else (owner,))),
            durable=False,
        )

    def update(self, run_id: str, *, durable: bool = False, **fields: Any) -> None:
        """Set columns of one run (``result``/``error``/``usage``/``pending`` JSON-encoded);
        ``durable``: synced to disk before this returns."""
        columns: list[str] = []
        values: list[Any] = []
        for name, value in fields.items():
            if name == "usage":  # its tokens and cost also in columns /metrics sums cheaply
                tokens, cost = _metered(value)
                columns += ["tokens = ?", "cost_usd = ?"]
                values += [tokens, cost]
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
        self.db.run(
            f"UPDATE {self._t} SET {', '.join(columns)} WHERE run_id = ?",
            (*values, run_id),
            durable=durable,
        )

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """The approval requests a waiting run copied here (``[]`` for none)."""
        found = self.db.one(f"SELECT pending_json FROM {self._t} WHERE run_id = ?", (run_id,))
        value = None if found is None else _loads(found[0])
        return value if isinstance(value, list) else []

    def set_status_if(self, run_id: str, expected: Sequence[str], status: str) -> bool:
        """Move a run to ``status`` only from one of ``expected``; whether it moved."""
        marks = ",".join("?" * len(expected))
        changed = self.db.run(
            f"UPDATE {self._t} SET status = ?, updated_at_ms = ? "
            f"WHERE run_id = ? AND status IN ({marks})",
            (status, _now_ms(), run_id, *expected),
        )
        return changed == 1

    # -- claims: which worker runs a run (used with a shared database) -------------------------
    def claim(self, run_id: str, owner: str, ttl_ms: int) -> bool:
        """Make ``owner`` the worker running ``run_id`` for ``ttl_ms`` when nobody else holds it
        (or their claim expired) and the run is live; whether ``owner`` holds it now."""
        now = self.db.now_ms
        changed = self.db.run(
            f"UPDATE {self._t} SET claim_owner = ?, claim_until_ms = {now} + ? WHERE run_id = ? "
            "AND status IN ('queued', 'running', 'waiting') AND (claim_owner IS NULL "
            f"OR claim_owner = ? OR claim_until_ms IS NULL OR claim_until_ms < {now})",
            (owner, ttl_ms, run_id, owner),
        )
        return changed == 1

    def renew_claims(self, run_ids: Sequence[str], owner: str, ttl_ms: int) -> list[str]:
        """Push ``owner``'s claims on ``run_ids`` ahead; the ids it no longer holds."""
        lost: list[str] = []
        for run_id in run_ids:
            changed = self.db.run(
                f"UPDATE {self._t} SET claim_until_ms = {self.db.now_ms} + ? "
                "WHERE run_id = ? AND claim_owner = ?",
                (ttl_ms, run_id, owner),
            )
            if changed != 1:
                lost.append(run_id)
        return lost

    def unclaim(self, run_id: str, owner: str) -> None:
        self.db.run(
            f"UPDATE {self._t} SET claim_owner = NULL, claim_until_ms = NULL "
            "WHERE run_id = ? AND claim_owner = ?",
            (run_id, owner),
        )

    def listing(
        self,
        *,
        entry: str | None = None,
        status: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[RunRow]:
        """Runs newest first; ``before`` is a ``seq`` cursor (exclusive)."""
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
        return self._select(" AND ".join(where), (*params, limit), "ORDER BY seq DESC LIMIT ?")

    def latest_on_key(self, key: str) -> RunRow | None:
        """The newest run of checkpoint ``key``, whatever its status."""
        return self._one("key = ? ORDER BY seq DESC", (key,))

    def owned_by(self, caller: str | None) -> list[RunRow]:
        """The runs ``caller`` started through a protocol, oldest first."""
        where = "caller IS NULL" if caller is None else "caller = ?"
        return self._select(where, () if caller is None else (caller,), "ORDER BY seq")

    def with_status(self, statuses: Sequence[str]) -> list[RunRow]:
        marks = ",".join("?" * len(statuses))
        return self._select(f"status IN ({marks})", tuple(statuses), "ORDER BY seq")

    def counts(self) -> dict[str, int]:
        """Runs by status."""
        rows = self.db.rows(f"SELECT status, COUNT(*) FROM {self._t} GROUP BY status")
        return {str(status): int(count) for status, count in rows}

    def totals(self) -> tuple[int, int]:
        """All calls and turns the recorded runs made."""
        calls, turns, _, _ = self.consumed()
        return calls, turns

    def consumed(self) -> tuple[int, int, int, float]:
        """All calls, turns, tokens and US dollars the recorded runs' budgets consumed."""
        found = self.db.one(
            "SELECT COALESCE(SUM(calls), 0), COALESCE(SUM(turns), 0), "
            f"COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0) FROM {self._t}"
        )
        assert found is not None
        return int(found[0]), int(found[1]), int(found[2]), float(found[3])


def _metered(usage: Any) -> tuple[int, float]:
    """The total tokens and the cost in a run's ``usage`` (0 for what it does not hold)."""
    if not isinstance(usage, dict):
        return 0, 0.0
    tokens = usage.get("total_tokens", 0)
    try:
        cost = float(usage.get("cost_usd", 0))
    except (TypeError, ValueError):
        cost = 0.0
    return (tokens if isinstance(tokens, int) else 0), cost
