"""Interrupted applies never cost the user memory: real `ralph` processes in tmp git repos.

1. a pending journal stops `ralph run` and the dry run (which writes nothing); recovery never
   overwrites a file changed after the journal was prepared, and a rollback keeps it;
2. memory commands always take the lock, also before a project's first run;
3. an error or a stop signal while preparing rolls back at once;
4. writes go through a symlinked progress.txt, which stays a link.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from run_helpers import RALPH, env, make_project, ralph

from orchestrator.memory import journal

RD = "scripts/ralph"


def tree(root: Path) -> dict[str, str]:
    """The project's files as digests (not git's, not the log folder's: ledger, lock)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts and "logs" not in p.parts
    }


def flat_log(n: int) -> str:
    """A ralph.sh progress.txt of `n` entries, each with learnings migrate moves."""
    out = ["# Ralph Progress Log\nStarted: 2026-01-01\n---\n"]
    for i in range(1, n + 1):
        out.append(
            f"\n## 2026-01-{i % 28 + 1:02d} - US-{i:03d}\n- Implemented feature {i}\n"
            f"- Files changed: src/feature{i}.ts\n- **Learnings for future iterations:**\n"
            f"  - Auth tokens for feature {i} are checked in `src/auth/f{i}.ts`\n"
            f"  - Database migration {i} needs `npm run db:migrate` before tests\n---\n"
        )
    return "".join(out)


def wait_for_journal(root: Path, state: str, proc: subprocess.Popen[str]) -> None:
    jfile = root / RD / journal.JOURNAL_DIR / "journal.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(jfile.read_text())["state"] == state:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"the journal never reached {state!r}: {proc.communicate()}")


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stdout + res.stderr


# --------------------------------------------------------------------------- 1. the journal


def test_pending_journal_stops_writers_and_recovery_never_overwrites(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 4, config={"log": {"keep_entries": 1}})
    assert ralph(root, "run", "--tool", "sim", "2").returncode == 1  # two entries logged
    progress = root / RD / "progress.txt"
    # An index (empty): compact rotates the entries of an indexed log only.
    head, rest = progress.read_text().split("---\n", 1)
    index = "\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    progress.write_text(f"{head}---\n{index}{rest}")
    # Killed after its first rename (the archive file), before progress.txt's.
    killed = ralph(root, "compact", "--apply", RALPH_TEST_KILL_AFTER_RENAMES="1")
    assert killed.returncode == -signal.SIGKILL
    assert (root / RD / journal.JOURNAL_DIR).is_dir()
    before = tree(root)

    blocked = ralph(root, "run", "--tool", "sim", "1")
    no_traceback(blocked)
    assert blocked.returncode == 2, blocked.stderr
    assert "ralph compact --recover" in blocked.stderr and "--rollback" in blocked.stderr
    dry = ralph(root, "compact")  # a dry run reports the journal and writes nothing
    assert dry.returncode == 2 and "ralph compact --recover" in dry.stderr
    status = ralph(root, "status")
    assert status.returncode == 0 and "interrupted" in status.stdout
    assert tree(root) == before

    # A writer that ignored the journal (an editor, an older ralph) adds an entry.
    progress.write_text(progress.read_text() + "\n## 2026-02-01 - US-099\n- kept entry\n---\n")
    changed = progress.read_bytes()
    refused = ralph(root, "compact", "--recover")
    no_traceback(refused)
    assert refused.returncode == 2 and str(progress) in refused.stderr
    assert "Nothing was changed" in refused.stderr and "--rollback" in refused.stderr
    assert progress.read_bytes() == changed and (root / RD / journal.JOURNAL_DIR).is_dir()

    undone = ralph(root, "compact", "--rollback")
    assert undone.returncode == 0, undone.stderr
    assert progress.read_bytes() == changed  # the change is kept
    assert not (root / RD / journal.JOURNAL_DIR).exists()
    assert not (root / RD / "archive/progress-log.md").exists()  # the apply's file, undone
    (kept,) = (root / RD).glob(journal.KEPT_PREFIX + "*")
    assert str(kept) in undone.stdout
    assert any("kept entry" not in p.read_text() for p in (kept / "backup").iterdir())
    assert {p.name.split("-", 1)[1] for p in (kept / "new").iterdir()} == {
        "progress-log.md",
        "progress.txt",
    }
    again = ralph(root, "run", "--tool", "sim", "1")
    assert again.returncode == 1, again.stderr
    assert "- kept entry" in progress.read_text()


# --------------------------------------------------------------------------- 2. the lock


def test_memory_commands_exclude_each_other_before_the_first_run(tmp_path: Path) -> None:
    twin = make_project(tmp_path / "twin", 2)
    (twin / RD / "progress.txt").write_text(flat_log(40))
    assert ralph(twin, "migrate").returncode == 0
    root = make_project(tmp_path / "p", 2)
    (root / RD / "progress.txt").write_text(flat_log(40))
    assert not (root / "ralph/logs").exists()  # a project that never ran

    first = subprocess.Popen(
        [*RALPH, "migrate"],
        cwd=root,
        env=env(RALPH_TEST_SLOW_PREPARE="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_journal(root, "preparing", first)
        for second in (("migrate",), ("compact", "--apply"), ("run", "--tool", "sim", "1")):
            res = ralph(root, *second)
            assert first.poll() is None, "the first migrate ended too soon for the test"
            no_traceback(res)
            assert res.returncode == 2, (second, res.stdout, res.stderr)
            assert f"(pid {first.pid}," in res.stderr and "command 'ralph migrate'" in res.stderr
            assert "interrupted" not in res.stderr  # no false advice to recover
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert tree(root) == tree(twin)  # the first migrate's result, whole
    assert not (root / "ralph/logs").exists()  # the lock lived in the user's cache


# --------------------------------------------------------------------------- 3. errors


def _lock_folder(folder: Path) -> list[str] | None:
    """Make `folder` refuse new files: chattr +i (root), else chmod. None if neither works."""
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return ["chattr", "-i", str(folder)]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return ["chmod", "755", str(folder)]
    return None


def test_write_error_while_preparing_rolls_back_at_once(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    (root / RD / "progress.txt").write_text(flat_log(6))
    undo = _lock_folder(root / "ralph/references")
    if undo is None:
        pytest.skip("this platform lets root write into any folder (no chattr)")
    try:
        before = tree(root)
        res = ralph(root, "migrate")
        no_traceback(res)
        assert res.returncode == 2, res.stderr
        assert f"{root / 'ralph/references'}: cannot write in it" in res.stderr
        assert "Fix: " in res.stderr and "the apply was rolled back" in res.stderr
        assert tree(root) == before
        assert not (root / RD / journal.JOURNAL_DIR).exists()
        assert not list(root.rglob("*.ralph-new")) and not (root / RD / "archive").exists()
    finally:
        subprocess.run(undo, check=True)
    fixed = ralph(root, "migrate")
    assert fixed.returncode == 0, fixed.stderr


def test_stop_signal_while_preparing_rolls_back(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    (root / RD / "progress.txt").write_text(flat_log(12))
    before = tree(root)
    proc = subprocess.Popen(
        [*RALPH, "migrate"],
        cwd=root,
        env=env(RALPH_TEST_SLOW_PREPARE="0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_journal(root, "preparing", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted while preparing" in err and "rolled back" in err
    assert "Traceback" not in err
    assert tree(root) == before
    assert not (root / RD / journal.JOURNAL_DIR).exists()
    assert not list(root.rglob("*.ralph-new"))


# --------------------------------------------------------------------------- 4. symlinks


def test_symlinked_progress_stays_a_link_through_migrate_and_rollback(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    shared = tmp_path / "shared"
    shared.mkdir()
    real = shared / "progress.txt"
    real.write_text(flat_log(6))
    link = root / RD / "progress.txt"
    link.symlink_to(real)
    original = real.read_bytes()

    killed = ralph(root, "migrate", RALPH_TEST_KILL_AFTER_RENAMES="3")
    assert killed.returncode == -signal.SIGKILL
    assert ralph(root, "compact", "--rollback").returncode == 0
    assert link.is_symlink() and real.read_bytes() == original

    res = ralph(root, "migrate")
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and link.resolve() == real  # still the same link
    assert "## Progress Index" in real.read_text()  # the new text is in the linked file
    assert not list(shared.glob(".*"))  # no temp file left beside it
    assert ralph(root, "check").returncode == 0


# --------------------------------------------------------------------------- units


def test_failed_apply_puts_a_deleted_symlink_back_as_a_link(tmp_path: Path, monkeypatch) -> None:
    real = tmp_path / "elsewhere.md"
    real.write_text("# Auth\n- facts\n")
    link = tmp_path / "auth.md"
    link.symlink_to(real)
    txn = journal.Transaction(tmp_path)
    txn.delete(link)
    txn.write(tmp_path / "archive" / "auth.md", "# Auth\n- facts\n")

    def boom(done: int) -> None:
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(journal, "after_rename", boom)
    with pytest.raises(OSError):
        txn.commit()
    assert link.is_symlink() and link.resolve() == real and real.read_text() == "# Auth\n- facts\n"
    assert not (tmp_path / "archive").exists() and journal.pending(tmp_path) is None


def test_recover_refuses_to_delete_a_file_changed_since(tmp_path: Path) -> None:
    doomed = tmp_path / "old.md"
    doomed.write_text("v1\n")
    txn = journal.Transaction(tmp_path)
    txn.delete(doomed)
    txn._prepare(txn._records())  # prepared, then the process "dies" before the delete
    doomed.write_text("v2, edited after\n")
    with pytest.raises(journal.JournalConflict, match="old.md changed after it was prepared"):
        journal.recover(tmp_path)
    assert doomed.read_text() == "v2, edited after\n" and journal.pending(tmp_path)
    assert "kept as they are now" in (journal.recover(tmp_path, rollback=True) or "")
    assert doomed.read_text() == "v2, edited after\n" and journal.pending(tmp_path) is None


def test_a_journal_of_an_older_version_still_recovers(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old")
    txn = journal.Transaction(tmp_path)
    txn.write(target, "new")
    txn._prepare(txn._records())
    jfile = tmp_path / journal.JOURNAL_DIR / "journal.json"
    record = json.loads(jfile.read_text())
    for op in record["ops"]:  # no digests, no links: what earlier versions wrote
        for key in ("before", "after", "link", "new_dir"):
            op.pop(key)
    jfile.write_text(json.dumps(record))
    assert "completed" in (journal.recover(tmp_path) or "")
    assert target.read_text() == "new" and journal.pending(tmp_path) is None


# --------------------------------------------------------------------------- 5. moved projects


def _killed_migrate(root: Path) -> None:
    """A migrate SIGKILLed after three renames: its journal pending, `.ralph-new` files left."""
    (root / RD / "progress.txt").write_text(flat_log(6))
    killed = ralph(root, "migrate", RALPH_TEST_KILL_AFTER_RENAMES="3")
    assert killed.returncode == -signal.SIGKILL
    assert list(root.rglob("*.ralph-new"))


def _recovered(root: Path) -> bool:
    return (
        "## Progress Index" in (root / RD / "progress.txt").read_text()
        and not list(root.rglob("*.ralph-new"))
        and not (root / RD / journal.JOURNAL_DIR).exists()
    )


def test_a_moved_or_copied_project_recovers_where_it_is_now(tmp_path: Path) -> None:
    a = make_project(tmp_path / "jA", 2)
    _killed_migrate(a)
    copy = tmp_path / "jC"
    subprocess.run(["cp", "-a", str(a), str(copy)], check=True)
    before = tree(a)
    res = ralph(copy, "compact", "--recover")
    assert res.returncode == 0 and "completed an interrupted apply" in res.stdout, res.stderr
    assert _recovered(copy)
    assert tree(a) == before  # the original, never touched from its copy
    moved = a.rename(tmp_path / "jB")
    res = ralph(moved, "compact", "--recover")
    assert res.returncode == 0, res.stderr
    assert _recovered(moved) and ralph(moved, "check").returncode == 0


def _as_older_version(root: Path) -> None:
    """Rewrite the pending journal as earlier versions wrote it: absolute paths, no root."""
    jfile = root / RD / journal.JOURNAL_DIR / "journal.json"
    body = json.loads(jfile.read_text())
    base = Path(os.path.normpath(jfile.parent.parent / body.pop("root")))
    body.pop("version")
    for op in body["ops"]:
        for key in ("target", "tmp", "backup", "new_dir"):
            if op[key] is not None:
                op[key] = str(base / op[key])
    jfile.write_text(json.dumps(body))


def test_an_older_absolute_journal_recovers_here_and_refuses_elsewhere(tmp_path: Path) -> None:
    a = make_project(tmp_path / "jA", 2)
    _killed_migrate(a)
    _as_older_version(a)
    copy = tmp_path / "jC"
    subprocess.run(["cp", "-a", str(a), str(copy)], check=True)
    before_a, before_copy = tree(a), tree(copy)
    refused = ralph(copy, "compact", "--recover")
    no_traceback(refused)
    assert refused.returncode == 2
    jfile = copy / RD / journal.JOURNAL_DIR / "journal.json"
    assert f"{jfile}: this interrupted apply was prepared by an older" in refused.stderr
    assert f"for the files under {a}" in refused.stderr and "Fix: " in refused.stderr
    assert tree(a) == before_a and tree(copy) == before_copy  # nothing changed anywhere
    res = ralph(a, "compact", "--recover")  # in its own project: its paths are mapped
    assert res.returncode == 0, res.stderr
    assert _recovered(a)


# --------------------------------------------------------------------------- 6. stray temps


def test_recover_after_a_kill_while_preparing_leaves_no_temp_file(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    (root / RD / "progress.txt").write_text(flat_log(12))
    before = tree(root)
    proc = subprocess.Popen(
        [*RALPH, "migrate"],
        cwd=root,
        env=env(RALPH_TEST_SLOW_PREPARE="0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_journal(root, "preparing", proc)
    time.sleep(0.5)  # a few `.ralph-new` files written
    proc.kill()
    proc.communicate(timeout=60)
    new = sorted(root.rglob("*.ralph-new"))
    assert new
    # A `.ralph-new` file is written as it is named: no hidden temp beside it...
    assert not [p for p in root.rglob("*.tmp") if ".git" not in p.parts]
    # ...but earlier versions wrote it through one, which a kill could leave behind.
    strays = [p.with_name(f".{p.name}.x1y2z3w4.tmp") for p in new]
    for stray in strays:
        stray.write_text("half a reference")
    res = ralph(root, "compact", "--recover")
    assert res.returncode == 0 and "rolled back" in res.stdout, res.stderr
    assert not any(p.exists() for p in strays) and not list(root.rglob("*.ralph-new"))
    assert tree(root) == before
    assert ralph(root, "migrate").returncode == 0
    assert not [p for p in root.rglob("*.tmp") if ".git" not in p.parts]
