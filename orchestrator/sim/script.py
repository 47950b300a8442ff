"""The script the simulated agent follows: what to write and learn for each story.

An example project ships `sim.yaml` in its Ralph folder (beside prd.json). Per story it lists
the source files to write, a summary of what was implemented, one learning (a topic and its
bullets) and, optionally, the reference topics an indexed-mode agent would open. A story the
script does not cover gets a generated plan (a notes file and a learning named after the
story), so the simulation runs on any prd.json.

Format (YAML):

    stories:
      - id: US-001
        summary: [Created the package layout]        # "what was implemented" bullets
        files:                                         # written relative to the project root
          - path: recipebox/__init__.py
            content: |
              ...
        learning:
          topic: Project layout and tooling           # reference topic (indexed mode)
          bullets: [Run checks with python -m unittest]
        reads: [Database and migrations]              # topics to open in indexed mode
        needs:                                         # earlier learnings this story depends
          - Database and migrations                    #   on (a topic: any of its bullets),
          - {topic: API conventions, learning: "Errors are JSON"}  # or one learning's text
                                                       # default: the `reads` topics
    checks: [python -m unittest discover -s tests]    # reported as run; the sim does not run them
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import yaml
from msgspec import Meta, field

from orchestrator.errors import InputError, PathEscapeError
from orchestrator.fsutil import read_text, relative_inside, safe_name

if TYPE_CHECKING:
    from orchestrator.memory.prd import Story

SCRIPT_NAME = "sim.yaml"

_LEADING_VERBS = {
    "add",
    "create",
    "implement",
    "build",
    "make",
    "support",
    "introduce",
    "write",
    "set",
    "wire",
    "show",
    "allow",
    "enable",
    "display",
    "update",
    "fix",
    "refactor",
}


# A required text that may not be empty.
_Text = Annotated[str, Meta(min_length=1)]


class _Model(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class FileSpec(_Model):
    path: str
    content: str

    def __post_init__(self) -> None:
        # A script is data from a project folder: it may never write outside the project.
        p = relative_inside(self.path)
        if p is None:
            raise ValueError(
                f"path {self.path!r} must be a relative path inside the project (e.g. src/app.py)"
            )
        self.path = p.as_posix()


class Learning(_Model):
    topic: _Text
    bullets: Annotated[list[str], Meta(min_length=1)]


class Need(_Model):
    """An earlier learning this story depends on: a reference topic, optionally narrowed to
    one learning's text. Without it (not in the prompt, not opened) the sim makes a mistake."""

    topic: _Text
    learning: str | None = None


class StoryPlan(_Model):
    id: _Text
    learning: Learning
    summary: list[str] = field(default_factory=list)
    files: list[FileSpec] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    needs: list[str | Need] | None = None  # None: the `reads` topics
    generated: bool = False  # True when made up for a story the script does not cover
    checks: list[str] = field(default_factory=list)  # filled from the script's `checks`

    def needed(self) -> list[Need]:
        items = self.reads if self.needs is None else self.needs
        return [Need(topic=n) if isinstance(n, str) else n for n in items]


class SimScript(_Model):
    checks: list[str] = field(default_factory=list)  # commands the agent "runs" (not run)
    stories: list[StoryPlan] = field(default_factory=list)

    def bullets_of(self, topic: str) -> list[str]:
        """Every learning the script records under `topic` (any story)."""
        want = topic.strip().lower()
        return [
            b
            for p in self.stories
            if p.learning.topic.strip().lower() == want
            for b in p.learning.bullets
        ]

    def plan_for(self, story_id: str) -> StoryPlan | None:
        for plan in self.stories:
            if plan.id == story_id:
                return msgspec.structs.replace(plan, checks=plan.checks or self.checks)
        return None


def parse_script(raw: object) -> SimScript:
    """A sim script from its parsed YAML; msgspec.ValidationError names the first bad field."""
    return msgspec.convert(raw, SimScript)


def load_script(path: Path) -> SimScript:
    """Parse and validate a sim script; InputError names the file, the field and the fix."""
    try:
        # libyaml when present: the example's script is large and the agent starts per story.
        raw = yaml.load(read_text(path), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc}); fix the syntax") from exc
    if raw is None:
        return SimScript()
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping with a 'stories' list at the top")
    try:
        return parse_script(raw)
    except msgspec.ValidationError as exc:
        # msgspec says "Expected `str` of length >= 1 - at `$.stories[0].id`".
        problem, _, at = str(exc).partition(" - at `")
        where = re.sub(r"\[(\d+)\]", r".\1", at.rstrip("`").removeprefix("$")).lstrip(".")
        raise InputError(
            f"{path}: field '{where or 'top level'}': {problem}; see orchestrator/sim/script.py "
            "for the format"
        ) from exc


def safe_target(root: Path, rel: str) -> Path:
    """The absolute path for a script file, refusing anything that lands outside root."""
    target = (root / rel).resolve()
    base = root.resolve()
    if target != base and base not in target.parents:
        raise PathEscapeError(f"sim script path {rel!r} escapes the project root {root}")
    return target


def topic_for_title(title: str) -> str:
    """A reference topic made from a story title: "Add greeting module" -> "Greeting module"."""
    words = re.findall(r"[A-Za-z0-9][\w-]*", title)
    if len(words) > 1 and words[0].lower() in _LEADING_VERBS:
        words = words[1:]
    topic = " ".join(words[:4]) or "General"
    return topic[:1].upper() + topic[1:]


def generated_plan(story: Story) -> StoryPlan:
    """A plan for a story the script does not cover: a notes file named after the story."""
    slug = safe_name(story.id.lower())
    criteria = "\n".join(f"- [x] {c}" for c in story.acceptance_criteria) or "- [x] Done"
    content = (
        f"# {story.id}: {story.title}\n\n{story.description}\n\n"
        f"## Acceptance criteria\n{criteria}\n"
    )
    return StoryPlan(
        id=story.id,
        summary=[f"Wrote sim-output/{slug}.md describing what {story.id} delivers"],
        files=[FileSpec(path=f"sim-output/{slug}.md", content=content)],
        learning=Learning(
            topic=topic_for_title(story.title),
            bullets=[
                f"{story.title}: the notes live in sim-output/{slug}.md",
                "The simulated agent writes one notes file per story it has no script for",
            ],
        ),
        generated=True,
    )
