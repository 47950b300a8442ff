"""`ralph init`: add ralph-index's files to an existing project (git or not); never overwrites."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import lock, log
from orchestrator.commands.common import add_common
from orchestrator.project import locate
from orchestrator.upkeep.scaffold import example_prds, init_project

_LABEL = {
    "created": "created",
    "kept": "kept",
    "replaced": "replaced",
    "updated": "updated",
    "unchanged": "ok",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="add ralph.yaml, progress.txt, prd.json and the references folder to a project",
        description="Add ralph-index's files to the current project. Existing files are kept "
        "(and reported); run it again at any time: a second run changes nothing.",
    )
    add_common(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing ralph.yaml/prd.json/progress.txt, keeping each as .bak",
    )
    p.add_argument(
        "--example",
        default="example",
        metavar="NAME",
        help=f"built-in example prd.json to start from ({', '.join(example_prds())})",
    )
    p.set_defaults(func=run)


def _shown(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
    return rel + ("/" if path.is_dir() else "")


def run(args: argparse.Namespace) -> int:
    log.configure(None, verbose=args.verbose)  # ralph.yaml warnings as stderr lines
    # init writes prd.json/progress.txt (--force replaces them): never under a running loop.
    found = locate(Path.cwd(), args.ralph_dir)
    with lock.memory_lock(found, "ralph init"):
        result = init_project(Path.cwd(), args.ralph_dir, force=args.force, example=args.example)
    project = result.project
    where = "git repository" if project.in_git else "not a git repository"
    print(f"ralph init: project {project.root} ({where})")
    print(f"Ralph folder: {_shown(project.ralph_dir, project.root) or './'}")
    for a in result.actions:
        note = f"  ({a.note})" if a.note else ""
        print(f"  {_LABEL[a.kind]:<9}{_shown(a.path, project.root)}{note}")
    for a in result.actions:
        if a.diff:
            print()
            print(a.diff, end="" if a.diff.endswith("\n") else "\n")
    changed = len(result.changed())
    print()
    print(f"{changed} file(s) changed." if changed else "Nothing to do: already initialised.")
    if changed:
        print("Next: edit prd.json with your stories, then run `ralph run`.")
    return 0
