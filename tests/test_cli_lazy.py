"""`ralph` starts fast: the top-level parser imports no command module and no heavy library.

The import checks run `python -X importtime` in a subprocess, so they see exactly what a
user's `ralph --version` imports (this test process has imported everything already).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli, ledger

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import synth  # noqa: E402

HEAVY = ("tiktoken", "matplotlib", "numpy", "bm25s", "pexpect", "pydantic")


def imported_modules(args: list[str], cwd: Path) -> set[str]:
    """Every module `python -m orchestrator ARGS` imports (from -X importtime's report)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    names = set()
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    assert "orchestrator.cli" in names  # the report was read at all
    return names


@pytest.mark.parametrize("args", [["--version"], ["--help"], []], ids=["version", "help", "bare"])
def test_top_level_imports_no_heavy_library_and_no_command(tmp_path: Path, args) -> None:
    names = imported_modules(args, tmp_path)
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert not heavy, f"`ralph {' '.join(args)}` imported {heavy}"
    commands = sorted(n for n in names if n.startswith("orchestrator.commands."))
    assert not commands, f"`ralph {' '.join(args)}` imported {commands}"


def test_status_imports_no_tokenizer_numpy_or_plotting(tmp_path: Path) -> None:
    story = {"id": "US-001", "title": "t", "passes": False, "priority": 1}
    (tmp_path / "prd.json").write_text(json.dumps({"userStories": [story]}))
    names = imported_modules(["status", "--json"], tmp_path)
    heavy = sorted(n for n in names if n.split(".")[0] in ("matplotlib", "numpy", "bm25s"))
    assert not heavy, heavy


def _small_project(root: Path) -> Path:
    """The start-up target's project: 30 stories, an index of 10 references, a ralph.yaml and
    a finished run in the ledger."""
    synth.indexed_project(root, 30, 10)
    (root / "ralph.yaml").write_text("tool: claude\nbudget:\n  prompt_tokens: 12000\n")
    with ledger.Ledger(root / "ralph/logs/ledger.jsonl", run_id="r1") as led:
        led.event("run_start")
        led.iteration({"iteration": 1, "story_id": "US-0001", "outcome": "passed"})
        led.event("run_end", status="complete", exit_code=0)
    return root


# Each costs a user tens of milliseconds (pydantic and numpy hundreds) on every `ralph status`.
# yaml too: ralph.yaml, unchanged since the first run, comes from the parse cache.
NOT_FOR_STATUS = ("pydantic", "numpy", "tiktoken", "structlog", "filelock", "matplotlib", "yaml")


@pytest.mark.parametrize(
    "args,extra",
    [(["status", "--json"], ("rich",)), (["status"], ())],
    ids=["json", "table"],
)
def test_status_on_a_small_project_imports_only_what_it_uses(
    tmp_path: Path, args: list[str], extra: tuple[str, ...]
) -> None:
    """`status --json` draws nothing, so not even rich; the table needs rich and nothing else
    heavy. The second run is the one measured: the first counts tokens with tiktoken once and
    caches the counts, and parses ralph.yaml (as for any project that ran before)."""
    root = _small_project(tmp_path / "p")
    imported_modules(args, root)
    names = imported_modules(args, root)
    assert "orchestrator.run.status" in names
    heavy = sorted(n for n in names if n.split(".")[0] in NOT_FOR_STATUS + extra)
    assert not heavy, f"`ralph {' '.join(args)}` imported {heavy}"
    # The redaction patterns, the lock and the agent adapters serve runs, not a report.
    ours = {"orchestrator.redact", "orchestrator.lock", "orchestrator.agents"} & names
    assert not ours, sorted(ours)


def test_prompt_imports_no_pydantic_rich_or_lock(tmp_path: Path) -> None:
    root = _small_project(tmp_path / "p")
    imported_modules(["prompt"], root)
    names = imported_modules(["prompt"], root)
    found = sorted(
        n for n in names if n.split(".")[0] in ("pydantic", "rich", "structlog", "filelock")
    )
    assert not found, found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    raise AssertionError("no subcommands")


def test_static_table_matches_what_each_command_registers() -> None:
    real = _helps(cli.build_parser(every=True))
    assert list(real) == list(cli.COMMANDS), "order or names differ"
    assert real == cli.COMMANDS, "update cli.COMMANDS to the module's help text"


def test_only_the_chosen_command_gets_its_real_parser() -> None:
    subs = _subparsers(cli.build_parser("status"))
    assert any("--json" in a.option_strings for a in subs["status"]._actions)
    assert not subs["run"]._actions  # a help-only stand-in


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["run", "--tool", "claude"], "run"),
        (["--version"], None),
        (["-h"], None),
        (["nosuch"], None),
        (["--", "run"], None),
        ([], None),
        (["status", "run"], "status"),
    ],
)
def test_chosen_command(argv: list[str], expected: str | None) -> None:
    assert cli.chosen_command(argv) == expected


def test_command_help_and_unknown_command_through_the_real_cli(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "orchestrator"]
    res = subprocess.run([*run, "run", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0 and "--compat" in res.stdout and "--tool" in res.stdout
    res = subprocess.run([*run, "bogus"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 2 and "invalid choice: 'bogus'" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run([*run, "--help"], cwd=tmp_path, capture_output=True, text=True)
    for name, summary in cli.COMMANDS.items():
        assert name in res.stdout
        assert summary.split()[0] in res.stdout


def test_a_command_that_logs_nothing_never_imports_structlog(tmp_path: Path) -> None:
    story = {"id": "US-001", "title": "t", "passes": False, "priority": 1}
    (tmp_path / "prd.json").write_text(json.dumps({"userStories": [story]}))
    for args in (["status", "--json"], ["prompt"]):
        names = imported_modules(args, tmp_path)
        assert not any(n.split(".")[0] == "structlog" for n in names), args


def test_only_the_log_module_imports_structlog_at_module_level() -> None:
    """Modules log through `orchestrator.log.get_logger()`: a top-level `import structlog`
    anywhere else would cost every command that imports it ~0.2 s again."""
    root = Path(cli.__file__).resolve().parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "log.py"
        and any(
            line.startswith(("import structlog", "from structlog"))
            for line in p.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert not offenders, offenders
