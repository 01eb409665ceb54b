"""Starting a ``process`` worker by forking the driver, which has the project loaded already.

A spawned worker is a fresh interpreter that imports tubeless and loads the project itself:
0.5-0.9 s before its first row, longer than a batch of a thousand small rows takes to run.
A forked worker is a copy of the driver made after the driver loaded the project, ready in a
few milliseconds. Forking is safe only where the copy cannot inherit a half-held lock or a
connection it would share with the driver, so the driver forks only when (:func:`can_fork`)
the platform has ``fork``, this is the main thread and the only thread of the process (no lock
of another thread can be held mid-way), and the batch has no SQLite checkpoint file (SQLite
keeps per-process state about the files a process has open, which a forked copy would inherit
and a connection of its own would then share); else the engine spawns as before.

The forked copy never returns into the driver's code: it resets the signal handlers the
driver installed (a signal sent to the worker must not wake the driver's event loop through an
inherited wakeup descriptor), sends what it prints to stderr, closes the driver's ends of the
other workers' pipes (so each worker sees its own pipe close when the driver goes), runs the
given function with a fresh event loop, and ends with ``os._exit`` (no ``atexit`` hooks, no
flush of buffers inherited from the driver, no finaliser of the driver's objects). Objects the
driver held are frozen out of the copy's garbage collector for the same reason. A forked
worker is the driver's child: its exit status says how it died, as a spawned one's does.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal as signals
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable

__all__ = ["Forked", "can_fork", "fork"]


def can_fork(store_path: str | None) -> bool:
    """Whether a worker may be forked from this process now (see the module's docstring)."""
    if store_path is not None:
        from tubeless.durable import is_database_url

        if not is_database_url(store_path):
            return False  # a SQLite file the driver has open
    return (
        hasattr(os, "fork")
        and sys.platform != "darwin"  # macOS frameworks do not survive a fork without exec
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() == 1
    )


class Forked:
    """A forked worker process, waited for by its pid (the ``subprocess.Popen`` calls the
    engine uses: :meth:`wait`, :meth:`kill`)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid == 0:
                    return None
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code (negative: the signal that ended it); ``TimeoutError`` after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"worker {self.pid} still runs")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signals.SIGKILL)


def fork(main: Callable[[], None], close: Iterable[int]) -> Forked:
    """Fork a worker that runs ``main()`` then exits (status 0; 1 if ``main`` raised), with
    the descriptors ``close`` (the driver's ends of pipes) closed in it."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # else the copy's buffers would hold what the driver printed
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid != 0:
        gc.unfreeze()
        return Forked(pid)
    code = 1
    try:
        _become_worker(close)
        main()
        code = 0
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _become_worker(close: Iterable[int]) -> None:
    """Undo in the copy what belongs to the driver: signal handlers and their wakeup
    descriptor, stdin and stdout, the driver's ends of the workers' pipes."""
    signals.set_wakeup_fd(-1)
    for number in signals.valid_signals():
        with contextlib.suppress(OSError, ValueError, TypeError):
            if callable(signals.getsignal(number)):
                signals.signal(number, signals.SIG_DFL)
    signals.signal(signals.SIGINT, signals.SIG_IGN)  # the driver cancels rows by message
    os.dup2(2, 1)  # what a handler prints must not land among the rows on stdout
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the driver may be reading its inputs from stdin
    os.close(devnull)
    # Not the driver's stdin object either: its buffer may hold inputs read ahead.
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - the worker's, for good
    # Nor what the driver put in place of stdout and stderr (a progress display's proxies).
    if sys.__stdout__ is not None and sys.__stderr__ is not None:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    for fd in close:
        with contextlib.suppress(OSError):
            os.close(fd)
