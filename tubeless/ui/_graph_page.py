"""The graph page's data: a project's entries, each drawn as SVG on request.

``tubeless ui`` needs no project: without one the page says how to give one (``--project``).
The project is loaded once, on the first request that needs it; a file that cannot be loaded is
reported on the page with its error line.
"""

from __future__ import annotations

import threading
from typing import Any

from markupsafe import Markup

from tubeless.errors import TubelessError

__all__ = ["GraphSource"]


class GraphSource:
    """Where graphs come from: a project path, a loaded project, or nothing."""

    def __init__(self, project: Any) -> None:
        self._given = project
        self._project: Any = None
        self._problem: str | None = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._project is None and self._problem is None and self._given is not None:
                if isinstance(self._given, str):
                    from tubeless.project import load_project

                    try:
                        self._project = load_project(self._given)
                    except (TubelessError, OSError) as exc:
                        self._problem = str(exc)
                else:
                    self._project = self._given
            return self._project

    def page(self, entry: str | None) -> dict[str, Any]:
        """``{entries, entry, svg, problem, configured}`` for the graph of ``entry`` (the
        project's default entry, else its first, when ``None``)."""
        project = self._load()
        if project is None:
            return {
                "configured": self._given is not None,
                "problem": self._problem,
                "entries": [],
                "entry": None,
                "svg": None,
            }
        from tubeless.reporting.graph import build_graph
        from tubeless.ui._graph_svg import graph_svg

        ids = [*project.agents, *project.pipelines]
        chosen = entry if entry in ids else (getattr(project, "default", None) or ids[0])
        svg = Markup(graph_svg(build_graph(project.get(chosen))))
        return {
            "configured": True,
            "problem": None,
            "entries": ids,
            "entry": chosen,
            "svg": svg,
            "project": project,
        }
