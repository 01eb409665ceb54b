"""Where the serve token comes from, and that a made one is private and reused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tubeless._serve_token import TOKEN_ENV, load_token, token_matches


def test_a_token_is_made_once_0600_and_reused(tmp_path: Path) -> None:
    home = tmp_path / ".tubeless"
    first = load_token(home, environ={})
    assert first.made and len(first.value) >= 32
    assert stat.S_IMODE((home / "serve-token").stat().st_mode) == 0o600
    again = load_token(home, environ={})
    assert (again.value, again.made) == (first.value, False)
    assert first.value not in repr(first)


def test_the_environment_wins_then_the_token_file(tmp_path: Path) -> None:
    given = tmp_path / "token.txt"
    given.write_text("from-the-file-0123456789\n")
    chosen = load_token(tmp_path, token_file=given, environ={TOKEN_ENV: "from-the-env-0123456789"})
    assert (chosen.value, chosen.source) == ("from-the-env-0123456789", TOKEN_ENV)
    assert load_token(tmp_path, token_file=given, environ={}).value == "from-the-file-0123456789"
    assert not (tmp_path / "serve-token").exists()


def test_a_short_token_is_refused_naming_its_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"{TOKEN_ENV}: a serve token must be at least 16"):
        load_token(tmp_path, environ={TOKEN_ENV: "short"})


def test_tokens_are_compared_exactly() -> None:
    assert token_matches("a" * 20, "a" * 20)
    assert not token_matches("a" * 20, "a" * 19)
    assert not token_matches("a" * 20, None)
    assert not token_matches("a" * 20, "\udcff")
