"""``tubeless serve``'s command line: refusals, the token made once, --no-auth, CORS, workers."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
import pytest

from tests.serve.conftest import Served, wait_status
from tubeless._cli._app import main


def test_no_auth_is_a_usage_error_unless_bound_to_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served(tmp_path)
    code = main(["serve", str(served.project), "--host", "0.0.0.0", "--no-auth"])
    assert code == 1
    assert "--no-auth is refused on 0.0.0.0" in capsys.readouterr().err
    assert not (tmp_path / ".tubeless").exists()  # refused before anything was made


def test_a_missing_project_exits_2(tmp_path: Path) -> None:
    assert main(["serve", str(tmp_path / "nope.yaml")]) == 2


@pytest.mark.slow
def test_the_token_is_made_once_0600_printed_once_and_reused(served: Served) -> None:
    first = served.start(token=None)
    lines = [line for line in first.stderr().splitlines() if line.startswith("token: ")]
    assert len(lines) == 1
    token = lines[0].split()[1]
    stored = served.folder / ".tubeless" / "serve-token"
    assert stored.read_text().strip() == token
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert (served.folder / ".tubeless" / "checkpoints.sqlite").exists()
    with first.client(token) as client:
        assert client.get("/v1/runs").status_code == 200
    first.stop()
    again = served.start(token=None, port=first.port)
    assert "token: " not in again.stderr()
    with again.client(token) as client:
        assert client.get("/v1/runs").status_code == 200


def test_no_auth_on_loopback_and_an_allowed_cors_origin(served: Served) -> None:
    server = served.start("--no-auth", "--cors-origin", "https://app.example", token=None)
    with server.client(None) as client:
        assert client.get("/v1/runs").status_code == 200
        preflight = client.options(
            "/v1/runs",
            headers={"origin": "https://app.example", "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        plain = client.get("/v1/runs", headers={"origin": "https://app.example"})
        assert plain.headers["access-control-allow-origin"] == "https://app.example"
        other = client.get("/v1/runs", headers={"origin": "https://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers


@pytest.mark.slow
def test_several_workers_serve_the_same_runs(served: Served) -> None:
    server = served.start("--workers", "2", "--allow-host", "tubeless.internal")
    with server.client() as client:
        ids = [
            client.post("/v1/entries/worker/runs", json={"input": {"text": f"w{n}"}}).json()[
                "run_id"
            ]
            for n in range(6)
        ]
        for n, run_id in enumerate(ids):
            assert wait_status(client, run_id, {"completed"})["result"] == {"outs": [f"W{n}-1"]}
        # Tools never see the token (nor the config the workers got it through).
        assert (served.marks_dir / "environment.txt").read_text() == ""
        named = client.get("/healthz", headers={"host": "tubeless.internal:8421"})
        assert named.status_code == 200
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_a_missing_extra_is_named_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    served = Served(tmp_path)
    assert main(["serve", str(served.project)]) == 1
    assert "pip install 'tubeless[serve]'" in capsys.readouterr().err


def test_an_unusable_store_fails_before_anything_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served(tmp_path)
    monkeypatch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
    bad = tmp_path / "c.sqlite"
    bad.write_text("not a database")
    bad.chmod(0o600)
    args = ["serve", str(served.project), "--checkpoints", str(bad), "--workers", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "error: TUBELESS_CHECKPOINT_INVALID" in err and "serving" not in err
