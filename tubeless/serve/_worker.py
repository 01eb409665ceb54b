"""The app factory each uvicorn worker process calls: its config comes from the environment."""

from __future__ import annotations

from typing import Any

from tubeless.serve._app import create_app
from tubeless.serve._config import from_environment

__all__ = ["app_from_environment"]


def app_from_environment() -> Any:
    """``create_app`` with the config the ``tubeless serve`` command put in the environment."""
    config = from_environment()
    return create_app(config.project, config=config)
