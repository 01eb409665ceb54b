"""The package version, kept apart so reading it imports nothing else."""

from __future__ import annotations

__version__ = "0.1.0"
