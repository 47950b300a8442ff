"""Where a Ralph project lives: its root, its Ralph folder, its config and every path derived.

Ralph keeps prd.json and progress.txt in the folder of `ralph.sh` (most often
`scripts/ralph/`), while the agent works from the project root. `locate()` finds both the way
a user expects without configuring anything:

- project root: the git top level, or the current folder outside git;
- Ralph folder: `--dir`, else ralph.yaml's `ralph_dir`, else `scripts/ralph/` when it holds a
  prd.json, else the current folder when it holds prd.json or progress.txt, else the one
  folder of the usual places (or one or two levels down) holding one (two: an error naming
  them), else the current folder.

ralph.yaml is always read from the project root, so the `ralph_dir` it names can be found.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import fsutil, git
from orchestrator.config import CONFIG_FILE, Config, load_config
from orchestrator.errors import InputError
from orchestrator.memory.references import ReferenceStore

LEGACY_DIR = Path("scripts") / "ralph"


@dataclass(frozen=True)
class Project:
    root: Path  # git top level, or cwd outside git
    ralph_dir: Path  # prd.json, progress.txt, archive/, .last-branch, prompt.md
    config: Config
    config_path: Path | None  # the ralph.yaml read, None when there is none
    in_git: bool
    prd_path: Path
    progress_path: Path
    archive_dir: Path
    last_branch_path: Path
    references: ReferenceStore
    logs_dir: Path
    ledger_path: Path
    lock_path: Path
    prompt_md: Path | None  # <ralph_dir>/prompt.md when present (Amp's instructions)
    claude_md: Path | None  # <ralph_dir>/CLAUDE.md when present (Claude's instructions)
    template_path: Path | None  # config.template resolved against root, if set
    warnings: tuple[str, ...] = field(default=())

    @property
    def references_dir(self) -> Path:
        return self.root / self.config.references.dir

    def rel(self, path: Path) -> str:
        """`path` relative to the project root (posix), for messages and the ledger."""
        try:
            return Path(path).resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def agent_instructions(self) -> list[Path]:
        """Ralph's per-iteration instruction files that exist in the Ralph folder."""
        return [p for p in (self.prompt_md, self.claude_md) if p is not None]


# Where Ralph folders usually are, in the order they are tried after scripts/ralph/.
USUAL_PLACES = ("scripts/ralph", "ralph", "tools/ralph", ".ralph", "scripts", ".")
# Never searched: dependencies, virtualenvs, caches and VCS data are not Ralph folders.
_SKIP = {
    "node_modules",
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "env",
    ".tox",
    ".nox",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "site-packages",
    "dist",
    "build",
    "target",
    "archive",
}
_MAX_ENTRIES = 2000  # per search: a huge tree is not walked (the flag is the answer there)
RALPH_FILES = ("prd.json", "progress.txt")


def find_ralph_dir(root: Path, cwd: Path, flag: str | None, config: Config) -> Path:
    """Apply the Ralph-folder precedence: --dir > ralph.yaml ralph_dir > scripts/ralph with
    a prd.json > the current folder when it holds prd.json or progress.txt > the one folder
    found by `search` > the current folder."""
    if flag:
        chosen = (cwd / flag).resolve()
        where = f"--dir {flag}"
    elif config.ralph_dir:
        chosen = (root / config.ralph_dir).resolve()
        where = f"{CONFIG_FILE}: ralph_dir {config.ralph_dir}"
    elif (root / LEGACY_DIR / "prd.json").is_file():
        return (root / LEGACY_DIR).resolve()
    elif any((cwd / n).is_file() for n in RALPH_FILES):
        return cwd
    else:
        return search(root, config) or cwd
    if chosen.exists() and not chosen.is_dir():
        raise InputError(f"{where}: {chosen} is a file, not a folder; give the Ralph folder")
    return chosen


def _candidates(root: Path, config: Config) -> list[Path]:
    """Folders holding prd.json or progress.txt: the usual places, then every folder one
    or two levels below the root (hidden ones, dependencies and our own folders skipped)."""
    ours = {(root / config.log.dir).resolve(), (root / config.references.dir).resolve()}
    found: list[Path] = [root / p for p in USUAL_PLACES]
    seen = 0
    level = [root]
    for _depth in range(2):
        below: list[Path] = []
        for folder in level:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                seen += 1
                if seen > _MAX_ENTRIES:
                    break
                if e.name in _SKIP or e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                    continue
                if Path(e.path).resolve() not in ours:
                    below.append(Path(e.path))
        found += below
        level = below
    unique: dict[Path, None] = {}
    for f in found:
        if any((f / n).is_file() for n in RALPH_FILES):
            unique.setdefault(f.resolve(), None)
    return list(unique)


def search(root: Path, config: Config) -> Path | None:
    """The Ralph folder when nothing names it: the one candidate holding a prd.json, else
    the one holding a progress.txt (a finished PRD's folder). Two or more: InputError
    listing them. Says on stderr which folder it picked, unless it is the root."""
    candidates = _candidates(root, config)
    for name in RALPH_FILES:
        holding = [c for c in candidates if (c / name).is_file()]
        if len(holding) > 1:
            listed = ", ".join(_shown(c, root) for c in holding)
            raise InputError(
                f"several Ralph folders hold a {name}: {listed}. Say which one with "
                f"--dir (e.g. --dir {_shown(holding[0], root)}), or set ralph_dir in "
                f"{CONFIG_FILE}"
            )
        if holding:
            if holding[0] != root:
                print(
                    f"ralph: using the Ralph folder {_shown(holding[0], root)} (it holds "
                    f"{name}); pass --dir to choose another",
                    file=sys.stderr,
                )
            return holding[0]
    return None


def _shown(folder: Path, root: Path) -> str:
    try:
        return folder.relative_to(root).as_posix() or "."
    except ValueError:
        return str(folder)


def ensure_logs_dir(project: Project) -> Path:
    """Create the log folder (ledger, lock, transcripts, backups) as a folder git ignores
    (fsutil.make_owned_dir), unless `log.dir` names a folder holding the user's own files
    (the project root, the Ralph folder, the references): a `*` there would hide them."""
    logs = Path(project.logs_dir)
    if logs.exists() and not logs.is_dir():
        raise InputError(
            f"{logs}: is a file, but it is the log folder (log.dir in {CONFIG_FILE}); "
            "move the file away or set log.dir to another folder"
        )
    theirs = (project.root, project.ralph_dir, project.references_dir)
    try:
        if any(p.resolve() == logs or logs in p.resolve().parents for p in theirs):
            logs.mkdir(parents=True, exist_ok=True)
            return logs
        return fsutil.make_owned_dir(logs)
    except OSError as exc:
        raise InputError(
            f"{logs}: cannot create the log folder ({exc.strerror or exc}); make its parent "
            f"writable or set log.dir in {CONFIG_FILE} to a writable folder"
        ) from None


def _optional(path: Path) -> Path | None:
    return path if fsutil.present(path) else None


def locate(
    cwd: Path, ralph_dir: str | None = None, overrides: dict[str, Any] | None = None
) -> Project:
    """Find the project containing `cwd` and load its config (flags in `overrides` win).

    Nothing is created or required to exist except a readable ralph.yaml when there is one:
    commands that need prd.json report its absence with its full path.
    """
    cwd = Path(cwd).resolve()
    top = git.toplevel(cwd)
    root = top or cwd
    config_path = root / CONFIG_FILE
    config = load_config(config_path if fsutil.present(config_path) else None, overrides or {})
    rdir = find_ralph_dir(root, cwd, ralph_dir, config)
    logs_dir = (root / config.log.dir).resolve()
    template = (root / config.template).resolve() if config.template else None
    return Project(
        root=root,
        ralph_dir=rdir,
        config=config,
        config_path=config.path,
        in_git=top is not None,
        prd_path=rdir / "prd.json",
        progress_path=rdir / "progress.txt",
        archive_dir=rdir / "archive",
        last_branch_path=rdir / ".last-branch",
        references=ReferenceStore(root, config.references.dir),
        logs_dir=logs_dir,
        ledger_path=logs_dir / "ledger.jsonl",
        lock_path=logs_dir / "ralph.lock",
        prompt_md=_optional(rdir / "prompt.md"),
        claude_md=_optional(rdir / "CLAUDE.md"),
        template_path=template,
        warnings=tuple(config.warnings),
    )
