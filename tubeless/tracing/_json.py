"""The compact JSON encoders the sinks write with (built once, C speed where CPython has it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

__all__ = ["compact_ascii", "compact_json"]


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compact_encoder(*, ensure_ascii: bool) -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=...)``, as fast as it gets.

    ``json.dumps`` with arguments builds a new encoder per call, and ``JSONEncoder.encode`` a
    new C encoder per call; on a trace sink's hot path that is about a fifth of the cost of a
    record, so the C encoder is built once when CPython provides it. Records are trees built by
    the record constructors, so the circular-reference check is left out.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    if make is None:  # pragma: no cover - other Python implementations
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=ensure_ascii).encode
    chunks = make(None, _not_serializable, quote, None, ":", ",", False, False, True)
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode


#: The compact UTF-8 JSON text of a record (or part of one), as the sinks store it.
compact_json: Final = _compact_encoder(ensure_ascii=False)
compact_ascii: Final = _compact_encoder(ensure_ascii=True)
