"""Provider tests never reach a network or a real key: every request goes through an
``httpx.MockTransport`` (see ``fixtures/openai_responses.py``) and the environment holds known
fake keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.fixtures.anthropic_messages import ANTHROPIC_KEY
from tests.providers.fixtures.openai_responses import SECRET_KEY


@pytest.fixture(autouse=True)
def provider_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake keys, and no base URL or model taken from the developer's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"):
        monkeypatch.delenv(name, raising=False)
    yield
