"""Charts are an extra: without matplotlib the drawing commands say what to install, at once,
and the core commands do not care."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A sitecustomize that hides matplotlib, as a core-only install would.
_HIDE = "import sys\nsys.modules['matplotlib'] = None  # import fails, find_spec says absent\n"


def _ralph(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    hide = tmp_path / "hide"
    hide.mkdir(exist_ok=True)
    (hide / "sitecustomize.py").write_text(_HIDE)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=tmp_path,
        env={"PYTHONPATH": str(hide), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_drawing_commands_ask_for_the_extra(tmp_path: Path) -> None:
    for command in (
        ["demo", "--into", str(tmp_path / "d")],
        ["report", "x.jsonl"],
        ["ab"],
        ["savings"],
    ):
        done = _ralph(tmp_path, *command)
        assert done.returncode == 2, (command, done.stderr)
        assert "pip install 'ralph-index[charts]'" in done.stderr
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "d").exists()  # nothing was started


def test_core_commands_work_without_it(tmp_path: Path) -> None:
    done = _ralph(tmp_path, "--version")
    assert done.returncode == 0 and "ralph-index" in done.stdout
    done = _ralph(tmp_path, "check", "--help")
    assert done.returncode == 0, done.stderr
