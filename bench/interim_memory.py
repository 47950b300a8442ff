"""A stand-in for `migrate.build_memory` while it is not in the tree (helper E owns it).

Same contract: `build_memory(progress_text, prd, *, rel_dir) -> (new progress text,
{index_path: reference text})`, pure. It groups each log entry's learning bullets under a
topic named after the code area its changed files live in, one `## <entry heading>` section
per entry (bullets verbatim), and the Codebase Patterns section becomes its own reference.
The bench uses the real one whenever `orchestrator.upkeep.migrate` has it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

from orchestrator.memory.progress import Progress

_GENERIC = {"src", "app", "lib", "source", "packages", "internal", "pkg", "server", "client"}


def area(path: str) -> str:
    """The code area of a path: its first meaningful folder (or the file's stem at the top)."""
    parts = [p for p in PurePosixPath(path.strip("./")).parts if p]
    dirs = [p for p in parts[:-1] if p.lower() not in _GENERIC]
    if dirs:
        return dirs[0].lower()
    return "project-setup" if parts else "general"


def _topic(entry: Any) -> str:
    areas = Counter(area(f) for f in entry.files_changed)
    if not areas:
        return "general"
    return sorted(areas.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _slug(topic: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-") or "topic"


def build_memory(
    progress_text: str, prd: Any = None, *, rel_dir: str = "ralph/references"
) -> tuple[str, dict[str, str]]:
    progress = Progress.parse(progress_text)
    sections: dict[str, list[str]] = {}
    for entry in progress.entries:
        if not entry.learnings:
            continue
        heading = entry.heading.lstrip("#").strip()
        files = ", ".join(entry.files_changed)
        body = "".join(f"- {b}\n" for b in entry.learnings)
        block = f"## {heading}\n" + (f"Files: {files}\n" if files else "") + body
        sections.setdefault(_topic(entry), []).append(block)
    refs: dict[str, str] = {}
    rows: list[tuple[str, str]] = []
    if progress.codebase_patterns and progress.codebase_patterns.strip():
        path = f"{rel_dir}/codebase-patterns.md"
        refs[path] = "# Codebase patterns\n\n" + progress.codebase_patterns.strip("\n") + "\n"
        rows.append(("Codebase patterns", path))
    for topic in sorted(sections):
        path = f"{rel_dir}/{_slug(topic)}.md"
        refs[path] = f"# {topic}\n\n" + "\n".join(sections[topic])
        rows.append((topic, path))
    for topic, path in rows:
        progress = progress.with_index_row(topic, path)
    return progress.render(), refs
