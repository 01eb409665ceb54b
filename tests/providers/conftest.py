"""Provider tests never reach a network or a real key: every request goes through an
``httpx.MockTransport`` (see ``fixtures/openai_responses.py``) and the environment holds a
known fake key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.fixtures.openai_responses import SECRET_KEY


@pytest.fixture(autouse=True)
def openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fake key, and no base URL or model taken from the developer's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    yield
