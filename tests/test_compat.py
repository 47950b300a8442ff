"""`ralph run --compat`: ralph.sh's console lines and its exit code 1, for scripts that grep
its output. Real `ralph` processes on a real pty (pexpect), a real agent script that commits.

With RALPH_SH set to a copy of snarktank/ralph's ralph.sh, the same project is also run by
ralph.sh itself (agent: a stand-in `claude` on PATH running the same script) and the lines
scripts look for are compared side by side.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pexpect
import pytest
import yaml
from run_helpers import env, git, make_project, ralph

FAKES = Path(__file__).resolve().parent / "fakes"
AGENT = [sys.executable, str(FAKES / "commit_all_agent.py"), "scripts/ralph"]
BAR = "=" * 63
# The lines of ralph.sh's own output that scripts grep for (everything but agent output).
RALPH_SH_LINE = re.compile(
    r"^(Starting Ralph - .*|={63}|  Ralph Iteration \d+ of \d+ \(.*\)|Iteration \d+ complete\. "
    r"Continuing\.\.\.|Ralph completed all tasks!|Completed at iteration \d+ of \d+|Ralph "
    r"reached max iterations \(\d+\) without completing all tasks\.|Check .* for status\.)$"
)


def project(root: Path, n: int, **config) -> Path:
    make_project(root, n, config=config)
    cfg = yaml.safe_load((root / "ralph.yaml").read_text())
    cfg["agents"]["commitall"] = {"command": AGENT}
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    git(root, "commit", "-qam", "commit-all agent")
    return root


def pty_run(root: Path, argv: list[str], **extra: str) -> tuple[list[str], int]:
    """Run `argv` on a pty; the output's lines (CR stripped) and the exit status."""
    child = pexpect.spawn(
        argv[0],
        argv[1:],
        cwd=str(root),
        env=env(**extra),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 200),
    )
    child.expect(pexpect.EOF)
    child.close()
    lines = [line.rstrip("\r") for line in (child.before or "").split("\n")]
    return lines, child.exitstatus if child.exitstatus is not None else -1


def ralph_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def expected_complete(tool: str, n: int, done_at: int) -> list[str]:
    lines = [f"Starting Ralph - Tool: {tool} - Max iterations: {n}"]
    for i in range(1, done_at + 1):
        lines += [BAR, f"  Ralph Iteration {i} of {n} ({tool})", BAR]
        if i < done_at:
            lines.append(f"Iteration {i} complete. Continuing...")
    return [*lines, "Ralph completed all tasks!", f"Completed at iteration {done_at} of {n}"]


def expected_exhausted(tool: str, n: int, progress: str) -> list[str]:
    lines = [f"Starting Ralph - Tool: {tool} - Max iterations: {n}"]
    for i in range(1, n + 1):
        lines += [BAR, f"  Ralph Iteration {i} of {n} ({tool})", BAR]
        lines.append(f"Iteration {i} complete. Continuing...")
    return [
        *lines,
        f"Ralph reached max iterations ({n}) without completing all tasks.",
        f"Check {progress} for status.",
    ]


def test_compat_run_prints_ralph_sh_lines_until_complete(tmp_path: Path) -> None:
    root = project(tmp_path / "p", 2)
    lines, status = pty_run(
        root, ralph_argv("run", "--compat", "--tool", "commitall", "5"), COMMIT_ALL_SAY_COMPLETE="1"
    )
    assert status == 0
    assert [x for x in lines if RALPH_SH_LINE.match(x)] == expected_complete("commitall", 5, 2)
    # The closing lines come last, as in ralph.sh, after a blank line.
    closing = ["Ralph completed all tasks!", "Completed at iteration 2 of 5"]
    assert [x for x in lines if x][-2:] == closing
    assert lines[lines.index("Ralph completed all tasks!") - 1] == ""


def test_compat_run_out_of_iterations_exits_1_with_ralph_sh_lines(tmp_path: Path) -> None:
    root = project(tmp_path / "p", 3)
    lines, status = pty_run(root, ralph_argv("run", "--compat", "--tool", "commitall", "2"))
    assert status == 1
    progress = str((root / "scripts" / "ralph" / "progress.txt").resolve())
    expected = expected_exhausted("commitall", 2, progress)
    assert [x for x in lines if RALPH_SH_LINE.match(x)] == expected


def test_without_compat_the_native_lines_and_codes_stay(tmp_path: Path) -> None:
    root = project(tmp_path / "p", 2)
    res = ralph(root, "run", "--tool", "commitall", "5")
    assert res.returncode == 0
    assert "Iteration 1 complete. Continuing..." not in res.stdout
    assert "Memory: " in res.stdout and "· US-001" in res.stdout


@pytest.mark.parametrize("how", ["flag", "config"])
def test_compat_turns_every_failure_exit_code_into_1(tmp_path: Path, how: str) -> None:
    # An unknown tool is a configuration error: exit 2 natively, 1 like ralph.sh.
    root = project(tmp_path / "p", 1, **({"compat": True} if how == "config" else {}))
    native = ralph(root, "run", "--tool", "nosuch", "1")
    args = ["run", "--tool", "nosuch", "1"] + (["--compat"] if how == "flag" else [])
    compat = ralph(root, *args)
    if how == "config":
        assert native.returncode == 1  # the config key applies to every run
    else:
        assert native.returncode == 2
    assert compat.returncode == 1
    assert "unknown agent 'nosuch'" in compat.stderr and "Traceback" not in compat.stderr


def test_compat_stuck_run_exits_1(tmp_path: Path) -> None:
    # The agent fails every time: natively `stuck` (4); ralph.sh would say 1.
    root = project(tmp_path / "p", 1, stuck_after=1)
    cfg = yaml.safe_load((root / "ralph.yaml").read_text())
    cfg["agents"]["fail"] = {"command": [sys.executable, "-c", "import sys; sys.exit(3)"]}
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    assert ralph(root, "run", "--tool", "fail", "3").returncode == 4
    assert ralph(root, "run", "--tool", "fail", "3", "--compat").returncode == 1


@pytest.mark.skipif(
    not os.environ.get("RALPH_SH") or not Path(os.environ.get("RALPH_SH", "")).is_file(),
    reason="set RALPH_SH to a copy of snarktank/ralph's ralph.sh to compare side by side",
)
def test_side_by_side_with_ralph_sh(tmp_path: Path) -> None:
    mine = project(tmp_path / "mine", 2)
    theirs = project(tmp_path / "theirs", 2)
    script = theirs / "scripts" / "ralph" / "ralph.sh"
    shutil.copy(os.environ["RALPH_SH"], script)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (theirs / "scripts" / "ralph" / "CLAUDE.md").write_text("Do the next story.\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"  # ralph.sh's --tool claude runs `claude ... < CLAUDE.md`
    claude.write_text(f"#!/bin/sh\nexec {' '.join(AGENT)}\n")
    claude.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    sh_lines, sh_status = pty_run(
        theirs, [str(script), "--tool", "claude", "5"], PATH=path, COMMIT_ALL_SAY_COMPLETE="1"
    )
    my_lines, my_status = pty_run(
        mine,
        ralph_argv("run", "--compat", "--tool", "commitall", "5"),
        COMMIT_ALL_SAY_COMPLETE="1",
    )
    assert (my_status, sh_status) == (0, 0)
    grep = [
        x.replace("(claude)", "(commitall)").replace("Tool: claude", "Tool: commitall")
        for x in sh_lines
        if RALPH_SH_LINE.match(x)
    ]
    assert [x for x in my_lines if RALPH_SH_LINE.match(x)] == grep
