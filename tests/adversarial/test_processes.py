"""Adversarial process cases: agents that leave `setsid` children and double-forked daemons,
ignore SIGTERM or leave zombies; and SIGINT/SIGTERM/SIGHUP sent to real `ralph run`,
`ralph ab --parallel` and `ralph demo` processes at different moments.

Every case asserts by a psutil scan: no process carrying the test's marker (in its command
line, which survives a scrubbed environment, or its environment) is alive afterwards, and no
temporary work folder is left. Exit codes: 128 + the signal (130 SIGINT, 143 SIGTERM,
129 SIGHUP), as documented in orchestrator/stopsignals.py.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import contextlib

from run_helpers import RALPH, env, iterations, ledger, make_project  # noqa: E402

from orchestrator.agents import proctree, runner  # noqa: E402

AGENT = Path(__file__).resolve().parent / "spawner_agent.py"
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def _can_make_cgroup() -> bool:
    path = proctree.make_cgroup()
    if path is None:
        return False
    path.rmdir()  # a probe only: leave nothing behind
    return True


HAS_CGROUP = _can_make_cgroup()


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique sleep length: it marks every process the test's agents start."""
    mark = f"3000.{random.randrange(10**6, 10**7)}"
    yield mark
    for proc in _leftovers(mark):  # never leave anything on the shared machine
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _leftovers(mark: str) -> list[psutil.Process]:
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if mark in " ".join(proc.cmdline()) or proc.environ().get("TEST_MARKER") == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _assert_no_leftovers(mark: str) -> None:
    deadline = time.monotonic() + 2  # killed processes may take a moment to be reaped
    while _leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [(p.pid, " ".join(p.cmdline())) for p in _leftovers(mark)]
    assert left == [], f"processes survived: {left}"


def _project(tmp_path: Path, n: int = 1, **config: object) -> Path:
    agent = {"command": [sys.executable, str(AGENT)]}
    return make_project(
        tmp_path / "p", n, config={"tool": "spawner", "agents": {"spawner": agent}, **config}
    )


def _knobs(mark: str, ready: Path | None = None, **flags: str) -> dict[str, str]:
    knobs = {"SPAWNER_SLEEP": mark, "TEST_MARKER": mark, **flags}
    if ready is not None:
        knobs["SPAWNER_READY"] = str(ready)
    return knobs


def _start(root: Path, args: list[str], extra: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*RALPH, *args],
            cwd=root,
            env=env(**extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_for(cond, what: str, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _run_to_end(root: Path, extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RALPH, "run", "--sleep", "0", *args],
        cwd=root,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _lock_free(root: Path) -> bool:
    return not any((root / "ralph" / "logs").glob("ralph.lock*")) or _lock_reusable(root)


def _lock_reusable(root: Path) -> bool:
    # filelock may leave its (unlocked) file behind: the proof is that a new run can start.
    res = subprocess.run(
        [*RALPH, "status"], cwd=root, env=env(), capture_output=True, text=True, timeout=60
    )
    return "another ralph run" not in res.stdout + res.stderr


# ---- item 9: the agent's whole tree ---------------------------------------------------------


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "psutil"])
def test_setsid_and_double_fork_children_are_killed_after_a_normal_end(
    tmp_path: Path, marker: str, cgroup: bool
) -> None:
    if cgroup and not HAS_CGROUP:
        pytest.skip("no writable cgroup v2 here")
    root = _project(tmp_path)
    extra = _knobs(marker, SPAWNER_SETSID="1", SPAWNER_DAEMON="1")
    if not cgroup:
        extra[proctree.NO_CGROUP_ENV] = "1"
    res = _run_to_end(root, extra, "1")
    assert res.returncode == 1, res.stdout + res.stderr  # the story did not pass: exhausted
    _assert_no_leftovers(marker)
    [it] = iterations(root)
    killed = it["killed_processes"]
    assert len(killed) == 2 and all(marker in k for k in killed), killed
    assert "killed 2 leftover process(es)" in res.stdout
    run_log = next((root / "ralph" / "logs").glob("*/run.log")).read_text()
    assert "process_tree_leftovers_killed" in run_log and marker in run_log


@pytest.mark.skipif(not HAS_CGROUP, reason="no writable cgroup v2 here")
def test_daemon_with_a_scrubbed_environment_is_caught_by_the_cgroup(
    tmp_path: Path, marker: str
) -> None:
    """No env marker and reparented to init: only the cgroup still knows it."""
    root = _project(tmp_path)
    res = _run_to_end(root, _knobs(marker, SPAWNER_DAEMON="1", SPAWNER_SCRUB="1"), "1")
    assert res.returncode == 1, res.stdout + res.stderr
    _assert_no_leftovers(marker)
    assert len(iterations(root)[0]["killed_processes"]) == 1


def test_wall_timeout_kills_the_whole_tree(tmp_path: Path, marker: str) -> None:
    root = _project(tmp_path)
    extra = _knobs(marker, SPAWNER_SETSID="1", SPAWNER_DAEMON="1", SPAWNER_HANG="1")
    res = _run_to_end(root, extra, "--timeout", "3", "1")
    assert res.returncode == 1, res.stdout + res.stderr
    _assert_no_leftovers(marker)
    [it] = iterations(root)
    assert it["outcome"] == "timeout" and it["timed_out"] == "wall"
    assert len(it["killed_processes"]) == 2


def test_agent_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path, marker: str) -> None:
    root = _project(tmp_path)
    extra = _knobs(marker, SPAWNER_SETSID="1", SPAWNER_HANG="1", SPAWNER_IGNORE_TERM="1")
    started = time.monotonic()
    res = _run_to_end(root, extra, "--timeout", "2", "1")
    elapsed = time.monotonic() - started
    assert res.returncode == 1, res.stdout + res.stderr
    _assert_no_leftovers(marker)
    assert elapsed >= 2 + runner.GRACE_S - 0.5  # it had its grace, then SIGKILL
    assert iterations(root)[0]["outcome"] == "timeout"


def test_zombies_are_not_waited_for_and_our_children_are_reaped(
    tmp_path: Path, marker: str
) -> None:
    """A zombie cannot be killed: ending the tree must not spend the grace on it, and the
    agent itself is reaped (no zombie child of ours remains)."""
    knobs = _knobs(marker, SPAWNER_ZOMBIE="1", SPAWNER_SETSID="1", SPAWNER_HANG="1")
    os.environ.update(knobs)
    try:
        started = time.monotonic()
        outcome = runner.run(
            [sys.executable, str(AGENT)], cwd=tmp_path, wall_timeout=2, grace=runner.GRACE_S
        )
    finally:
        for key in knobs:
            os.environ.pop(key, None)
    assert outcome.timed_out == "wall" and outcome.exit_code == -signal.SIGTERM
    # The agent and the sleeper end on SIGTERM; a zombie counted as alive would cost the grace.
    assert time.monotonic() - started < 2 + runner.GRACE_S / 2
    assert len(outcome.killed) == 1 and marker in outcome.killed[0]
    _assert_no_leftovers(marker)
    zombies = [c for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    assert zombies == []


# ---- item 10: stop signals to commands that run agents --------------------------------------


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_signal_to_ralph_run_during_the_agent(tmp_path: Path, marker: str, sig) -> None:
    root = _project(tmp_path, 2)
    ready = tmp_path / "ready"
    extra = _knobs(marker, ready, SPAWNER_SETSID="1", SPAWNER_DAEMON="1", SPAWNER_HANG="1")
    proc = _start(root, ["run", "--sleep", "0", "2"], extra, tmp_path / "out.log")
    _wait_for(ready.exists, "the agent")
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig, (tmp_path / "out.log").read_text()
    _assert_no_leftovers(marker)
    [it] = iterations(root)
    assert it["outcome"] == "interrupted" and len(it["killed_processes"]) == 2
    end = ledger(root)[-1]
    assert end["event"] == "run_end" and end["status"] == "interrupted"
    assert end["exit_code"] == 128 + sig
    assert _lock_free(root)


def test_sigterm_between_iterations_closes_the_ledger(tmp_path: Path, marker: str) -> None:
    """Stopped in the pause between two iterations: no agent runs; ledger closed, exit 143."""
    root = _project(tmp_path, 3)
    ready = tmp_path / "ready"
    proc = _start(root, ["run", "--sleep", "30", "3"], _knobs(marker, ready), tmp_path / "o.log")
    _wait_for(
        lambda: bool(iterations(root)) if (root / "ralph/logs/ledger.jsonl").exists() else False,
        "the first iteration's record",
    )
    time.sleep(0.5)  # in the 30 s pause now
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "o.log").read_text()
    assert len(iterations(root)) == 1
    end = ledger(root)[-1]
    assert end["event"] == "run_end" and end["status"] == "interrupted"
    _assert_no_leftovers(marker)
    assert _lock_free(root)


def test_second_signal_during_cleanup_skips_the_grace(tmp_path: Path, marker: str) -> None:
    """An impatient supervisor: SIGTERM, then SIGTERM again while an agent that ignores
    SIGTERM is in its grace period: SIGKILL at once, still recorded, nothing left."""
    root = _project(tmp_path)
    ready = tmp_path / "ready"
    extra = _knobs(marker, ready, SPAWNER_SETSID="1", SPAWNER_HANG="1", SPAWNER_IGNORE_TERM="1")
    proc = _start(root, ["run", "--sleep", "0", "1"], extra, tmp_path / "o.log")
    _wait_for(ready.exists, "the agent")
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "o.log").read_text()
    assert time.monotonic() - started < runner.GRACE_S
    _assert_no_leftovers(marker)
    assert iterations(root)[0]["outcome"] == "interrupted"


def _ab_project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", 2, sim_env={"RALPH_SIM_FAULT": "hang-after-output"})


def _both_arms_working(out: Path) -> bool:
    # work/<arm>/ for one replicate, work/rep-<i>/<arm>/ for several (ralph demo: 2)
    logs = [p for p in out.glob("work/**/iteration-1.log") if "ralph/logs" in p.as_posix()]
    return len(logs) == 2 and all("Read" in p.read_text(errors="replace") for p in logs)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_to_ab_parallel_stops_both_arms(tmp_path: Path, marker: str, sig) -> None:
    root = _ab_project(tmp_path)
    out = tmp_path / "ab"
    args = ["ab", "--tool", "sim", "--parallel", "--out", str(out), "2"]
    proc = _start(root, args, {"TEST_MARKER": marker}, tmp_path / "o.log")
    _wait_for(lambda: _both_arms_working(out), "both arms' agents")
    arm_pids = [c.pid for c in psutil.Process(proc.pid).children()]
    proc.send_signal(sig)
    assert proc.wait(timeout=90) == 128 + sig, (tmp_path / "o.log").read_text()
    _assert_no_leftovers(marker)
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in arm_pids
    )
    assert not (out / "work").exists()
    for arm in ("indexed", "full"):  # the interrupted records are kept beside the report
        records = [json.loads(x) for x in (out / arm / "ledger.jsonl").read_text().splitlines()]
        assert records[-1]["event"] == "run_end" and records[-1]["status"] == "interrupted"
    assert "Traceback" not in (tmp_path / "o.log").read_text()


def test_sigterm_to_ab_while_copying_the_project(tmp_path: Path, marker: str) -> None:
    """Stopped before any arm started: nothing runs, no work folder stays."""
    root = _ab_project(tmp_path)
    out = tmp_path / "ab"
    args = ["ab", "--tool", "sim", "--parallel", "--out", str(out), "2"]
    proc = _start(root, args, {"TEST_MARKER": marker}, tmp_path / "o.log")
    _wait_for(lambda: (out / "work").exists(), "the first copy")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "o.log").read_text()
    _assert_no_leftovers(marker)
    assert not (out / "work").exists()


def test_sigterm_to_demo_stops_everything(tmp_path: Path, marker: str) -> None:
    dest = tmp_path / "demo"
    extra = {"TEST_MARKER": marker, "RALPH_SIM_FAULT": "hang-after-output"}
    proc = _start(tmp_path, ["demo", "--into", str(dest), "3"], extra, tmp_path / "o.log")
    _wait_for(lambda: _both_arms_working(dest / "ab-report"), "both arms' agents", 180)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 143, (tmp_path / "o.log").read_text()
    _assert_no_leftovers(marker)
    assert not (dest / "ab-report" / "work").exists()
    assert "Traceback" not in (tmp_path / "o.log").read_text()


@pytest.mark.skipif(not HAS_CGROUP, reason="no writable cgroup v2 here")
def test_cgroups_left_by_a_killed_ralph_are_swept() -> None:
    """A ralph killed with SIGKILL cannot remove its cgroup; the next agent start does."""
    probe = proctree.make_cgroup()
    assert probe is not None
    probe.rmdir()
    stale = probe.parent / "ralph-99999999-1"  # beyond pid_max: its owner is surely gone
    stale.mkdir()
    try:
        made = proctree.make_cgroup()
        assert made is not None and not stale.exists()
        made.rmdir()
    finally:
        if stale.exists():
            stale.rmdir()
