"""What the simulated agent understands of its prompt, and where it finds the Ralph files.

Markers (one per line, anywhere in the prompt; `**bold**` and backticks are tolerated):

    Story: US-004                 the story to do (else: the next story in prd.json)
    Mode: indexed | full          indexed: references + index; full: read all of progress.txt
    PRD: scripts/ralph/prd.json   where prd.json is (else searched, see `locate`)
    References: ralph/references  where reference files go (indexed mode)

The HTML-comment form `<!-- ralph: story=US-004 mode=indexed -->` works too. A prompt with no
markers (Ralph's own prompt.md / CLAUDE.md: "pick the highest priority story with passes
false") makes the agent read prd.json and choose, as a real agent would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_WRAP = r"[\s>*_`-]*"
_STORY = re.compile(
    r"^"
    + _WRAP
    + r"(?:current\s+)?story(?:\s+id)?"
    + _WRAP
    + r":"
    + _WRAP
    + r"(?P<v>[A-Za-z0-9][\w.-]*)",
    re.IGNORECASE | re.MULTILINE,
)
_MODE = re.compile(
    r"^" + _WRAP + r"(?:memory\s+)?mode" + _WRAP + r":" + _WRAP + r"(?P<v>indexed|full)\b",
    re.IGNORECASE | re.MULTILINE,
)
_PRD = re.compile(
    r"^" + _WRAP + r"prd" + _WRAP + r":" + _WRAP + r"(?P<v>\S+?prd\.json)",
    re.IGNORECASE | re.MULTILINE,
)
_REFS = re.compile(
    r"^"
    + _WRAP
    + r"references(?:\s+(?:dir|folder))?"
    + _WRAP
    + r":"
    + _WRAP
    + r"(?P<v>[\w./-]+?)/?`?\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_COMMIT = re.compile(r"feat:\s*\[?(?P<v>[A-Za-z0-9][\w.-]*?)\]?\s+-\s+")
_TOPIC_PATH = re.compile(r"(?P<v>[\w.-]+(?:/[\w.-]+)*)/<topic>\.md")
_COMMENT = re.compile(r"<!--\s*ralph:(?P<body>[^>]*?)-->", re.IGNORECASE)
_PRD_MENTION = re.compile(r"[\w./-]*prd\.json")

CONVENTIONAL_DIRS = ("scripts/ralph", "ralph", ".")
_SKIP_DIRS = {".git", "node_modules", "archive", ".venv", "venv", "__pycache__"}


def _comment_value(prompt: str, key: str) -> str | None:
    for m in _COMMENT.finditer(prompt):
        for part in m.group("body").split():
            k, _, v = part.partition("=")
            if k.strip().lower() == key and v.strip():
                return v.strip()
    return None


def _first(regex: re.Pattern[str], prompt: str) -> str | None:
    m = regex.search(prompt)
    return m.group("v") if m else None


def story_ids(prompt: str) -> list[str]:
    """Every story id the prompt names: markers first, then the commit message it asks for
    (`feat: US-004 - Title`). The caller keeps the first one that exists in prd.json."""
    ids = [_comment_value(prompt, "story")] + [m.group("v") for m in _STORY.finditer(prompt)]
    ids += [m.group("v") for m in _COMMIT.finditer(prompt)]
    return [i for i in ids if i]


def mode(prompt: str, progress_text: str | None = None) -> str | None:
    """`indexed` or `full` from a marker; else from what the prompt carries: the whole of
    progress.txt inlined means full, instructions about the Progress Index mean indexed."""
    value = _comment_value(prompt, "mode") or _first(_MODE, prompt)
    if value:
        return value.lower()
    flat = _normal(prompt)
    log = _normal(progress_text or "")
    if log and log in flat:
        return "full"
    if "progress index" in flat.lower():
        return "indexed"
    return None


def _normal(text: str) -> str:
    return " ".join(text.split())


def references_dir(prompt: str) -> str | None:
    value = (
        _comment_value(prompt, "references") or _first(_REFS, prompt) or _first(_TOPIC_PATH, prompt)
    )
    if value and not value.endswith(".md") and ".." not in Path(value).parts:
        return value.rstrip("/")
    return None


@dataclass
class Workspace:
    root: Path
    ralph_dir: Path
    prd_path: Path
    progress_path: Path

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)


def _search(root: Path, depth: int = 3) -> Path | None:
    frontier = [root]
    for _ in range(depth + 1):
        nxt: list[Path] = []
        for d in frontier:
            if (d / "prd.json").is_file():
                return d / "prd.json"
            try:
                nxt += sorted(c for c in d.iterdir() if c.is_dir() and c.name not in _SKIP_DIRS)
            except OSError:
                continue
        frontier = nxt
    return None


def locate(root: Path, prompt: str, ralph_dir: Path | None = None) -> Workspace | None:
    """Find prd.json: the given folder, the prompt's PRD marker or mentions, the usual
    folders (scripts/ralph, ralph, the root), then a shallow search. progress.txt sits
    beside it, as with ralph.sh."""
    candidates: list[Path] = []
    if ralph_dir is not None:
        candidates.append((root / ralph_dir) / "prd.json")
    marked = _comment_value(prompt, "prd") or _first(_PRD, prompt)
    if marked and ".." not in marked:
        candidates.append(root / marked.strip("`"))
    candidates += [root / m for m in _PRD_MENTION.findall(prompt) if "/" in m and ".." not in m]
    candidates += [root / d / "prd.json" for d in CONVENTIONAL_DIRS]
    found = next((c for c in candidates if c.is_file()), None) or _search(root)
    if found is None:
        return None
    return Workspace(
        root=root,
        ralph_dir=found.parent,
        prd_path=found,
        progress_path=found.parent / "progress.txt",
    )
