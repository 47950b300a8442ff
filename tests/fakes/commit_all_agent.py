"""An agent that follows Ralph's prompt to the letter: implement the next story, mark it
passed, append to progress.txt and "commit all changes" with `git add -A` (what a real agent
does, and how ralph-index's ledger and lock once reached users' histories).

Usage (ralph.yaml): agents.commitall.command: [python, this file, RALPH_DIR]. Reads the
prompt from stdin to EOF first, like the real CLIs. Env COMMIT_ALL_SAY_COMPLETE=1: end with
<promise>COMPLETE</promise> when every story passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    sys.stdin.read()
    ralph_dir = Path(sys.argv[1])
    prd_path = ralph_dir / "prd.json"
    prd = json.loads(prd_path.read_text())
    todo = [s for s in prd["userStories"] if not s.get("passes")]
    if not todo:
        print("nothing to do")
        return 0
    story = min(todo, key=lambda s: s.get("priority", 0))
    story["passes"] = True
    prd_path.write_text(json.dumps(prd, indent=2) + "\n")
    Path(f"{story['id'].lower()}.txt").write_text(f"{story['title']}\n")
    with (ralph_dir / "progress.txt").open("a") as f:
        f.write(f"\n## {story['id']}\n- Implemented {story['title']}\n---\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-qm", f"feat: {story['id']}"], check=True)
    print(f"{story['id']} done")
    if os.environ.get("COMMIT_ALL_SAY_COMPLETE") and all(
        s.get("passes") for s in prd["userStories"]
    ):
        print("<promise>COMPLETE</promise>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
