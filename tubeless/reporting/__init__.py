"""Human-readable output: plan text (and, later, the run reporters)."""

from __future__ import annotations

from tubeless.reporting.plan_text import format_plan

__all__ = ["format_plan"]
