"""One run's use of one checkpoint key: the lease, the last document, and serialised commits.

A :class:`CheckpointSession` is what ``run(checkpoints=..., checkpoint_key=...)`` hands down a
run tree. It opens nothing until the first agent asks (plans and dry runs open no storage),
then holds the key's lease until the run ends. Every commit is encoded and checked to read
back as the same text before it is written (the typed document checks each new value once,
``_encode``); a write that fails poisons the session, so nothing runs past an
intent that was never recorded. The document's meaning belongs to the layer above (the agent
harness); this module only checks that it is a JSON object of the right version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tubeless.durable._store import CheckpointStore, Lease, check_key
from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

__all__ = [
    "DOCUMENT_VERSION",
    "SESSION_SLOT",
    "CheckpointSession",
    "decode",
    "encode",
]

#: The run-environment slot that carries the session down a run tree.
SESSION_SLOT = "tubeless.durable.session"
#: The version of the checkpoint document this release writes.
DOCUMENT_VERSION = 1


def encode(document: dict[str, Any]) -> str:
    """The stored text of ``document`` (sorted keys, no NaN), checked to round-trip exactly."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    again = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), allow_nan=False)
    if again != text:
        raise ValueError("the document does not survive a JSON round trip")
    return text


def decode(text: str, where: str) -> dict[str, Any]:
    """A stored document, or ``TUBELESS_CHECKPOINT_INVALID`` saying what is wrong with it."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(
            CHECKPOINT_INVALID, f"{where}: the checkpoint document is not JSON ({exc})"
        ) from None
    if not isinstance(document, dict):
        raise CheckpointError(
            CHECKPOINT_INVALID, f"{where}: the checkpoint document is not an object"
        )
    version = document.get("version")
    if version != DOCUMENT_VERSION:
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"{where}: unsupported checkpoint document version {version!r} "
            f"(this release reads version {DOCUMENT_VERSION})",
        )
    return document


class CheckpointSession:
    """The lease on one key for the length of one run (opened on first use).

    Attributes:
        key: The checkpoint key.
        entry: The id of the pipeline or agent the run started.
        restart: Ignore what the key holds and start over (the first commit replaces it).
        earlier: The key an older release gave the same input (round 2: the raw input's); when
            ``key`` holds nothing and ``earlier`` does, the session uses ``earlier`` instead.
        data: Free for the layer above (the agent harness keeps its book of the run here).
    """

    __slots__ = ("_lease", "_poisoned", "_store", "data", "earlier", "entry", "key", "restart")

    def __init__(
        self,
        store: CheckpointStore,
        *,
        key: str,
        entry: str,
        restart: bool,
        earlier: str | None = None,
    ) -> None:
        self._store = store
        self.key = check_key(key)
        self.earlier = earlier if earlier != key else None
        self.entry = entry
        self.restart = restart
        self._lease: Lease | None = None
        self._poisoned: BaseException | None = None
        self.data: Any = None

    def open(self) -> dict[str, Any] | None:
        """Take the key's lease and read its document (``None`` when new or restarting)."""
        assert self._lease is None, "the session is already open"
        self._lease = self._store.acquire(self.key)
        if self.restart:
            return None  # not even read: a key the store refuses to read can be started over
        text = self._lease.read()
        if text is None and self.earlier is not None:
            earlier = self._store.acquire(self.earlier)
            text = earlier.read()
            if text is None:
                earlier.close()
            else:  # the task an older release keyed by its raw input goes on under that key
                self._lease.close()
                self._lease, self.key = earlier, self.earlier
        if text is None:
            return None
        return decode(text, f"checkpoint {self.key!r}")

    @property
    def poisoned(self) -> bool:
        """Whether a write failed (the run must stop; nothing more is written)."""
        return self._poisoned is not None

    def commit(self, document: Any, encoder: Callable[[Any], str] = encode) -> None:
        """Encode, check and durably write ``document``; a failure stops every later commit.

        ``encoder`` replaces :func:`encode` (for a typed document: it must give the same text
        as :func:`encode`, as ``CheckpointDocument.to_json`` does, each new value checked once).
        """
        if self._poisoned is not None:
            raise CheckpointError(
                CHECKPOINT_INVALID,
                f"checkpoint {self.key!r}: an earlier write failed, so the run cannot go on",
            ) from self._poisoned
        assert self._lease is not None, "commit before open"
        try:
            text = encoder(document)
            self._lease.write(text)
        except Exception as exc:
            self._poisoned = exc
            raise CheckpointError(
                CHECKPOINT_INVALID, f"checkpoint {self.key!r} could not be written: {exc}"
            ) from exc

    def close(self) -> None:
        """Release the lease (idempotent)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()
