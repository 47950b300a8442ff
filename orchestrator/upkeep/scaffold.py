"""`ralph init` as a library: add ralph-index's files to an existing project, losing nothing.

Every step is idempotent and never overwrites: an existing file is left alone and reported
as kept. With `force`, a file that would be replaced is first copied to a free `.bak` name.
The one edit made to a user's file is appending the "## Context Indexing" section to Ralph's
prompt.md / CLAUDE.md, and only when the section is missing (original kept as `.bak`).
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator import fsutil, git
from orchestrator.config import CONFIG_FILE
from orchestrator.errors import UsageError
from orchestrator.memory.markdown import close_fences
from orchestrator.memory.progress import Progress, new_progress_text
from orchestrator.project import Project, locate

Kind = Literal["created", "kept", "replaced", "updated", "unchanged"]
SECTION_HEADING = "## Context Indexing"
_SECTION_RE = re.compile(r"^##\s+Context Indexing\s*$", re.MULTILINE)
_DEFAULT_REFS = "ralph/references"


@dataclass
class Action:
    kind: Kind
    path: Path
    note: str = ""
    diff: str | None = None
    backup: Path | None = None


@dataclass
class InitResult:
    project: Project
    actions: list[Action] = field(default_factory=list)

    def changed(self) -> list[Action]:
        return [a for a in self.actions if a.kind in ("created", "replaced", "updated")]


def template_text(name: str) -> str:
    """A file shipped in templates/ (the `orchestrator.templates` data package)."""
    return fsutil.shipped_templates().joinpath(name).read_text(encoding="utf-8")


def example_prds() -> list[str]:
    """Names of the built-in example PRDs (`templates/prd.<name>.json`)."""
    names = []
    for entry in fsutil.shipped_templates().iterdir():
        m = re.fullmatch(r"prd\.(.+)\.json", entry.name)
        if m:
            names.append(m.group(1))
    return sorted(names)


def free_backup(path: Path) -> Path:
    """`<path>.bak`, or `<path>.bak.N` when earlier backups exist: a backup never replaces one."""
    candidate = path.with_name(path.name + ".bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return candidate


def _keep_backup(path: Path) -> Path:
    target = free_backup(path)
    shutil.copy2(path, target)
    return target


def _put(path: Path, text: str, force: bool, kept_note: str) -> Action:
    """Create `path`, or keep it (replace it with a backup when forced)."""
    if not path.exists():
        fsutil.atomic_write_text(path, text)
        return Action("created", path)
    if not force:
        return Action("kept", path, kept_note)
    if fsutil.read_text(path) == text:
        return Action("unchanged", path, "already identical")
    backup = _keep_backup(path)
    fsutil.atomic_write_text(path, text)
    return Action("replaced", path, f"previous version kept as {backup.name}", backup=backup)


def _yaml_scalar(value: str) -> str:
    # Plain when safe, else JSON quoting (JSON strings are valid YAML).
    return value if re.fullmatch(r"[A-Za-z0-9_./-]+", value) else json.dumps(value)


def render_config(project: Project) -> str:
    """The annotated reference ralph.yaml, with ralph_dir set when the folder is not the root."""
    text = template_text(CONFIG_FILE)
    rdir, root = project.ralph_dir, project.root
    if rdir == root:
        return text
    try:
        value = rdir.relative_to(root).as_posix()
    except ValueError:
        value = str(rdir)
    return text.replace("\nralph_dir: null\n", f"\nralph_dir: {_yaml_scalar(value)}\n", 1)


def _progress(project: Project, force: bool) -> Action:
    path = project.progress_path
    if path.exists() and not force:
        note = "exists"
        if not Progress.parse(fsutil.read_text(path)).has_index:
            note = "exists, no Progress Index yet: `ralph migrate` adds one"
        return Action("kept", path, note)
    return _put(path, new_progress_text(with_index=True), force, "exists")


def _check_example(example: str) -> None:
    names = example_prds()
    if example not in names:
        raise UsageError(f"--example {example}: unknown example; choose one of {', '.join(names)}")


def _prd(project: Project, force: bool, example: str) -> Action:
    text = template_text(f"prd.{example}.json")
    return _put(project.prd_path, text, force, "exists; your PRD is left as it is")


def _references(project: Project) -> Action:
    folder = project.references_dir
    if folder.is_dir() and any(folder.iterdir()):
        return Action("kept", folder, "exists")
    keep = folder / ".gitkeep"
    existed = folder.is_dir()
    fsutil.atomic_write_text(keep, "")
    return Action("updated" if existed else "created", folder, "with .gitkeep")


def _ignored(project: Project, rel: str) -> bool:
    return project.in_git and git.is_ignored(project.root, f"{rel.rstrip('/')}/ledger.jsonl")


def _gitignore(project: Project) -> Action:
    path = project.root / ".gitignore"
    try:
        rel = project.logs_dir.relative_to(project.root).as_posix()
    except ValueError:
        return Action("unchanged", path, "log folder is outside the project")
    entry = f"/{rel}/"
    text = fsutil.read_text(path) if path.exists() else ""
    present = {line.strip().strip("/") for line in text.splitlines()}
    if rel.strip("/") in present or _ignored(project, rel):
        return Action("unchanged", path, f"already ignores {rel}/")
    if text and not text.endswith("\n"):
        text += "\n"
    text += f"# ralph-index logs (ledger, transcripts, backups)\n{entry}\n"
    kind: Kind = "updated" if path.exists() else "created"
    fsutil.atomic_write_text(path, text)
    return Action(kind, path, f"ignores {entry}")


def context_section(references_dir: str = _DEFAULT_REFS) -> str:
    """The agent rules for the index, with the configured references folder."""
    text = template_text("context-indexing.md")
    return text.replace(_DEFAULT_REFS, references_dir.rstrip("/"))


def add_context_indexing(path: Path, references_dir: str = _DEFAULT_REFS) -> Action:
    """Append the Context Indexing section to an instruction file that lacks it."""
    old = fsutil.read_text(path)
    if _SECTION_RE.search(old):
        return Action("unchanged", path, f"already has '{SECTION_HEADING}'")
    # A code block the file leaves open is closed first (it ran to the end of the file
    # anyway): appended after it, the section would be read as code, not as rules.
    body = close_fences(old.replace("\r\n", "\n"))
    sep = "" if body.endswith("\n\n") or not body else ("\n" if body.endswith("\n") else "\n\n")
    added = body[len(old.replace("\r\n", "\n")) :] + sep + context_section(references_dir)
    nl = "\r\n" if "\r\n" in old else "\n"  # the file's own line endings
    new = old + added.replace("\n", nl)
    backup = _keep_backup(path)
    fsutil.atomic_write_text(path, new)
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path.name} (before)",
            tofile=f"{path.name} (after)",
        )
    )
    return Action(
        "updated",
        path,
        f"appended '{SECTION_HEADING}'; original kept as {backup.name}",
        diff=diff,
        backup=backup,
    )


def init_project(
    cwd: Path, ralph_dir: str | None = None, *, force: bool = False, example: str = "example"
) -> InitResult:
    """Add ralph.yaml, progress.txt, prd.json, the references folder and a .gitignore entry."""
    _check_example(example)  # bad input changes nothing: check before the first write
    project = locate(cwd, ralph_dir)
    result = InitResult(project)
    project.ralph_dir.mkdir(parents=True, exist_ok=True)
    config_note = "exists"
    configured = project.config.ralph_dir
    same = configured is not None and (project.root / configured).resolve() == project.ralph_dir
    if ralph_dir and project.config_path is not None and not same:
        config_note = (
            f"exists; its ralph_dir is {configured!r}: set it to this folder "
            "or pass --dir to later commands"
        )
    result.actions += [
        _put(project.root / CONFIG_FILE, render_config(project), force, config_note),
        _prd(project, force, example),
        _progress(project, force),
        _references(project),
        _gitignore(project),
    ]
    for instructions in (project.ralph_dir / "prompt.md", project.ralph_dir / "CLAUDE.md"):
        if instructions.is_file():
            result.actions.append(add_context_indexing(instructions, project.config.references.dir))
    return result
