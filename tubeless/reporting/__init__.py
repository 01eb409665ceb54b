"""Human-readable output: plan text and the run reporters (plain lines, live view).

The reporters are trace sinks: attach the one :func:`choose_reporter` picks with
``run(trace=[reporter, ...])`` and close it when the run ends. Both have ``cancelling(reason)``,
which the CLI calls on a first signal: the plain reporter prints one notice line, the live view
says ``cancelling…`` in its header. The live view (and ``rich``) is imported only when it is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, TextIO

from tubeless.reporting.graph import build_graph, render_graph
from tubeless.reporting.inspect_text import format_inspect, inspect_dict
from tubeless.reporting.plain import PlainReporter, stream_is_terminal
from tubeless.reporting.plan_text import format_plan
from tubeless.tracing.sinks import TraceSink

if TYPE_CHECKING:
    from tubeless.reporting._live_model import LiveModel, Row
    from tubeless.reporting.live import LiveView

__all__ = [
    "LiveModel",
    "LiveView",
    "PlainReporter",
    "Row",
    "build_graph",
    "choose_reporter",
    "format_inspect",
    "format_plan",
    "inspect_dict",
    "render_graph",
]

_LAZY = {
    "LiveView": "tubeless.reporting.live",
    "LiveModel": "tubeless.reporting._live_model",
    "Row": "tubeless.reporting._live_model",
}


def choose_reporter(stream: TextIO, *, quiet: bool, live: bool | None = None) -> TraceSink | None:
    """The reporter for a run whose report goes to ``stream``.

    Args:
        stream: Where the report goes (the CLI passes ``sys.stderr``).
        quiet: No report at all (``None`` is returned).
        live: The live view (``True``) or plain lines (``False``); by default the live view
            when ``stream`` is a terminal and ``TERM`` is not ``dumb``.

    Returns:
        ``None`` when quiet, else a :class:`LiveView` or a :class:`PlainReporter`; the caller
        closes it after the run.
    """
    if quiet:
        return None
    if live is None:
        live = stream_is_terminal(stream)
    if live:
        view: TraceSink = import_module("tubeless.reporting.live").LiveView(stream)
        return view
    return PlainReporter(stream)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tubeless.reporting' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
