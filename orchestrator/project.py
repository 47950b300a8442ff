"""Where a Ralph project lives: its root, its Ralph folder, its config and every path derived.

Ralph keeps prd.json and progress.txt in the folder of `ralph.sh` (most often
`scripts/ralph/`), while the agent works from the project root. `locate()` finds both the way
a user expects without configuring anything:

- project root: the git top level, or the current folder outside git;
- Ralph folder: `--dir`, else ralph.yaml's `ralph_dir`, else `scripts/ralph/` when it holds a
  prd.json, else the current folder.

ralph.yaml is always read from the project root, so the `ralph_dir` it names can be found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import fsutil, git
from orchestrator.config import CONFIG_FILE, Config, load_config
from orchestrator.errors import InputError

if TYPE_CHECKING:  # references.py is helper A's; imported lazily in locate()
    from orchestrator.references import ReferenceStore

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


def find_ralph_dir(root: Path, cwd: Path, flag: str | None, config: Config) -> Path:
    """Apply the Ralph-folder precedence: --dir > ralph.yaml ralph_dir > scripts/ralph > cwd."""
    if flag:
        chosen = (cwd / flag).resolve()
        where = f"--dir {flag}"
    elif config.ralph_dir:
        chosen = (root / config.ralph_dir).resolve()
        where = f"{CONFIG_FILE}: ralph_dir {config.ralph_dir}"
    elif (root / LEGACY_DIR / "prd.json").is_file():
        return (root / LEGACY_DIR).resolve()
    else:
        return cwd
    if chosen.exists() and not chosen.is_dir():
        raise InputError(f"{where}: {chosen} is a file, not a folder; give the Ralph folder")
    return chosen


def _optional(path: Path) -> Path | None:
    return path if fsutil.present(path) else None


def locate(
    cwd: Path, ralph_dir: str | None = None, overrides: dict[str, Any] | None = None
) -> Project:
    """Find the project containing `cwd` and load its config (flags in `overrides` win).

    Nothing is created or required to exist except a readable ralph.yaml when there is one:
    commands that need prd.json report its absence with its full path.
    """
    from orchestrator.references import ReferenceStore  # lazy: helper A's module

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
