"""Example projects (`examples/<name>/` in the repository) copied into fresh git repos.

An example is laid out like a real Ralph user's project: source files at the root, the
Ralph folder `scripts/ralph/` (prd.json, progress.txt, the simulated agent's sim.yaml) and
ralph.yaml (tool: sim). `copy_example` copies one into a folder, makes it a git repository
and commits it, so a run starts from a clean tree exactly as it would in a user's checkout.

    python -m orchestrator.sim.examples                     # list the examples
    python -m orchestrator.sim.examples recipe-box /tmp/rb  # copy one into a new git repo
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from orchestrator import fsutil, git
from orchestrator.errors import InputError, UsageError

_IDENTITY = git.Identity("Ralph Example", "ralph-example@localhost")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")


def examples_dir() -> Path:
    """$RALPH_EXAMPLES_DIR when set, else the examples shipped with the package (the
    repository's `examples/`, installed as the data package `orchestrator.bundled_examples`)."""
    override = os.environ.get("RALPH_EXAMPLES_DIR")
    if override:
        return Path(override)
    return Path(str(fsutil.shipped("orchestrator.bundled_examples", "examples")))


def names() -> list[str]:
    root = examples_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "ralph.yaml").is_file())


def example_path(name: str) -> Path:
    path = examples_dir() / name
    if not (path / "ralph.yaml").is_file():
        known = ", ".join(names()) or "none found"
        raise InputError(
            f"example {name!r} not found in {examples_dir()} (known: {known}); "
            "run from a clone of the repository or set RALPH_EXAMPLES_DIR"
        )
    return path


def copy_example(name: str, dest: Path, *, branch: str = "main") -> Path:
    """Copy example `name` into `dest` (absent or empty), `git init` it and commit it all.

    Returns `dest`. The commit uses a fixed identity only for itself (`git -c`), so the
    user's own git configuration is never changed.
    """
    src = example_path(name)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest}: not empty; choose a new folder for the example")
    shutil.copytree(src, dest, ignore=_IGNORE, dirs_exist_ok=True)
    git.run(["init", "-q", "-b", branch], dest)
    git.commit_all(dest, f"Initial commit: {name} example", _IDENTITY)
    return dest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("\n".join(names()) or f"no examples in {examples_dir()}")
        return 0
    if len(args) != 2:
        print("usage: python -m orchestrator.sim.examples [NAME DEST]", file=sys.stderr)
        return 2
    try:
        dest = copy_example(args[0], Path(args[1]))
    except (InputError, UsageError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    print(f"{args[0]} copied to {dest} (a new git repository); next: cd {dest} && ralph run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
