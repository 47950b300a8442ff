"""Adversarial agents and settings through the real path: `ralph run` / `ralph status` as
subprocesses, on a real git repo, with a small Python script configured as the agent command
(`agents.fake.command`). The script counts its calls, records its pid, and misbehaves as told
(crash, limit messages with past/future/garbled resets, a 100 MB line, binary output, silence,
exit non-zero after marking its story passed).

Every case asserts: no Python traceback, no hang (subprocess timeouts), no agent process left
behind (each pid the agent recorded is gone when ralph returns).
"""

from __future__ import annotations

import math
import os
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from run_helpers import RALPH, env, iterations, ledger, make_project, prd

from orchestrator.config import _field_at, _numeric_kinds, _unwrap, known_keys, load_config
from orchestrator.errors import ConfigError

AGENT = r"""
import json, os, subprocess, sys, time
mode, calls_file = sys.argv[1], sys.argv[2]
with open(calls_file, "a") as f:
    f.write(f"{os.getpid()}\n")
calls = len(open(calls_file).read().split())
say = os.environ.get("FAKE_SAY", "").replace("{soon}", str(int(time.time()) + 3))

def mark_passed():
    path = os.path.join("scripts", "ralph", "prd.json")
    data = json.load(open(path))
    story = next(s for s in data["userStories"] if not s["passes"])
    story["passes"] = True
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    with open("work.txt", "a") as f:
        f.write(f"{story['id']} done\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-qm", f"feat: {story['id']}"], check=True)

if mode == "crash":
    print(f"fatal: the agent crashed (call {calls})", flush=True)
    sys.exit(1)
if mode == "limit":  # FAKE_SAY on the first FAKE_TIMES calls, then work
    if calls <= int(os.environ.get("FAKE_TIMES", "1")):
        print(say, flush=True)
        sys.exit(1)
    mark_passed()
    sys.exit(0)
if mode == "bigline":  # one 100 MB line, written in 1 MB pieces, then the work
    for _ in range(100):
        sys.stdout.write("x" * 1_000_000)
    sys.stdout.write("\nend of the long line\n")
    sys.stdout.flush()
    mark_passed()
    sys.exit(0)
if mode == "binary":
    sys.stdout.buffer.write(b"\xff\xfe\x00\x80garbage\xc3(\n" + os.urandom(4096) + b"\n")
    sys.stdout.buffer.flush()
    mark_passed()
    sys.exit(0)
if mode == "silent-pass":
    mark_passed()
    sys.exit(0)
if mode == "silent-noop":
    sys.exit(0)
if mode == "pass-then-fail":
    mark_passed()
    print("done, but exiting 3", flush=True)
    sys.exit(3)
if mode == "pass-then-hang":  # marks passed, then keeps the pty busy past the wall timeout
    mark_passed()
    print("still talking", flush=True)
    time.sleep(120)
raise SystemExit(f"unknown mode {mode}")
"""

TIMEOUT = 120


def _setup(tmp_path: Path, mode: str, n: int = 1, **config: object) -> tuple[Path, Path]:
    script = tmp_path / "fake_agent.py"
    script.write_text(AGENT)
    calls = tmp_path / "calls.txt"
    cfg: dict = {
        "tool": "fake",
        "agents": {"fake": {"command": [sys.executable, str(script), mode, str(calls)]}},
        "stuck_after": 10,
    }
    cfg.update(config)
    root = make_project(tmp_path / "p", n, config=cfg)
    return root, calls


def _run(root: Path, *args: str, timeout: float = TIMEOUT, **extra: str):
    start = time.monotonic()
    out = subprocess.run(
        [*RALPH, *args],
        cwd=root,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,  # no hang
    )
    out.elapsed = time.monotonic() - start  # type: ignore[attr-defined]
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    return out


def _pids(calls: Path) -> list[int]:
    return [int(p) for p in calls.read_text().split()] if calls.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purpose (its parent, not ralph, reaps it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _no_leftovers(calls: Path) -> None:
    left = [p for p in _pids(calls) if _alive(p)]
    assert not left, f"agent processes left running: {left}"


def _clock(at: datetime) -> str:
    """`1pm`-style clock for a limit message (what Claude Code prints)."""
    hour = at.hour % 12 or 12
    minute = f":{at.minute:02d}" if at.minute else ""
    return f"{hour}{minute}{'am' if at.hour < 12 else 'pm'}"


def _limit_events(root: Path) -> list[dict]:
    return [r for r in ledger(root) if r["event"] == "limit_wait"]


# ---- item 5: limit messages with past, future and garbled resets ---------------------------


@pytest.mark.e2e
def test_limit_reset_just_passed_rechecks_with_growing_waits(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    past = now.replace(minute=0, second=0, microsecond=0)  # "resets 4pm" seen at 16:xx
    if now - past < timedelta(minutes=1):
        past -= timedelta(hours=1)
    say = f"You've hit your limit · resets {_clock(past)} (UTC)"
    root, calls = _setup(
        tmp_path, "limit", limits={"recheck": 1, "fallback_wait": 2, "max_wait": 120}
    )
    out = _run(root, "run", "3", FAKE_SAY=say, FAKE_TIMES="3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(_pids(calls)) == 4  # three refusals, then the work
    waits = _limit_events(root)
    assert [w["waited_s"] for w in waits] == [1, 2, 2]  # growing, capped at fallback_wait
    assert all("has passed: recheck" in w["source"] for w in waits)
    assert "has passed: recheck 3" in out.stdout  # the countdown line on the console
    assert [r["outcome"] for r in iterations(root)] == ["passed"]
    _no_leftovers(calls)


def test_limit_reset_in_the_future_beyond_max_wait_stops_exit_3(tmp_path: Path) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=3)
    say = f"5-hour limit reached ∙ resets {_clock(later)} (UTC)"
    root, calls = _setup(tmp_path, "limit", limits={"max_wait": 600})
    out = _run(root, "run", "3", FAKE_SAY=say)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "beyond limits.max_wait (600s)" in out.stderr
    assert len(_pids(calls)) == 1 and prd(root)["userStories"][0]["passes"] is False
    _no_leftovers(calls)


def test_limit_reset_long_past_is_tomorrow_and_stops_exit_3(tmp_path: Path) -> None:
    long_ago = datetime.now(timezone.utc) - timedelta(hours=7)
    say = f"You've hit your limit · resets {_clock(long_ago)} (UTC)"
    root, calls = _setup(tmp_path, "limit", limits={"max_wait": 3600})
    out = _run(root, "run", "3", FAKE_SAY=say)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "resets in 10" in out.stderr or "resets in 1" in out.stderr  # ~17 h, in minutes
    _no_leftovers(calls)


def test_limit_reset_soon_waits_then_retries_same_story(tmp_path: Path) -> None:
    say = "Claude AI usage limit reached|{soon}"  # the agent puts its clock + 3 s there
    root, calls = _setup(tmp_path, "limit", limits={"max_wait": 60})
    out = _run(root, "run", "3", FAKE_SAY=say)
    assert out.returncode == 0, out.stdout + out.stderr
    [wait] = _limit_events(root)
    assert wait["source"] == "reset time stated" and 2 <= wait["waited_s"] <= 6
    assert len(_pids(calls)) == 2
    _no_leftovers(calls)


def test_limit_with_garbled_reset_uses_fallback_wait(tmp_path: Path) -> None:
    say = "You've hit your limit · resets 13pm (UTC)"  # no such clock time
    root, calls = _setup(tmp_path, "limit", limits={"fallback_wait": 1, "max_wait": 60})
    out = _run(root, "run", "3", FAKE_SAY=say)
    assert out.returncode == 0, out.stdout + out.stderr
    [wait] = _limit_events(root)
    assert wait["source"].startswith("no reset time") and wait["waited_s"] == 1
    _no_leftovers(calls)


@pytest.mark.e2e
def test_limit_message_that_never_goes_away_ends_at_max_wait(tmp_path: Path) -> None:
    past = datetime.now(timezone.utc) - timedelta(minutes=30)
    say = f"You've hit your limit · resets {_clock(past)} (UTC)"
    root, calls = _setup(
        tmp_path, "limit", limits={"recheck": 1, "fallback_wait": 2, "max_wait": 6}
    )
    out = _run(root, "run", "3", FAKE_SAY=say, FAKE_TIMES="99")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "limits.max_wait (6s)" in out.stderr
    assert [w["waited_s"] for w in _limit_events(root)] == [1, 2, 2]  # 1+2+2 = 5; +2 > 6
    _no_leftovers(calls)


# ---- item 6: crashing agents and the cap on agent calls ------------------------------------


def test_crashing_agent_run_5_makes_at_most_5_calls_and_exits_4(tmp_path: Path) -> None:
    # ralph.yaml's defaults for retries (3, backoff 30 s) and sleep_between (2 s).
    root, calls = _setup(
        tmp_path, "crash", n=2, retries={"transient": 3, "backoff": 30}, sleep_between=2
    )
    out = _run(root, "run", "5")
    assert out.returncode == 4, out.stdout + out.stderr
    assert len(_pids(calls)) == 5  # ralph.sh makes 5 calls too
    assert "the agent failed on every call of this run (5 agent call(s)" in out.stderr
    assert "(exit 1)" in out.stderr
    end = ledger(root)[-1]
    assert (end["event"], end["agent_calls"], end["retries"]) == ("run_end", 5, 3)
    # An unexplained crash is retried after sleep_between, not after 30, 60, 120 s.
    retries = [r for r in ledger(root) if r["event"] == "transient_retry"]
    assert [r["delay_s"] for r in retries] == [2, 2, 2]
    assert out.elapsed < 90  # type: ignore[attr-defined]
    _no_leftovers(calls)


def test_known_transient_error_backs_off_then_passes(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "limit", retries={"transient": 3, "backoff": 1})
    out = _run(root, "run", "5", FAKE_SAY="API Error: 529 Overloaded", FAKE_TIMES="2")
    assert out.returncode == 0, out.stdout + out.stderr
    retries = [r for r in ledger(root) if r["event"] == "transient_retry"]
    assert [r["delay_s"] for r in retries] == [1, 2]  # growing backoff for a named cause
    assert [(r["outcome"], r["attempts"]) for r in iterations(root)] == [("passed", 3)]
    _no_leftovers(calls)


def test_max_retries_flag_sets_retries_and_is_in_help(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "crash", n=2, retries={"transient": 3, "backoff": 0})
    out = _run(root, "run", "4", "--max-retries", "0")
    assert out.returncode == 4, out.stdout + out.stderr
    assert len(_pids(calls)) == 4
    assert not [r for r in ledger(root) if r["event"] == "transient_retry"]
    assert "4 agent call(s) in 4 iteration(s)" in out.stdout + out.stderr
    helptext = _run(root, "run", "--help").stdout
    assert "--max-retries N" in helptext and "counts against MAX_ITERATIONS" in helptext
    _no_leftovers(calls)


def test_agent_exiting_nonzero_after_marking_passed_is_passed(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "pass-then-fail", n=2)
    out = _run(root, "run", "5")
    assert out.returncode == 0, out.stdout + out.stderr
    its = iterations(root)
    assert [(r["outcome"], r["exit_code"]) for r in its] == [("passed", 3), ("passed", 3)]
    assert len(_pids(calls)) == 2  # a pass is never retried
    _no_leftovers(calls)


# ---- item 7: huge lines, binary output, silence, timeouts after the work -------------------


@pytest.mark.e2e
def test_100mb_line_then_pass_is_passed_fast_and_bounded(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "bigline", timeouts={"iteration": 90, "idle": 60})
    # A wrapper reports the peak RSS of ralph and its descendants (the agent writes 1 MB
    # pieces, so the largest process is ralph itself).
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:]).returncode\n"
        "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(rc)\n"
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *RALPH, "run", "1", "-q"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    elapsed = time.monotonic() - start
    assert "Traceback" not in out.stdout + out.stderr
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    peak_mb = int(out.stdout.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024
    print(f"100 MB line: {elapsed:.1f} s wall, peak RSS {peak_mb:.0f} MB")
    [it] = iterations(root)
    assert it["outcome"] == "passed" and not it["timed_out"]
    assert elapsed < 80 and peak_mb < 200
    transcript = root / it["transcript"]
    assert transcript.stat().st_size < 4 * 1024 * 1024
    assert "bytes of this line dropped" in transcript.read_text()
    assert "end of the long line" in transcript.read_text()
    _no_leftovers(calls)


def test_wall_timeout_after_marking_passed_records_passed(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "pass-then-hang", timeouts={"iteration": 4, "idle": 60})
    out = _run(root, "run", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    [it] = iterations(root)
    assert (it["outcome"], it["timed_out"]) == ("passed", "wall")  # prd.json is the truth
    _no_leftovers(calls)


def test_binary_and_invalid_utf8_output(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "binary")
    out = _run(root, "run", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    [it] = iterations(root)
    assert it["outcome"] == "passed"
    (root / it["transcript"]).read_bytes().decode("utf-8")  # valid UTF-8 on disk
    _no_leftovers(calls)


@pytest.mark.parametrize(("mode", "code", "outcome"), [("silent-pass", 0, "passed")])
def test_no_output_at_all_but_work_done(tmp_path: Path, mode: str, code: int, outcome: str):
    root, calls = _setup(tmp_path, mode)
    out = _run(root, "run", "1")
    assert out.returncode == code, out.stdout + out.stderr
    assert [r["outcome"] for r in iterations(root)] == [outcome]
    _no_leftovers(calls)


def test_no_output_and_no_work_is_stuck(tmp_path: Path) -> None:
    root, calls = _setup(tmp_path, "silent-noop", stuck_after=2)
    out = _run(root, "run", "5")
    assert out.returncode == 4, out.stdout + out.stderr
    assert [r["outcome"] for r in iterations(root)] == ["no_progress", "no_progress"]
    _no_leftovers(calls)


# ---- item 12: an agent command that cannot be run -------------------------------------------


def test_agent_file_without_execute_bit(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "myagent"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(stat.S_IRUSR | stat.S_IWUSR)
    root = make_project(tmp_path / "p", 1, config={"agents": {"my": {"command": [str(tool)]}}})
    out = _run(root, "run", "--tool", "my", "1")
    assert out.returncode == 2
    assert f"found at {tool} but not executable (chmod +x {tool})" in out.stderr
    # The same through PATH, by bare name.
    root2 = make_project(tmp_path / "q", 1, config={"agents": {"my": {"command": ["myagent"]}}})
    path = f"{tool.parent}{os.pathsep}{os.environ['PATH']}"
    out = _run(root2, "run", "--tool", "my", "1", PATH=path)
    assert out.returncode == 2 and "not executable (chmod +x" in out.stderr


def test_agent_command_that_is_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "agentdir"
    folder.mkdir()
    root = make_project(tmp_path / "p", 1, config={"agents": {"my": {"command": [str(folder)]}}})
    out = _run(root, "run", "--tool", "my", "1")
    assert out.returncode == 2
    assert f"{folder} is a folder, not a program" in out.stderr


# ---- item 8: numbers in ralph.yaml --------------------------------------------------------


def _numeric_keys() -> list[str]:
    keys = []
    for key in known_keys():
        field = _field_at(tuple(key.split(".")))
        if field is not None and _numeric_kinds(field.type):
            keys.append(key)
    return keys


def _nested(dotted: str, value: object) -> dict:
    head, _, rest = dotted.partition(".")
    return {head: _nested(rest, value) if rest else value}


NUMERIC_KEYS = _numeric_keys()
BAD_VALUES = [".inf", "-.inf", ".nan", "-1", "1e308", "'ten'", "[1]", "true"]


def test_every_numeric_key_is_known() -> None:
    assert len(NUMERIC_KEYS) >= 15 and "limits.recheck" in NUMERIC_KEYS


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@pytest.mark.parametrize("bad", BAD_VALUES)
def test_bad_number_for_every_numeric_key_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, bad: str
) -> None:
    monkeypatch.chdir(tmp_path)
    head, _, leaf = key.rpartition(".")
    text = f"{head}:\n  {leaf}: {bad}\n" if head else f"{leaf}: {bad}\n"
    (tmp_path / "ralph.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "ralph.yaml")
    msg = str(info.value)
    assert msg.startswith(f"ralph.yaml: {key} must be "), msg
    assert "allowed: " in msg and "\n" not in msg, msg


@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_exponent_without_dot_is_a_number(tmp_path: Path, key: str) -> None:
    field = _field_at(tuple(key.split(".")))
    assert field is not None
    # 1e0 where 1 is allowed; 2e0 for a key whose minimum is 2 (references.max_topics).
    meta = _unwrap(field.type)[1]
    floor = meta.ge if meta is not None and meta.ge is not None else 1
    number = 2 if floor == 2 else 1
    (tmp_path / "ralph.yaml").write_text(yaml.safe_dump(_nested(key, f"{number}e0")))
    value: object = load_config(tmp_path / "ralph.yaml")
    for part in key.split("."):
        value = getattr(value, part)
    if float in _numeric_kinds(field.type):
        assert value == float(number) and isinstance(value, float) and math.isfinite(value)
    else:  # NeN is the integer N for an int key
        assert value == number and isinstance(value, int)


@pytest.mark.parametrize(
    ("text", "key", "command"),
    [
        ("sleep_between: .inf\n", "sleep_between", "run"),
        ("retries:\n  backoff: 1e300\n", "retries.backoff", "run"),
        ("budget:\n  run_cost_usd: 1e308\n", "budget.run_cost_usd", "run"),
        ("budget:\n  run_cost_usd: 1e308\n", "budget.run_cost_usd", "status"),
        ("limits:\n  max_wait: .nan\n", "limits.max_wait", "status"),
        ("timeouts:\n  iteration: -5\n", "timeouts.iteration", "run"),
    ],
)
def test_bad_numbers_through_the_real_commands(
    tmp_path: Path, text: str, key: str, command: str
) -> None:
    root = make_project(tmp_path / "p", 1)
    (root / "ralph.yaml").write_text(text)
    before = (root / "scripts/ralph/prd.json").read_bytes()
    out = _run(root, command, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert f"ralph.yaml: {key} must be" in lines[0] and "allowed: " in lines[0]
    assert (root / "scripts/ralph/prd.json").read_bytes() == before
    assert not (root / "ralph/logs/ledger.jsonl").exists()


def test_bad_number_on_the_command_line(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    out = _run(root, "run", "--sleep", "inf", timeout=60)
    assert out.returncode == 2
    assert "command line: sleep_between must be a finite number" in out.stderr
