"""The simulated agent has something to lose: a story that depends on an earlier learning
goes wrong when the prompt neither carries it nor leads the agent to the reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env  # noqa: E402

from orchestrator.sim import examples  # noqa: E402
from orchestrator.sim import needs as sim_needs  # noqa: E402
from orchestrator.sim.script import Need, SimScript, parse_script  # noqa: E402

# A template that inlines nothing and hides the index: the story and the steps only.
BAD_TEMPLATE = """<!-- ralph: story={{story_id}} mode=indexed prd={{prd_path}} -->
# One story, then stop

{{story}}

Implement it, run the checks, commit `feat: {{story_id}} - {{story_title}}`, set its
"passes" to true in {{prd_path}} and append an entry to {{progress_path}}.
"""


def _script() -> SimScript:
    return parse_script(
        {
            "stories": [
                {"id": "A", "learning": {"topic": "Db", "bullets": ["Use WAL mode"]}},
                {"id": "B", "learning": {"topic": "Api", "bullets": ["Errors are JSON"]}},
            ]
        }
    )


def test_needs_seen_missing_or_learned_from_a_failure() -> None:
    needs = [Need(topic="Db"), Need(topic="Api", learning="Errors are JSON")]
    memory = "- Use WAL mode\n- Errors are JSON\n"
    seen = sim_needs.check(
        needs, _script(), memory=memory, seen="... use  wal MODE ...", progress="", story_id="C"
    )
    assert [(c.topic, c.seen) for c in seen] == [("Db", True), ("Api", False)]
    failed = sim_needs.failed_note("C", "Api")
    again = sim_needs.check(
        needs, _script(), memory=memory, seen="", progress=f"- {failed}\n", story_id="C"
    )
    assert [c.how for c in again] == ["missing", "learned from a failed attempt"]
    assert sim_needs.failed_attempts(f"- {failed}\n", "C") == 1
    # A learning not yet in memory is nothing the story could have been told.
    assert sim_needs.check(needs, _script(), memory="", seen="", progress="", story_id="C") == []


def test_mistakes_follow_the_seed() -> None:
    checks = [sim_needs.NeedCheck("Db", "Use WAL mode", False, "missing")]
    draws = [sim_needs.mistake(checks, sim_needs.rng_for(s, "US-002", 0), 0.5) for s in range(40)]
    assert draws == [
        sim_needs.mistake(checks, sim_needs.rng_for(s, "US-002", 0), 0.5) for s in range(40)
    ]
    kinds = {d[0] if d else None for d in draws}
    assert kinds == {None, "failed", "fixup"}  # seeds differ, so replicates differ
    seen = [sim_needs.NeedCheck("Db", "Use WAL mode", True, "prompt/opened")]
    assert sim_needs.mistake(seen, sim_needs.rng_for(0, "x", 0), 1.0) is None


def _project(tmp_path: Path, stories: int, bad: bool) -> Path:
    root = examples.copy_example("recipe-box", tmp_path / "proj")
    prd_path = root / "scripts/ralph/prd.json"
    prd = json.loads(prd_path.read_text())
    prd["userStories"] = prd["userStories"][:stories]
    prd_path.write_text(json.dumps(prd, indent=2) + "\n")
    if bad:
        (root / "bad-prompt.md").write_text(BAD_TEMPLATE)
        with (root / "ralph.yaml").open("a") as f:
            f.write("template: bad-prompt.md\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "setup"],
        cwd=root,
        check=True,
    )
    return root


@pytest.mark.e2e  # about 3 minutes on a loaded 2-core machine
@pytest.mark.timeout(900)
def test_a_config_that_hides_memory_loses_measurable_quality(tmp_path: Path) -> None:
    """indexed with a template that inlines nothing and hides the index, against full
    history: more iterations per passed story, with a 95% interval that excludes zero."""
    root = _project(tmp_path, 4, bad=True)
    out = tmp_path / "ab"
    res = subprocess.run(
        [*RALPH, "ab", "--tool", "sim", "--repeat", "3", "--parallel", "2", "--out", str(out)]
        + ["10"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    figures = json.loads((out / "ab-report.json").read_text())["summary"]["figures"]
    per_story = figures["iterations_per_passed_story"]
    assert per_story["arms"]["full"]["values"] == [1, 1, 1]  # the full log carries everything
    diff = per_story["difference"]
    assert per_story["significant"] and diff["low"] > 0, diff
    assert "iterations per passed story: indexed is higher than full, worse" in res.stdout
    md = (out / "ab-report.md").read_text()
    assert "iterations per passed story: indexed is higher than full, worse" in md
    # The mistakes are visible in the bad arm's streams: checks that failed.
    logs = "".join(p.read_text() for p in out.glob("rep-*/indexed/*/iteration-*.log"))
    assert "FAILED (simulated)" in logs
