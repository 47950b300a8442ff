"""`ralph ab` end to end with the simulated agent: real processes, real git, real clones."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import psutil
import pytest

from orchestrator.cli import main
from orchestrator.memory.markdown import unclosed_fence
from orchestrator.reports import ab, report
from orchestrator.sim import examples

ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def _tree_digest(root: Path) -> dict[str, str]:
    """Every file under root (including .git) with its sha256: the working copy's fingerprint."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _slope(ys: list[int]) -> float:
    """Least-squares tokens per iteration."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sum((x - mx) ** 2 for x in range(n))


def _ab(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "ab", "--tool", "sim", *args],
        cwd=project,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_ab_runs_both_arms_and_reports_from_their_ledgers(tmp_path: Path) -> None:
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    # An uncommitted edit must reach both arms, and stay uncommitted here.
    prd = project / "scripts/ralph/prd.json"
    prd.write_text(prd.read_text().replace('"Recipe Box"', '"Recipe Box (edited)"', 1))
    before = _tree_digest(project)
    out = tmp_path / "out"
    res = _ab(project, "--out", str(out), "8", "--parallel")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _tree_digest(project) == before  # the user's working copy is untouched
    assert not (out / "work").exists()  # the arms' copies are cleaned up

    data = json.loads((out / "ab-report.json").read_text())
    arms = {a["name"]: a for a in data["arms"]}
    for name in ("indexed", "full"):
        ledger = [
            json.loads(line)
            for line in (out / name / "ledger.jsonl").read_text().splitlines()
            if '"iteration"' in line
        ]
        iters = [r for r in ledger if r["event"] == "iteration"]
        totals = arms[name]["totals"]
        assert totals["iterations"] == len(iters) == 8
        assert totals["prompt_tokens"] == sum(r["prompt_tokens"] for r in iters)
        assert totals["output_tokens"] == sum(r["usage"]["output_tokens"] for r in iters)
        assert {r["mode"] for r in iters} == {name}
    full = [r["prompt_tokens"] for r in arms["full"]["iterations"]]
    assert full == sorted(full) and full[-1] > 2 * full[0]  # the full arm grows with history
    assert data["saving"]["prompt_tokens"]["pct"] > 0
    assert (out / "ab-tokens.png").stat().st_size > 10_000
    assert "saving (indexed vs full)" in res.stdout


def test_on_an_indexed_project_the_full_arm_reads_the_references_in_its_log(
    tmp_path: Path,
) -> None:
    # After indexed runs, the learnings live in ralph/references/ only: a full arm that
    # read progress.txt alone failed every story that needs one ("ignores an earlier
    # learning") and the report credited the index with a win Ralph itself would not show.
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    run = [sys.executable, "-m", "orchestrator", "run", "--tool", "sim", "3"]
    first = subprocess.run(run, cwd=project, env=ENV, capture_output=True, text=True)
    assert "3/30 stories pass" in first.stdout, first.stdout + first.stderr
    refs = sorted((project / "ralph" / "references").glob("*.md"))
    assert refs
    before = _tree_digest(project)
    out = tmp_path / "out"
    res = _ab(project, "--out", str(out), "--keep", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"holds the {len(refs)} reference(s)" in res.stdout
    assert _tree_digest(project) == before
    arms = {a["name"]: a for a in json.loads((out / "ab-report.json").read_text())["arms"]}
    assert arms["full"]["totals"]["stories_passed"] == arms["indexed"]["totals"]["stories_passed"]
    log = (out / "work" / "full" / "scripts" / "ralph" / "progress.txt").read_text()
    assert all(r.read_text().strip() in log for r in refs)


def test_the_full_arms_log_closes_a_code_block_a_reference_leaves_open(tmp_path: Path) -> None:
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    refs = project / "ralph" / "references"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "snippets.md").write_text("# Snippets\r\n\r\n- [US-1] run:\r\n  ```sh\r\n  make\r\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "refs"], cwd=project, check=True)
    assert ab.flatten_for_full(project, "scripts/ralph") == 1
    log = (project / "scripts" / "ralph" / "progress.txt").read_text()
    assert "make" in log and unclosed_fence(log) is None


def test_interrupted_ab_leaves_no_stray_copies_or_worktrees(tmp_path: Path) -> None:
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    before = _tree_digest(project)
    out = tmp_path / "out"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "orchestrator", "ab", "--tool", "sim", "--out", str(out), "30", "--parallel"],
        cwd=str(project),
        env=ENV,
        encoding="utf-8",
        timeout=120,
    )
    # Wait until both arms have really started working, then Ctrl-C as a user would.
    deadline = time.monotonic() + 120
    while not list(out.glob("work/*/ralph/logs/*/iteration-1.log")):
        assert time.monotonic() < deadline, "arms never started"
        time.sleep(0.2)
    child.kill(signal.SIGINT)
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 130 or child.signalstatus == signal.SIGINT
    assert not (out / "work").exists()
    worktrees = (
        subprocess.run(
            ["git", "worktree", "list"], cwd=project, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()
    )
    assert len(worktrees) == 1
    assert _tree_digest(project) == before
    # No agent or arm process survives the interrupt.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in ps


def test_an_ab_killed_by_sigkill_leaves_no_arm_running(tmp_path: Path) -> None:
    """SIGKILL gives `ralph ab` no chance to stop its arms: the kernel does (PDEATHSIG)."""
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    out = tmp_path / "out"
    ab_proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "ab", "--tool", "sim", "--out", str(out), "30"]
        + ["--parallel"],
        cwd=project,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("work/*/ralph/logs/*/iteration-1.log")):
            assert time.monotonic() < deadline, "arms never started"
            time.sleep(0.2)
    finally:
        ab_proc.kill()
        ab_proc.wait(timeout=30)
    deadline = time.monotonic() + 60
    while True:
        left = _running_under(out)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"arms still running after ab was killed: {left}"


def _running_under(folder: Path) -> list[str]:
    """Command lines of the processes whose working directory is inside `folder`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cwd = proc.info.get("cwd") or ""
        if cwd.startswith(str(folder)):
            found.append(" ".join(proc.info.get("cmdline") or []))
    return found


def test_ab_without_prd_json_fails_first_and_copies_nothing(tmp_path: Path) -> None:
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    prd = next(project.rglob("prd.json"))
    prd.unlink()
    before = _tree_digest(project)
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "ab", "--tool", "sim", "--out", str(tmp_path / "o")],
        cwd=project,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "prd.json" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "o").exists()
    assert _tree_digest(project) == before


def test_report_command_reproduces_the_ab_report(tmp_path: Path) -> None:
    project = examples.copy_example("recipe-box", tmp_path / "proj")
    out = tmp_path / "out"
    assert _ab(project, "--out", str(out), "3").returncode == 0
    again = tmp_path / "again"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "report",
            f"indexed={out / 'indexed' / 'ledger.jsonl'}",
            f"full={out / 'full' / 'ledger.jsonl'}",
            "--out",
            str(again),
        ],
        cwd=tmp_path,  # not the repository: `-m` would import the source tree, not the install
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert res.returncode == 0, res.stderr
    a = json.loads((out / "ab-report.json").read_text())
    b = json.loads((again / "ab-report.json").read_text())
    assert [x["totals"] for x in a["arms"]] == [x["totals"] for x in b["arms"]]
    assert report.load_arm(out / "full" / "ledger.jsonl").mode == "full"


@pytest.mark.e2e
@pytest.mark.timeout(1200)  # the whole 30-story example, twice for the demo
def test_demo_runs_the_whole_example_full_grows_indexed_stays_flat(tmp_path: Path) -> None:
    """The README's main command, as a user runs it: every story in both arms."""
    dest = tmp_path / "demo"
    res = subprocess.run(
        # One replicate: the default three would triple the time of this test; replicates
        # are covered by tests/test_ab_replicates.py.
        [sys.executable, "-m", "orchestrator", "demo", "--into", str(dest), "--repeat", "1"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    log = subprocess.run(
        ["git", "log", "--format=%s"], cwd=dest, capture_output=True, text=True, check=True
    ).stdout
    assert log.strip().splitlines()[-1] == "Initial commit: recipe-box example"
    written = dest / "ab-report"
    data = json.loads((written / "ab-report.json").read_text())
    stories = len(json.loads((dest / "scripts/ralph/prd.json").read_text())["userStories"])
    arms = {a["name"]: a for a in data["arms"]}
    for arm in arms.values():
        assert arm["totals"]["stories_completed"] == stories
        assert arm["totals"]["check_failures"] == 0
    full = [r["prompt_tokens"] for r in arms["full"]["iterations"]]
    indexed = [r["prompt_tokens"] for r in arms["indexed"]["iterations"]]
    # Full grows with the log (past 15k tokens). Indexed varies with what each story needs but
    # is bounded by the selection: over the second half its trend is a small fraction of
    # full's, and it never comes near full's size.
    assert full == sorted(full) and full[-1] > 15_000
    half = len(indexed) // 2
    assert _slope(indexed[half:]) < _slope(full[half:]) / 4
    assert max(indexed) < full[-1] / 3
    assert data["saving"]["prompt_tokens"]["pct"] > 50
    assert "stories passed" in res.stdout
    assert f"report: {written / 'ab-report.md'}\nchart:  {written / 'ab-tokens.png'}" in res.stdout


def test_demo_without_git_is_an_error_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run, git included
    assert main(["demo", "--into", str(tmp_path / "d"), "1"]) == 2
    assert "ralph: error: cannot run git" in capsys.readouterr().err


def test_workspace_mirrors_a_staged_rename_and_an_untracked_file(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    (root / "old.txt").write_text("kept content\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=root, check=True)
    subprocess.run(["git", "mv", "old.txt", "new.txt"], cwd=root, check=True)
    (root / "notes.md").write_text("untracked\n")
    dest = tmp_path / "arm"
    ab.make_workspace(root, dest, "ralph/logs")
    assert sorted(p.name for p in dest.iterdir() if p.name != ".git") == ["new.txt", "notes.md"]
    assert (dest / "new.txt").read_text() == "kept content\n"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=dest, capture_output=True, text=True, check=True
    ).stdout
    assert status == ""  # the overlay is committed in the copy, so the arm starts clean
