"""``tubeless.serve.create_app`` from Python: an ASGI app any server (or a test client) runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.serve.conftest import TOKEN, Served


def test_create_app_serves_a_project_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tubeless.serve import create_app

    served = Served(tmp_path)
    monkeypatch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
    monkeypatch.syspath_prepend(str(tmp_path))
    app = create_app(
        str(served.project),
        token=TOKEN,
        checkpoints=str(tmp_path / "c.sqlite"),
        trace=str(tmp_path / "t.sqlite"),
    )
    headers = {"authorization": f"Bearer {TOKEN}"}
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/v1/runs").status_code == 401
        answer = client.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "i", "steps": 1}, "wait_s": 30},
            headers=headers,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"] == {"outs": ["I-1"]}
        listed = client.get("/v1/runs", headers=headers).json()["runs"]
        assert [run["run_id"] for run in listed] == [answer.json()["run_id"]]
    assert (tmp_path / "c.sqlite").exists() and (tmp_path / "t.sqlite").exists()
    assert served.marks() == [f"unsafe {answer.json()['key']}/worker/1/c1"]
