"""`ralph ab --repeat N`: paired replicates, bootstrap intervals, plain words, `--resume`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env, make_project  # noqa: E402

from orchestrator.reports import abstats  # noqa: E402


def test_estimate_mean_and_interval() -> None:
    e = abstats.estimate([1, 2, 3, 4, 5, None])
    assert e.mean == 3 and e.n == 5
    assert e.low is not None and e.high is not None
    assert 1 <= e.low < 3 < e.high <= 5
    one = abstats.estimate([7])
    assert (one.mean, one.low, one.high) == (7, None, None) and not one.excludes_zero


def test_paired_difference_and_words() -> None:
    same = abstats.paired_difference([10, 12, 11], [11, 11, 11])  # differences -1, 1, 0
    assert not same.excludes_zero
    assert abstats.sentence("stories passed", "stories_passed", same, "a", "b") == (
        "No measurable difference in stories passed at N=3."
    )
    worse = abstats.paired_difference([7, 8, 7], [10, 10, 10])
    assert worse.excludes_zero and worse.high is not None and worse.high < 0
    text = abstats.sentence("stories passed", "stories_passed", worse, "indexed", "full")
    assert text.startswith("stories passed: indexed is lower than full, worse: indexed - full")
    assert "95% CI" in text and "N=3" in text


def _ab(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RALPH, "ab", "--tool", "sim", *args],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_repeat_runs_paired_replicates_and_reports_intervals(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    out = tmp_path / "ab"
    res = _ab(root, "--repeat", "2", "--parallel", "4", "--out", str(out), "3")
    assert res.returncode == 0, res.stdout + res.stderr
    for rep in ("rep-1", "rep-2"):
        for arm in ("indexed", "full"):
            assert (out / rep / arm / "ledger.jsonl").is_file()
    data = json.loads((out / "ab-report.json").read_text())
    summary = data["summary"]
    assert summary["replicates"] == 2 and len(data["runs"]) == 2
    passed = summary["figures"]["stories_passed"]
    assert passed["arms"]["indexed"]["values"] == [2, 2]
    assert passed["difference"]["values"] == [0, 0] and passed["significant"] is False
    tokens = summary["figures"]["prompt_tokens"]["arms"]["full"]
    assert tokens["low"] is not None and tokens["low"] <= tokens["mean"] <= tokens["high"]
    assert "No measurable difference in stories passed" in res.stdout
    assert "N=2 paired replicates" in res.stdout
    md = (out / "ab-report.md").read_text()
    assert "## Replicates: N=2" in md and "| stories passed | 2 [2, 2] | 2 [2, 2] |" in md
    assert json.loads((out / "ab-options.json").read_text())["repeat"] == 2


def test_interrupted_ab_resumes_without_redoing_finished_arms(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    out = tmp_path / "ab"
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(
        [*RALPH, "ab", "--tool", "sim", "--repeat", "2", "--parallel", "--out", str(out), "3"],
        cwd=root,
        env=env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    done = [out / "rep-1" / arm / "ledger.jsonl" for arm in ("indexed", "full")]
    deadline = time.monotonic() + 180
    # Replicate 1 is finished and collected, replicate 2 is at work: stop there.
    while not (
        all(p.is_file() for p in done)
        and len(list(out.glob("work/rep-2/*/ralph/logs/*/iteration-1.log"))) == 2
    ):
        assert time.monotonic() < deadline and first.poll() is None, "replicate 1 never ended"
        time.sleep(0.1)
    kept = [p.read_text() for p in done]
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 143
    assert not (out / "work").exists()
    # A new A/B into the same folder is refused with the way forward.
    again = _ab(root, "--out", str(out), "3")
    assert again.returncode == 2 and f"ralph ab --resume {out}" in again.stderr
    res = _ab(root, "--resume", str(out), "--parallel")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "resuming: 2 of 4 arm runs already done" in res.stdout
    assert [p.read_text() for p in done] == kept  # the finished arms were not run again
    aside = out / "rep-2" / "full.interrupted-1" / "ledger.jsonl"
    assert json.loads(aside.read_text().splitlines()[-1])["status"] == "interrupted"
    data = json.loads((out / "ab-report.json").read_text())
    assert data["summary"]["replicates"] == 2
    assert data["summary"]["figures"]["stories_passed"]["arms"]["full"]["values"] == [2, 2]


def test_resume_of_a_folder_without_an_ab_is_a_clear_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    res = _ab(root, "--resume", str(tmp_path / "nothing"))
    assert res.returncode == 2
    assert "holds no A/B to resume" in res.stderr and "Traceback" not in res.stderr
