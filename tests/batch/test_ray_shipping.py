"""What the ray engine ships and refuses: the working directory Ray zips from the project folder
(no ``.gitignore`` there), a checkpoint path a worker's host does not see as the driver's file,
and a cluster that wants a token the driver would not send."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project, write_inputs
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env

ray = pytest.importorskip("ray")


def test_the_shipped_folder_leaves_out_what_the_docs_say(tmp_path: Path) -> None:
    """Ray's own packaging (what ``working_dir`` uploads), on a folder without ``.gitignore``."""
    from ray._private.runtime_env.packaging import create_package

    from tubeless.batch._ray import EXCLUDES

    folder = tmp_path / "p"
    folder.mkdir()
    rows_project(folder)
    kept = {"project.yaml", *(p.name for p in folder.glob("helpers_*.py")), "data/notes.txt"}
    left_out = [
        ".venv/lib/python3.11/site-packages/x.py",
        "venv/bin/python",
        ".git/HEAD",
        "__pycache__/helpers.cpython-311.pyc",
        "sub/__pycache__/m.cpython-311.pyc",
        ".mypy_cache/x.json",
        ".pytest_cache/v",
        ".ruff_cache/x",
        "runs.sqlite",
        "runs.sqlite-wal",
        "runs.sqlite-shm",
        "runs.sqlite.leases/0123abcd.lock",
        "traces.db",
        "traces.db-wal",
        "trace.ndjson",
        ".tubeless/checkpoints.sqlite",
    ]
    (folder / "data").mkdir()
    (folder / "data" / "notes.txt").write_text("kept")
    for name in left_out:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("left out")
    assert not (folder / ".gitignore").exists()
    package = tmp_path / "package.zip"
    create_package(str(folder), package, include_gitignore=True, excludes=EXCLUDES)
    with zipfile.ZipFile(package) as shipped:
        names = {name for name in shipped.namelist() if not name.endswith("/")}
    assert names == kept


def test_an_actor_refuses_a_checkpoint_file_that_is_not_the_drivers(tmp_path: Path) -> None:
    """Simulated in one process (a second host is not available here): the actor class is
    given the identity the driver saw, and the path on "its host" is missing or another file.
    It never creates a store there."""
    from tubeless.batch._ray import _Actor
    from tubeless.batch._ray_setup import file_identity

    project = rows_project(tmp_path)
    store = tmp_path / "runs.sqlite"
    store.touch(mode=0o600)
    seen = file_identity(store)
    assert seen is not None
    store.unlink()  # the worker's host lacks the file
    actor = _Actor(str(project), None, False, False, str(store), list(seen))
    assert actor.problem is not None
    assert actor.problem.startswith(f"the checkpoint file {store} does not exist on the Ray ")
    assert "SQLite and file locks do not work across machines" in actor.problem
    assert not store.exists() and not Path(f"{store}.leases").exists()
    store.touch(mode=0o600)  # another file at the same path
    actor = _Actor(str(project), None, False, False, str(store), [seen[0] + 1, seen[1]])
    assert actor.problem is not None and "is another file than the driver's" in actor.problem
    fine = _Actor(str(project), None, False, False, str(store), list(file_identity(store) or ()))
    assert fine.problem is None


_TOKEN_HEAD = """\
import sys, ray
context = ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="error")
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture
def token_cluster(tmp_path: Path) -> Iterator[str]:
    """A real local Ray with token authentication (its token in its own environment)."""
    home = tmp_path / "head-home"
    home.mkdir()
    head = subprocess.Popen(
        [sys.executable, "-c", _TOKEN_HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env(HOME=str(home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="t" * 32),
    )
    assert head.stdout is not None and head.stdin is not None
    address = head.stdout.readline().strip()
    assert address, "Ray did not start"
    try:
        yield address
    finally:
        head.stdin.close()
        try:
            head.wait(HANG_GUARD * 2)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        head.stdout.close()


@pytest.mark.slow
def test_a_cluster_that_wants_a_token_is_refused_with_what_to_set(
    tmp_path: Path, token_cluster: str
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}])
    home = tmp_path / "driver-home"  # no ~/.ray/auth_token here
    home.mkdir()
    env = {
        key: value
        for key, value in cli_env(HOME=str(home)).items()
        if not key.startswith("RAY_AUTH") and key != "RAY_ADDRESS"
    }
    ray_args = ("--engine", "ray", "--ray-address", token_cluster)
    done = subprocess.run(
        [sys.executable, "-m", "tubeless", "batch", str(project), str(inputs), *ray_args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=HANG_GUARD * 2,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"error: TUBELESS_BATCH_ENGINE_UNAVAILABLE: the Ray cluster at {token_cluster} requires "
        "token authentication: set RAY_AUTH_MODE=token and give the cluster's token in "
        "RAY_AUTH_TOKEN"
    ) in done.stderr
    # Ray's client logs the refused probe once; the 20 s of retries are gone.
    assert done.stderr.count("InvalidAuthToken") <= 1


def test_a_project_whose_folders_share_only_the_home_folder_is_refused_before_ray_starts(
    tmp_path: Path,
) -> None:
    """Ray ships the folder holding the project and its python_path folders; when that is the
    home folder (or the file system's root) the batch stops at once instead of packing it. The
    home folder is this test's own folder, so the refusal does not depend on where it runs."""
    folder = tmp_path / "work" / "p"
    folder.mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    project = rows_project(folder)
    text = project.read_text(encoding="utf-8")
    project.write_text(text.replace("python_path: [.]", "python_path: [., ../../lib]"), "utf-8")
    assert "python_path: [., ../../lib]" in project.read_text(encoding="utf-8")
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}])

    done = subprocess.run(
        [sys.executable, "-m", "tubeless", "batch", str(project), str(inputs), "--engine", "ray"],
        capture_output=True,
        text=True,
        env=cli_env(HOME=str(tmp_path)),
        timeout=HANG_GUARD * 4,  # importing Ray alone takes seconds on a loaded machine
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert (
        "error: TUBELESS_BATCH_ENGINE_UNAVAILABLE: the Ray engine ships the folder that holds "
        f"project.yaml and its python_path folders, and here that is {str(tmp_path)!r}: keep "
        "the python_path folders inside the project's folder"
    ) in done.stderr
