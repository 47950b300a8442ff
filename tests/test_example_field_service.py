"""The second example, where memory matters more: 40+ stories sharing conventions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env  # noqa: E402

from orchestrator.sim import examples  # noqa: E402
from orchestrator.sim.script import load_script  # noqa: E402


def test_every_story_is_scripted_and_needs_only_what_came_before() -> None:
    root = examples.example_path("field-service")
    prd = json.loads((root / "scripts/ralph/prd.json").read_text())
    stories = sorted(prd["userStories"], key=lambda s: s["priority"])
    assert len(stories) >= 40
    script = load_script(root / "scripts/ralph/sim.yaml")
    learned: set[str] = set()
    dependent = 0
    for story in stories:
        plan = script.plan_for(story["id"])
        assert plan is not None, story["id"]
        needs = plan.needed()
        for need in needs:
            assert need.topic in learned, (story["id"], need.topic)
            assert need.learning in script.bullets_of(need.topic)
        dependent += len(needs) >= 2
        learned.add(plan.learning.topic)
    assert dependent >= 30  # cross-story conventions everywhere


def test_the_example_runs_with_the_sim_agent(tmp_path: Path) -> None:
    root = examples.copy_example("field-service", tmp_path / "fs")
    res = subprocess.run(
        [*RALPH, "run", "--tool", "sim", "3"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 1, res.stdout + res.stderr  # 3 of 42 done: iterations used up
    prd = json.loads((root / "scripts/ralph/prd.json").read_text())
    assert [s["passes"] for s in prd["userStories"][:3]] == [True, True, True]
    assert (root / "ralph/references/money-and-rounding.md").is_file()
