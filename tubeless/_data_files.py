"""Opening the files tubeless reads and writes by name, refusing what is no plain file.

One home for the rule project files follow: a named pipe would block a read forever, a device
(``/dev/zero``) never ends, so a path is opened without waiting (``O_NONBLOCK``) and ``fstat``
says what it is, whatever it was swapped for since it was named. Data files written by name
(cassettes, batch output) are opened with ``O_NOFOLLOW``: a symbolic link planted where the
file goes would otherwise have its target truncated and re-moded.

Every refusal is an :class:`OSError` with the path as ``filename`` and the reason as
``strerror``, which the CLI prints as ``error: <path>: <reason>`` (exit 2).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = ["file_kind", "open_data_file", "open_regular", "write_failure"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words (``a named pipe``, ``a directory``)."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def _not_regular(path: str, mode: int) -> OSError:
    return OSError(errno.EINVAL, f"not a regular file ({file_kind(mode)})", path)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (links followed).

    Raises:
        OSError: Missing, unreadable, or a named pipe, device, socket or directory.
    """
    name = os.fspath(path)
    descriptor = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, mode)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return open(descriptor, "rb", closefd=True)


def open_data_file(
    path: str | os.PathLike[str], *, append: bool = False, private: bool = False
) -> int:
    """A descriptor of ``path`` opened for writing: created if missing, truncated unless
    ``append``, mode 0600 when ``private`` (an existing file too).

    The last component must not be a symbolic link, and the file must be a regular one: it is
    checked before anything is truncated, so a refused path is left as it was.

    Raises:
        OSError: A symbolic link, a named pipe or device, or not writable.
    """
    name = os.fspath(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC
    if append:
        flags |= os.O_APPEND
    try:
        descriptor = os.open(name, flags, 0o600 if private else 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENXIO and os.path.islink(name)):
            raise OSError(
                errno.ELOOP,
                "is a symbolic link; tubeless writes data files only to the file itself",
                name,
            ) from None
        if exc.errno == errno.ENXIO:  # a named pipe nobody reads
            raise _not_regular(name, stat.S_IFIFO) from None
        raise
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, mode)
        os.set_blocking(descriptor, True)
        if not append:
            os.ftruncate(descriptor, 0)
        if private:
            os.fchmod(descriptor, 0o600)  # an existing file keeps its own mode through O_CREAT
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def write_failure(path: str | os.PathLike[str], exc: OSError, kept: str) -> OSError:
    """The error for a data file that could not be written (a full disk): names the file, the
    reason and ``kept``, what the file still holds."""
    reason = exc.strerror or str(exc)
    return OSError(exc.errno, f"cannot write it ({reason}); {kept}", os.fspath(path))
