"""What the SQLite and Postgres trace sinks share: a lock, buffered rows, a flush timer, and the
rules for closing and for refusing records after a failed write.

A subclass makes the connection, buffers rows in ``export`` (its hot path stays its own) and
commits them in ``_commit``, called under the lock; a failed commit sets ``_failure``, after which
the sink refuses records (the run's fan-out then retires it with one warning).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Self

__all__ = ["BufferedSink"]


class BufferedSink:
    """Rows buffered under a lock and committed by a subclass's ``_commit``."""

    __slots__ = ("__weakref__", "_conn", "_failure", "_lock", "_rows", "_timer")

    def __init__(self) -> None:
        self._rows: list[Any] = []
        self._failure: BaseException | None = None
        # Exports and the timer's commit come from different threads.
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._conn: Any = None

    def _commit(self) -> None:
        """Commit the buffered rows (under the lock); on failure set ``_failure`` and raise."""
        raise NotImplementedError

    def flush(self) -> None:
        """Commit the buffered rows."""
        if self._conn is None or self._failure is not None:
            self._refuse()
        with self._lock:
            self._commit()

    def close(self) -> None:
        """Commit the buffered rows (unless a write failed before) and close the connection."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:  # outside the lock, which a firing timer may be waiting for
            timer.cancel()
            timer.join()
        with self._lock:
            conn = self._conn
            if conn is None:
                return
            try:
                if self._failure is None:
                    self._commit()
            finally:
                self._conn = None
                self._rows = []
                conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _refuse(self) -> None:
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        raise ValueError(
            f"{self!r} refuses records after a failed write: {self._failure}"
        ) from self._failure

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self._conn is None or self._failure is not None:
                return
            with contextlib.suppress(Exception):  # kept in _failure for the next export
                self._commit()
