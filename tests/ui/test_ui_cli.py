"""``tubeless ui`` as a command: arguments, the token, the bound address, the Host guard."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fixtures import ui as made
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import HANG_GUARD


def test_a_missing_trace_is_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = tubeless(capsys, "ui", tmp_path / "nope.ndjson")
    assert outcome.code == 2
    assert "nope.ndjson" in outcome.err and "Traceback" not in outcome.err


def test_a_short_token_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short = tmp_path / "token"
    short.write_text("short\n", encoding="utf-8")
    outcome = tubeless(capsys, "ui", "--token-file", short)
    assert outcome.code == 1 and "at least 16 characters" in outcome.err


def test_the_token_is_made_once_printed_once_and_the_host_header_is_checked(
    tmp_path: Path,
) -> None:
    trace = made.delegation_trace(tmp_path)
    with made.UiProcess(tmp_path, trace) as first:
        said = first.said
        token_file = tmp_path / ".tubeless" / "serve-token"
        token = token_file.read_text(encoding="utf-8").strip()
        assert f"login token (saved in .tubeless/serve-token): {token}" in said
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert first.url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=first.url, timeout=HANG_GUARD) as client:
            assert client.get("/login").status_code == 200
            rebound = client.get("/login", headers={"host": "evil.example"})
            assert rebound.status_code == 400
            auth = {"authorization": f"Bearer {token}"}
            assert "delegating-agent" in client.get("/", headers=auth).text
    with made.UiProcess(tmp_path, trace) as again:
        assert token not in again.said and "log in with the token from" in again.said


def test_the_templates_css_and_js_are_package_data() -> None:
    """The pages read their files from the installed package: every one matches a pattern of
    ``package-data``, and there is one CSS and one JavaScript file, no more."""
    import fnmatch
    import tomllib

    data = tomllib.loads((made.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = data["tool"]["setuptools"]["package-data"]["tubeless"]
    folder = made.ROOT / "tubeless" / "ui"
    files = [
        str(path.relative_to(folder.parent))
        for path in folder.rglob("*")
        if path.is_file() and path.suffix != ".py" and "__pycache__" not in path.parts
    ]
    assert files and all(any(fnmatch.fnmatch(f, p) for p in shipped) for f in files)
    assert sorted(p.name for p in (folder / "static").iterdir()) == ["ui.css", "ui.js"]


def test_without_stores_it_reads_what_serve_keeps_in_dot_tubeless(tmp_path: Path) -> None:
    home = tmp_path / ".tubeless"
    home.mkdir()
    made.cli("trace", "convert", made.delegation_trace(tmp_path), home / "traces.sqlite")
    _, store = made.waiting_approval(tmp_path)
    store.rename(home / "checkpoints.sqlite")
    with made.UiProcess(tmp_path, token=made.TOKEN) as process:
        assert "reading .tubeless/traces.sqlite" in process.said
        assert "reading .tubeless/checkpoints.sqlite" in process.said
        auth = {"authorization": f"Bearer {made.TOKEN}"}
        with httpx.Client(base_url=process.url, timeout=HANG_GUARD, headers=auth) as client:
            assert "delegating-agent" in client.get("/").text
            assert 'data-row="approval"' in client.get("/approvals").text
