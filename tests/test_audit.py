"""ralph check: each finding kind, clean memory, exit codes, the pre-commit hook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import cli, project
from orchestrator.upkeep import audit

REPO = Path(__file__).resolve().parents[1]
CLEAN = (
    "# Ralph Progress Log\nStarted: today\n---\n\n"
    "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    "| Auth flow | ralph/references/auth-flow.md |\n"
    "| Database schema | ralph/references/db.md |\n\n"
    "## 2026-01-02 - US-002\n- did things\n---\n"
)


def make(
    tmp_path: Path,
    progress: str = CLEAN,
    refs: dict[str, str] | None = None,
    yaml_text: str | None = None,
) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "progress.txt").write_text(progress)
    (root / "prd.json").write_text('{"userStories": []}')
    if yaml_text:
        (root / "ralph.yaml").write_text(yaml_text)
    refs = (
        {"auth-flow.md": "# Auth flow\n- a\n", "db.md": "# Database schema\n- b\n"}
        if refs is None
        else refs
    )
    for name, text in refs.items():
        p = root / "ralph/references" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def kinds(root: Path) -> list[str]:
    return [f.kind for f in audit.check(project.locate(root))]


def test_clean_memory_has_no_findings_and_exits_0(tmp_path: Path, monkeypatch, capsys) -> None:
    root = make(tmp_path)
    assert kinds(root) == []
    monkeypatch.chdir(root)
    assert cli.main(["check"]) == 0
    assert "ralph check: OK (2 index rows, 2 references)" in capsys.readouterr().out


def test_row_without_file(tmp_path: Path) -> None:
    root = make(tmp_path, refs={"auth-flow.md": "# Auth flow\n"})
    found = audit.check(project.locate(root))
    assert [f.kind for f in found] == ["missing-file"]
    assert found[0].line == 9 and "ralph/references/db.md" in found[0].message
    assert found[0].format().startswith("progress.txt:9: ")


def test_file_without_row(tmp_path: Path) -> None:
    refs = {"auth-flow.md": "# A\n", "db.md": "# D\n", "stray.md": "# S\n"}
    found = audit.check(project.locate(make(tmp_path, refs=refs)))
    assert [(f.kind, f.file) for f in found] == [("orphan-file", "ralph/references/stray.md")]


def test_a_file_named_through_a_symlink_or_another_spelling_is_no_orphan(
    tmp_path: Path,
) -> None:
    """Rows name files by their index path, a bare name, a `./` spelling or a symlink to
    them: only the file no row reaches any of these ways is an orphan."""
    refs = {n: f"# {n}\n" for n in ("auth-flow.md", "db.md", "c.md", "d.md", "stray.md")}
    text = CLEAN.replace(
        "| Database schema | ralph/references/db.md |\n",
        "| Database schema | db.md |\n| C | ralph/references/./c.md |\n"
        "| Linked | ralph/references/link.md |\n",
    )
    root = make(tmp_path, text, refs=refs)
    os.symlink("d.md", root / "ralph/references/link.md")
    found = audit.check(project.locate(root))
    assert [(f.kind, f.file) for f in found if f.kind == "orphan-file"] == [
        ("orphan-file", "ralph/references/stray.md")
    ]


def test_archived_files_are_not_orphans(tmp_path: Path) -> None:
    refs = {"auth-flow.md": "# A\n", "db.md": "# D\n", "archive/old.md": "# Old\n"}
    assert kinds(make(tmp_path, refs=refs)) == []


@pytest.mark.parametrize("path", ["../outside.md", "/etc/passwd", "ralph/references/../../x.md"])
def test_paths_escaping_the_folder(tmp_path: Path, path: str) -> None:
    text = CLEAN.replace("ralph/references/db.md", path)
    assert "path-escape" in kinds(make(tmp_path, text))


def test_symlink_escaping_the_folder(tmp_path: Path) -> None:
    root = make(tmp_path, refs={"auth-flow.md": "# A\n"})
    (tmp_path / "secret.md").write_text("secret")
    os.symlink(tmp_path / "secret.md", root / "ralph/references/db.md")
    assert "path-escape" in kinds(root)


def test_duplicate_and_near_duplicate_topics(tmp_path: Path) -> None:
    text = CLEAN.replace(
        "| Database schema | ralph/references/db.md |\n",
        "| Database schema | ralph/references/db.md |\n| auth-flows | ralph/references/af.md |\n"
        "| Auth flow | ralph/references/af2.md |\n| Athentication | ralph/references/x.md |\n"
        "| Authentication | ralph/references/y.md |\n",
    )
    refs = {n: "# t\n" for n in ("auth-flow.md", "db.md", "af.md", "af2.md", "x.md", "y.md")}
    found = audit.check(project.locate(make(tmp_path, text, refs)))
    got = sorted((f.kind, f.line) for f in found)
    assert ("duplicate-topic", 10) in got  # "auth-flows" is "Auth flow" (line 8)
    assert ("duplicate-topic", 11) in got  # "Auth flow" twice
    assert ("near-duplicate", 13) in got  # a typo: Athentication / Authentication
    assert not any(line in (8, 9, 12) for _k, line in got)  # first spellings, Database


def test_same_file_in_two_rows(tmp_path: Path) -> None:
    text = CLEAN.replace("ralph/references/db.md", "ralph/references/auth-flow.md")
    assert "duplicate-path" in kinds(make(tmp_path, text, {"auth-flow.md": "# A\n"}))


def test_reference_over_the_cap(tmp_path: Path) -> None:
    refs = {"auth-flow.md": "# Auth flow\n" + "- a learning about tokens\n" * 40, "db.md": "# D\n"}
    root = make(tmp_path, refs=refs, yaml_text="references:\n  max_tokens: 100\n")
    found = audit.check(project.locate(root))
    assert [f.kind for f in found] == ["oversized"]
    assert "over references.max_tokens (100)" in found[0].message


@pytest.mark.parametrize(
    "bad",
    [
        "| Auth flow | ralph/references/auth-flow.md | extra |\n",
        "Auth flow -> ralph/references/auth-flow.md\n",
        "| | ralph/references/auth-flow.md |\n",
    ],
)
def test_malformed_table(tmp_path: Path, bad: str) -> None:
    text = CLEAN.replace("| Auth flow | ralph/references/auth-flow.md |\n", bad)
    assert "malformed-table" in kinds(make(tmp_path, text))


def test_table_without_separator(tmp_path: Path) -> None:
    assert "malformed-table" in kinds(make(tmp_path, CLEAN.replace("|---|---|\n", "")))


def test_log_entry_without_story_id(tmp_path: Path) -> None:
    text = CLEAN + "\n## 2026-01-03\n- forgot the id\n---\n"
    found = audit.check(project.locate(make(tmp_path, text)))
    line = text.split("\n").index("## 2026-01-03") + 1
    assert [(f.kind, f.line) for f in found] == [("entry-without-story", line)]


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_fence_left_open_is_reported_at_its_line(tmp_path: Path, eol: str) -> None:
    """A stray ``` does not hide entries from ralph, but the agent reads the rest as code."""
    more = "## 2026-01-03 - US-003\n- more things\n"
    text = CLEAN.replace("- did things\n", "- did things\n```bash\nnpm test\n") + more
    text = text.replace("\n", eol)
    root = make(tmp_path, text)
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "check"], cwd=root, capture_output=True, text=True
    )
    line = text.split(eol).index("```bash") + 1
    assert out.returncode == 1, out.stdout
    assert f"progress.txt:{line}: this code fence is never closed" in out.stdout
    assert "[unclosed-fence]" in out.stdout and "Traceback" not in out.stderr
    closed = text.replace("npm test" + eol, "npm test" + eol + "```" + eol)
    (root / "progress.txt").write_text(closed, newline="")
    assert kinds(root) == []


def test_interrupted_apply_is_reported(tmp_path: Path) -> None:
    root = make(tmp_path)
    (root / ".ralph-journal").mkdir()
    assert kinds(root) == ["interrupted-apply"]


def test_cli_exit_1_one_line_per_finding(tmp_path: Path) -> None:
    root = make(tmp_path, refs={"auth-flow.md": "# A\n", "stray.md": "# S\n"})
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "check"], cwd=root, capture_output=True, text=True
    )
    assert out.returncode == 1
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[-1] == "ralph check: 2 finding(s)"
    assert all("(fix: " in ln for ln in lines[:2])


def test_pre_commit_hook_definition() -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "ralph-check" and hook["entry"] == "ralph check"
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    import re

    files = re.compile(hook["files"])
    assert files.search("scripts/ralph/progress.txt") and files.search("progress.txt")
    assert files.search("ralph/references/auth.md")
    assert not files.search("src/main.py")


def test_pre_commit_style_run_blocks_a_bad_commit(tmp_path: Path) -> None:
    """What pre-commit does with the hook: run `entry` in the repo root, fail on exit 1."""
    root = make(tmp_path, refs={"auth-flow.md": "# A\n"})
    ralph = Path(sys.executable).with_name("ralph")
    hook = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())[0]
    argv = [str(ralph), *hook["entry"].split()[1:]]
    assert subprocess.run(argv, cwd=root, capture_output=True).returncode == 1
    (root / "ralph/references/db.md").write_text("# Database schema\n")
    assert subprocess.run(argv, cwd=root, capture_output=True).returncode == 0


def test_always_topic_without_row(tmp_path: Path) -> None:
    root = make(tmp_path, yaml_text="references:\n  always: [Auth flow, Deploy notes]\n")
    found = audit.check(project.locate(root))
    assert [(f.kind, f.file) for f in found] == [("unknown-always", "ralph.yaml")]
    assert "'Deploy notes'" in found[0].message


def test_the_similar_index_finds_exactly_what_comparing_every_pair_finds() -> None:
    """SimilarIndex answers as `similar` over every earlier name would, on names that share
    words, reorder them, and misspell them (a topic in several trigram postings included)."""
    import random

    rng = random.Random(7)
    words = ["billing", "invoice", "totals", "session", "cookies", "refresh", "tokens", "auth"]

    def typo(w: str) -> str:
        i = rng.randrange(len(w))
        return w[:i] + rng.choice("aeiou") + w[i + 1 :] if rng.random() < 0.3 else w

    names = [
        " ".join(typo(rng.choice(words)) for _ in range(rng.randint(1, 3))) for _ in range(400)
    ]
    index = audit.SimilarIndex()
    for j, name in enumerate(names):
        brute = [i for i in range(j) if audit.similar(names[i], name)]
        assert index.matches(name) == brute, name
        index.add(name)
