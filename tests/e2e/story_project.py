"""A small Ralph project in a real git repo, and what a scripted model does for each story.

The project (`calc`, three stories) keeps Ralph's files where users keep them
(`scripts/ralph/prd.json`, `scripts/ralph/progress.txt` with the Ralph header and a
`## Progress Index` table) and a `ralph.yaml` at the root. Per story the scripted model does
what the prompt asks: reads what it needs, writes code, runs a check, flips `passes` in
prd.json, writes a reference and its index row, appends the progress entry, commits.

The turns are built for both CLIs from one plan: Claude Code tool calls (Read/Write/Edit/
Bash) and Codex `exec` calls (shell commands and apply_patch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fake_anthropic as fa
import fake_openai as fo
import yaml
from e2e_support import init_repo

RALPH_DIR = "scripts/ralph"
REFS_DIR = "ralph/references"
HEADER = "# Ralph Progress Log\nStarted: Mon Nov 30 2026\n---\n"
INDEX = "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
SENTINEL = "<promise>COMPLETE</promise>"


@dataclass(frozen=True)
class Story:
    id: str
    title: str
    func: str  # the function this story adds to calc.py
    body: str  # its one-line implementation
    check: str  # a Python expression that must hold afterwards
    topic: str  # the reference topic it writes
    learning: str  # the reference's bullet


STORIES = [
    Story(
        "US-001",
        "Add addition",
        "add",
        "return a + b",
        "calc.add(2, 3) == 5",
        "Calc module layout",
        "calc.py holds pure functions; one per operation",
    ),
    Story(
        "US-002",
        "Add subtraction",
        "sub",
        "return a - b",
        "calc.sub(5, 3) == 2",
        "Checks",
        "check a story with python3 -c 'import calc; assert ...'",
    ),
    Story(
        "US-003",
        "Add multiplication",
        "mul",
        "return a * b",
        "calc.mul(4, 3) == 12",
        "Naming",
        "operations use three-letter names: add, sub, mul",
    ),
]


def prd_data(stories: list[Story] = STORIES) -> dict[str, Any]:
    return {
        "project": "Calc",
        "branchName": "main",
        "description": "A tiny calculator library",
        "userStories": [
            {
                "id": s.id,
                "title": s.title,
                "description": f"As a user I can call calc.{s.func}(a, b).",
                "acceptanceCriteria": [f"{s.check}", "Typecheck passes"],
                "priority": n + 1,
                "passes": False,
                "notes": "",
            }
            for n, s in enumerate(stories)
        ],
    }


def ralph_yaml(tool: str, **extra: Any) -> str:
    cfg: dict[str, Any] = {
        "tool": tool,
        "ralph_dir": RALPH_DIR,
        "sleep_between": 0,
        "timeouts": {"iteration": 120, "idle": 60},
        "limits": {"fallback_wait": 1, "max_wait": 60},
        "retries": {"transient": 0, "backoff": 1},
        "references": {"dir": REFS_DIR},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return yaml.safe_dump(cfg, sort_keys=False)


def make_project(
    repo: Path, tool: str, *, stories: list[Story] = STORIES, history: str = "", **yaml_extra: Any
) -> Path:
    """A git repo holding the calc project with `stories`; `history` is extra progress.txt
    log text (an older run's entries)."""
    return init_repo(
        repo,
        {
            ".gitignore": "ralph/logs/\n__pycache__/\n",
            "README.md": "# calc\n",
            "ralph.yaml": ralph_yaml(tool, **yaml_extra),
            f"{RALPH_DIR}/prd.json": json.dumps(prd_data(stories), indent=2) + "\n",
            f"{RALPH_DIR}/progress.txt": HEADER + "\n" + INDEX + history,
        },
    )


def story_by_id(story_id: str | None) -> Story | None:
    return next((s for s in STORIES if s.id == story_id), None)


def resolve_after_heading(text: str) -> str | None:
    """The story a prompt is about: the first id after "## Your story" (the template's
    heading), else the first id anywhere."""
    at = text.find("## Your story")
    m = re.search(r"\bUS-\d{3}\b", text[at:] if at >= 0 else text)
    return m.group(0) if m else None


def prd_edit(prd_text: str, story_id: str) -> tuple[str, str]:
    """A unique (old, new) pair flipping this story's passes, as a model would pick it."""
    start = prd_text.index(f'"id": "{story_id}"')
    end = prd_text.index('"passes": false', start) + len('"passes": false')
    old = prd_text[start:end]
    return old, old.replace('"passes": false', '"passes": true')


def entry(story: Story) -> str:
    """A Ralph-style progress entry (what was done, files, learnings): ~0.7 KB, like real ones."""
    learnings = "".join(
        f"  - {story.func}: {topic} for calc.{story.func} was checked against the acceptance "
        "criteria and recorded here for the next iterations\n"
        for topic in ("argument order", "integer inputs", "float inputs", "error handling")
    )
    return (
        f"## 2026-11-30 10:00 - {story.id}\n- Implemented calc.{story.func}\n"
        f"- Files changed: calc.py\n- References: {story.topic}\n"
        f"- **Learnings for future iterations:**\n{learnings}---\n"
    )


def ref_path(story: Story) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", story.topic.lower()).strip("-")
    return f"{REFS_DIR}/{slug}.md"


def final_text(story: Story, stories: list[Story]) -> str:
    """The project's last story ends with the sentinel; the others end normally."""
    last = story.id == stories[-1].id
    return f"{story.id} done." + (f" All stories pass. {SENTINEL}" if last else "")


# ---- Claude Code ------------------------------------------------------------------------
def claude_turns(
    repo: Path, story: Story, *, stories: list[Story] = STORIES, truncate_progress: bool = False
) -> list:
    """The model's turns for one story, as Claude Code tool calls on files under `repo`.
    Callables are evaluated when the request comes, so edits match the files as they are."""
    prd = repo / RALPH_DIR / "prd.json"
    progress = repo / RALPH_DIR / "progress.txt"
    calc = repo / "calc.py"
    first = story.id == STORIES[0].id
    func = f"def {story.func}(a, b):\n    {story.body}\n"

    def flip(_req: fa.Request) -> fa.ToolUse:
        old, new = prd_edit(prd.read_text(), story.id)
        return fa.ToolUse("Edit", {"file_path": str(prd), "old_string": old, "new_string": new})

    def code(_req: fa.Request) -> fa.ToolUse:
        if first:
            return fa.ToolUse("Write", {"file_path": str(calc), "content": func})
        text = calc.read_text()
        return fa.ToolUse(
            "Edit", {"file_path": str(calc), "old_string": text, "new_string": text + "\n\n" + func}
        )

    row = f"| {story.topic} | {ref_path(story)} |\n"
    turns: list = [
        fa.ToolUse("Read", {"file_path": str(prd)}, text=f"Working on {story.id}."),
        fa.ToolUse("Read", {"file_path": str(progress), "limit": 20}),
    ]
    if not first:
        turns.append(fa.ToolUse("Read", {"file_path": str(calc)}))
    turns += [
        code,
        fa.ToolUse(
            "Bash",
            {"command": f"python3 -c 'import calc; assert {story.check}'", "description": "Check"},
        ),
        flip,
        fa.ToolUse(
            "Write",
            {
                "file_path": str(repo / ref_path(story)),
                "content": f"# {story.topic}\n- {story.learning}\n",
            },
        ),
    ]
    if truncate_progress:
        # A careless model: rewrites progress.txt with only its own entry (history lost).
        turns.append(
            fa.ToolUse(
                "Write", {"file_path": str(progress), "content": HEADER + "\n" + entry(story)}
            )
        )
    else:
        turns += [
            fa.ToolUse(
                "Edit",
                {
                    "file_path": str(progress),
                    "old_string": "|---|---|\n",
                    "new_string": "|---|---|\n" + row,
                },
            ),
            fa.ToolUse(
                "Bash",
                {
                    "command": f"cat >> {RALPH_DIR}/progress.txt <<'EOF'\n\n{entry(story)}EOF",
                    "description": "Append progress",
                },
            ),
        ]
    turns += [
        fa.ToolUse(
            "Bash",
            {
                "command": f"git add -A && git commit -q -m 'feat: {story.id} - {story.title}'",
                "description": "Commit",
            },
        ),
        fa.Text(final_text(story, stories)),
    ]
    return turns


def claude_script(
    repo: Path,
    stories: list[Story] = STORIES,
    edit: Callable[[Story, list], list] | None = None,
    **kw: Any,
) -> Callable[[str | None, fa.Request], list]:
    """One script for the whole run: the story comes from the prompt, the project folder from
    the session's working directory (so it also drives copies of `repo`, e.g. A/B arms).
    `edit(story, turns)` may change a story's turns (to inject faults)."""
    cache: dict[tuple[str, str], list] = {}

    def script(story_id: str | None, req: fa.Request) -> list:
        story = story_by_id(story_id)
        if story is None:
            return [fa.Text("no story found in the prompt")]
        root = req.cwd() or str(repo)
        if (root, story.id) not in cache:
            turns = claude_turns(Path(root), story, stories=stories, **kw)
            cache[root, story.id] = edit(story, turns) if edit else turns
        return cache[root, story.id]

    return script


def claude_scripts(repo: Path, stories: list[Story] = STORIES) -> dict[str, list]:
    """Per-story turn lists (a dict script): tests replace single turns to inject faults."""
    return {s.id: claude_turns(repo, s, stories=stories) for s in stories}


def claude_resolver(req: fa.Request) -> str | None:
    return resolve_after_heading(req.first_user_text())


# ---- Codex ------------------------------------------------------------------------------
def codex_turns(repo: Path, story: Story, *, stories: list[Story] = STORIES) -> list:
    """The same plan as `claude_turns`, as Codex `exec` calls (shell commands, apply_patch)."""
    prd_rel = f"{RALPH_DIR}/prd.json"
    first = story.id == STORIES[0].id
    func_lines = [f"def {story.func}(a, b):", f"    {story.body}"]

    def flip(_req: fo.Request) -> fo.Patch:
        # A patch replaces whole lines: from the story's "id" line to its "passes" line.
        text = (repo / prd_rel).read_text()
        start = text.rindex("\n", 0, text.index(f'"id": "{story.id}"')) + 1
        end = text.index("\n", text.index('"passes": false', start))
        old = text[start:end]
        new = old.replace('"passes": false', '"passes": true')
        minus = "".join(f"-{ln}\n" for ln in old.splitlines())
        plus = "".join(f"+{ln}\n" for ln in new.splitlines())
        return fo.Patch(
            f"*** Begin Patch\n*** Update File: {prd_rel}\n@@\n{minus}{plus}*** End Patch\n"
        )

    if first:
        code = fo.Patch(
            "*** Begin Patch\n*** Add File: calc.py\n"
            + "".join(f"+{ln}\n" for ln in func_lines)
            + "*** End Patch\n"
        )
    else:
        code = fo.Shell(
            "printf '\\n\\n%s\\n%s\\n' " + " ".join(f"'{ln}'" for ln in func_lines) + " >> calc.py"
        )
    row = f"| {story.topic} | {ref_path(story)} |"
    return [
        fo.Shell(f"cat {prd_rel} && head -20 {RALPH_DIR}/progress.txt"),
        code,
        fo.Shell(f"python3 -c 'import calc; assert {story.check}'"),
        flip,
        fo.Patch(
            f"*** Begin Patch\n*** Add File: {ref_path(story)}\n+# {story.topic}\n"
            f"+- {story.learning}\n*** End Patch\n"
        ),
        fo.Patch(
            f"*** Begin Patch\n*** Update File: {RALPH_DIR}/progress.txt\n@@\n"
            f" |---|---|\n+{row}\n*** End Patch\n"
        ),
        fo.Shell(f"cat >> {RALPH_DIR}/progress.txt <<'EOF'\n\n{entry(story)}EOF"),
        fo.Shell(f"git add -A && git commit -q -m 'feat: {story.id} - {story.title}'"),
        fo.Text(final_text(story, stories)),
    ]


def codex_script(
    stories: list[Story] = STORIES, edit: Callable[[list], list] | None = None
) -> Callable[[str | None, fo.Request], list]:
    """One script for the run; the project folder is the session's cwd. `edit` may replace
    turns of each story's list (to inject faults)."""
    cache: dict[tuple[str, str], list] = {}

    def script(story_id: str | None, req: fo.Request) -> list:
        story = story_by_id(story_id)
        root = req.cwd()
        if story is None or root is None:
            return [fo.Text("no story or working directory in the request")]
        if (root, story.id) not in cache:
            turns = codex_turns(Path(root), story, stories=stories)
            cache[root, story.id] = edit(turns) if edit else turns
        return cache[root, story.id]

    return script


def codex_resolver(req: fo.Request) -> str | None:
    for text in req.user_texts():
        if "## Your story" in text:
            return resolve_after_heading(text)
    return None
