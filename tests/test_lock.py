from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.errors import LockHeld
from orchestrator.lock import holder_path, is_locked, project_lock, read_holder
from orchestrator.project import locate

HOLD = """
import sys, time
from pathlib import Path
from orchestrator.lock import project_lock
from orchestrator.project import locate
with project_lock(locate(Path(sys.argv[1])), command="ralph run --tool claude"):
    print("locked", flush=True)
    time.sleep(60)
"""


def hold_in_child(root: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "locked"
    return child


def test_second_process_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    project = locate(tmp_path)
    child = hold_in_child(tmp_path)
    try:
        assert is_locked(project)
        started = time.monotonic()
        with pytest.raises(LockHeld) as info, project_lock(project):
            pass
        assert time.monotonic() - started < 2  # no waiting
        msg = str(info.value)
        assert f"another ralph run (pid {child.pid}, started " in msg
        assert "command 'ralph run --tool claude'" in msg
        assert "is using this project; wait for it or stop it" in msg
        assert info.value.exit_code == 2
    finally:
        child.terminate()
        child.wait(10)
    # SIGTERM skips the holder's cleanup; the OS frees its lock all the same
    with project_lock(project) as me:
        assert read_holder(project.lock_path) == me


def test_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    project = locate(tmp_path)
    child = hold_in_child(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    # the killed run's side file is still there, but the OS released its flock
    stale = read_holder(project.lock_path)
    assert stale is not None and stale.pid == child.pid
    assert not is_locked(project)
    with project_lock(project, command="ralph run") as me:
        assert me.pid != child.pid and read_holder(project.lock_path) == me
    assert not holder_path(project.lock_path).exists()


def test_lock_is_free_again_after_the_block_and_across_an_error(tmp_path: Path) -> None:
    project = locate(tmp_path)
    with pytest.raises(RuntimeError), project_lock(project):
        assert is_locked(project)
        raise RuntimeError("boom")
    assert not is_locked(project)
    assert not holder_path(project.lock_path).exists()
    assert project.lock_path.parent == project.logs_dir


def test_ralph_run_refuses_a_locked_project(tmp_path: Path) -> None:
    from run_helpers import make_project, ralph

    root = make_project(tmp_path / "p", 1)
    child = hold_in_child(root)
    try:
        out = ralph(root, "run", "--tool", "sim", "1")
    finally:
        child.kill()
        child.wait(10)
    assert out.returncode == 2
    assert f"ralph: error: another ralph run (pid {child.pid}, started " in out.stderr
    assert "wait for it or stop it" in out.stderr
    # nothing ran: the story is still pending and no iteration was recorded
    assert '"passes": false' in (root / "scripts" / "ralph" / "prd.json").read_text()
    # once the holder is gone, the same command runs
    out = ralph(root, "run", "--tool", "sim", "1")
    assert out.returncode == 0, out.stderr
