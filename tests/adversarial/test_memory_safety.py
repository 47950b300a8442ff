"""Adversarial cases for memory safety (issue 11, items 1-4), through real `ralph run`
processes with the simulated agent in tmp git repos:

1. names built from user text (story ids, branch names) never break a repair or escape;
2. a wiped reference, a deleted one or a removed index row is restored, a condensed one kept;
3. commands that write memory refuse while a run holds the project lock;
4. a torn ledger line never makes `ralph report` refuse the ledger; a full disk never tears one.

Every case asserts: no Python traceback, and not one line of prior history or reference lost.
The references are real ones: `ralph migrate` run on a corpus history (skipped without it).
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import corpus_dir
from run_helpers import RALPH, env, git, iterations, ledger, make_project, ralph

from orchestrator import ledger as ledger_mod
from orchestrator.fsutil import safe_name
from orchestrator.memory import refloss
from orchestrator.memory.progress import Progress, new_progress_text
from orchestrator.sim.work import condensed

RD = "scripts/ralph"
CORPUS = ("HenryJobst__resulter", "IgaoGuru__carnamapa", "Ic3b3rg__Hotel-CRM")


# --------------------------------------------------------------------------- helpers


def no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]


def content(text: str) -> list[str]:
    """The lines that are history (not blank, not separators)."""
    return [x.rstrip() for x in text.splitlines() if x.strip() not in ("", "---")]


def _is_row(line: str) -> bool:
    return line.startswith("|")


def assert_kept(before: str, after: str) -> None:
    """Every line of `before` is still in `after`, none altered: in order, except index
    table rows (a restored row goes back at the table's end)."""
    old, new = content(before), content(after)
    rows_missing = {x for x in old if _is_row(x)} - {x for x in new if _is_row(x)}
    assert not rows_missing, sorted(rows_missing)[:5]
    left = iter(x for x in new if not _is_row(x))
    missing = [x for x in old if not _is_row(x) and not any(x == y for y in left)]
    assert not missing, missing[:5]


def migrated(tmp: Path, name: str) -> tuple[str, dict[str, str]]:
    """(progress.txt, {index path: text}) after a real `ralph migrate` of a corpus history."""
    src = (corpus_dir() or Path("/nonexistent")) / name / "progress.txt"
    if not src.is_file():
        pytest.skip(f"corpus history {name} not found")
    root = tmp / f"migrate-{name}"
    (root / RD).mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    shutil.copy(src, root / RD / "progress.txt")
    out = ralph(root, "migrate", "--dir", RD)
    assert out.returncode == 0, out.stderr
    refs = {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted((root / "ralph" / "references").glob("*.md"))
    }
    return (root / RD / "progress.txt").read_text(), refs


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    return migrated(tmp_path_factory.mktemp("corpus"), CORPUS[0])


def seeded(
    root: Path,
    memory: tuple[str, dict[str, str]],
    story_id: str = "US-001",
    fault: str | None = None,
    **kw,
) -> Path:
    """A one-story project whose memory is the migrated corpus history, committed."""
    sim_env = {"RALPH_SIM_FAULT": fault, "RALPH_SIM_FAULT_STORY": story_id} if fault else {}
    make_project(root, 1, config={"mode": "indexed"}, sim_env=sim_env, **kw)
    prd_path = root / RD / "prd.json"
    data = json.loads(prd_path.read_text())
    data["userStories"][0]["id"] = story_id
    prd_path.write_text(json.dumps(data, indent=2) + "\n")
    progress, refs = memory
    (root / RD / "progress.txt").write_text(progress)
    for path, text in refs.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "memory")
    return root


def run(root: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    out = ralph(root, "run", "--tool", "sim", "1", *args, **kw)
    no_traceback(out)
    return out


def memory_kept(root: Path, memory: tuple[str, dict[str, str]]) -> None:
    progress, refs = memory
    assert_kept(progress, (root / RD / "progress.txt").read_text())
    for path, text in refs.items():
        assert_kept(text, (root / path).read_text())


# --------------------------------------------------------------------------- 1. names


WEIRD_IDS = [
    "API/006",
    "../../x",
    "story with  spaces",
    "Ünïcödé/ストーリー",
    "L" * 300,
    "-rf ..",
]


@pytest.mark.parametrize("story_id", WEIRD_IDS, ids=lambda s: safe_name(s)[:20])
def test_story_id_from_user_text_never_blocks_the_repair(tmp_path: Path, memory, story_id) -> None:
    root = seeded(tmp_path / "p", memory, story_id, "truncate-progress")
    out = run(root)
    assert out.returncode == 0, out.stderr
    [rec] = iterations(root)
    checks = rec["checks"]
    assert checks["restored"] and "history_lost" in {f["kind"] for f in checks["findings"]}
    memory_kept(root, memory)
    (backup,) = checks["backups"]
    saved = (root / backup).resolve()
    assert saved.parent == (root / "ralph/logs/backups").resolve() and len(saved.name) < 200
    # The agent's version is what was kept: its new entry only.
    assert f"- {story_id}" in saved.read_text()
    # Nothing was written outside the project's own folders.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    assert not (root / "ralph" / "x-progress.txt").exists()


def test_backup_failure_never_prevents_the_restore(tmp_path: Path, memory) -> None:
    root = seeded(tmp_path / "p", memory, "US-001", "truncate-progress")
    (root / "ralph/logs").mkdir(parents=True)
    (root / "ralph/logs/backups").write_text("a file where the backups folder should be\n")
    out = run(root)
    assert out.returncode == 0, out.stderr
    checks = iterations(root)[0]["checks"]
    kinds = {f["kind"] for f in checks["findings"]}
    assert {"backup_failed", "history_lost"} <= kinds and checks["restored"]
    memory_kept(root, memory)
    assert (root / RD / "progress.txt").stat().st_size > 0


@pytest.mark.parametrize("branch", ["../../../escape", "feat/x y/../../z", "ブランチ/名前"])
def test_archive_name_from_a_branch_stays_in_the_archive(tmp_path: Path, memory, branch) -> None:
    root = seeded(tmp_path / "p", memory)
    # The branch a previous run (ralph.sh or ours) recorded; prd.json now names another.
    (root / RD / ".last-branch").write_text(branch + "\n")
    day_before = time.strftime("%Y-%m-%d")
    out = run(root)
    assert out.returncode == 0, out.stderr
    [folder] = (root / RD / "archive").iterdir()
    days = {day_before, time.strftime("%Y-%m-%d")}  # the run may cross midnight
    assert folder.name[:10] in days and "/" not in folder.name
    assert_kept(memory[0], (folder / "progress.txt").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


# --------------------------------------------------------------------------- 2. references


def _first_reference(root: Path) -> str:
    return Progress.load(root / RD / "progress.txt").index_rows[0].path


def test_wiped_reference_is_restored_and_said(tmp_path: Path, memory) -> None:
    root = seeded(tmp_path / "p", memory, fault="wipe-reference")
    target = _first_reference(root)
    out = run(root)
    assert out.returncode == 0, out.stderr
    assert (root / target).read_text() == memory[1][target]
    checks = iterations(root)[0]["checks"]
    wiped = [f for f in checks["findings"] if f["kind"] == "reference_wiped"]
    assert wiped and wiped[0]["path"] == target and target in checks["restored_files"]
    agents = [b for b in checks["backups"] if b.endswith(Path(target).name)]
    assert agents and "(nothing)" in (root / agents[0]).read_text()
    assert f"restored {target}" in out.stdout and "check (reference_wiped)" in out.stdout
    memory_kept(root, memory)


def test_condensed_reference_is_kept_not_punished(tmp_path: Path, memory) -> None:
    root = seeded(tmp_path / "p", memory, fault="condense-reference")
    target = _first_reference(root)
    out = run(root)
    assert out.returncode == 0, out.stderr
    now = (root / target).read_text()
    assert now == condensed(memory[1][target])  # the agent's version stands
    checks = iterations(root)[0]["checks"]
    assert target not in checks["restored_files"] and target in checks["updated_references"]
    assert not {"reference_wiped", "reference_deleted"} & {f["kind"] for f in checks["findings"]}


def test_deleted_reference_is_restored(tmp_path: Path, memory) -> None:
    root = seeded(tmp_path / "p", memory, fault="delete-reference")
    out = run(root)
    assert out.returncode == 0, out.stderr
    checks = iterations(root)[0]["checks"]
    assert "reference_deleted" in {f["kind"] for f in checks["findings"]}
    memory_kept(root, memory)


def test_removed_index_row_is_restored(tmp_path: Path, memory) -> None:
    root = seeded(tmp_path / "p", memory, fault="drop-index-row")
    rows_before = Progress.parse(memory[0]).index_rows
    out = run(root)
    assert out.returncode == 0, out.stderr
    checks = iterations(root)[0]["checks"]
    lost = [f for f in checks["findings"] if f["kind"] == "index_row_lost"]
    assert lost and rows_before[0].path in lost[0]["message"]
    rows = {r.path for r in Progress.load(root / RD / "progress.txt").index_rows}
    assert {r.path for r in rows_before} <= rows
    assert f"restored {RD}/progress.txt" in out.stdout
    memory_kept(root, memory)


def _cut_to_first_clause(text: str) -> str:
    """A heavy condensing: story tags and Files lines dropped, each bullet cut to its first
    clause (about a third of the bytes go)."""
    out = []
    for line in text.splitlines():
        body = line.strip()
        if body.startswith("Files:"):
            continue
        if body.startswith("- "):
            body = re.sub(r"^- \[[^\]]*\]\s*", "- ", body)
            body = re.split(r" - | — |; |, so |, because | \(", body)[0]
        out.append(body)
    return "\n".join(x for x in out if x) + "\n"


@pytest.mark.parametrize("name", CORPUS)
def test_condensing_vs_wiping_on_corpus_references(tmp_path: Path, name: str) -> None:
    _, refs = migrated(tmp_path, name)
    judged = [t for t in refs.values() if len(refloss.content_lines(t)) >= refloss.MIN_LINES]
    assert judged
    for text in judged:
        title = text.splitlines()[0]
        assert refloss.assess(text, condensed(text)) is None
        assert refloss.assess(text, _cut_to_first_clause(text)) is None
        assert refloss.assess(text, f"{title}\n\n(nothing)\n") is not None
        assert refloss.assess(text, f"{title}\n\n- see git history\n- tests pass\n") is not None
        assert refloss.assess(text, "") is not None


# --------------------------------------------------------------------------- 3. the lock


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory):
    """A real `ralph run` (slow sim agent) holding the project's lock in another process."""
    root = make_project(
        tmp_path_factory.mktemp("busy") / "p",
        3,
        config={"mode": "indexed"},
        sim_args=["--delay", "3"],
    )
    progress = root / RD / "progress.txt"
    proc = subprocess.Popen(
        [*RALPH, "run", "--tool", "sim", "3"],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    side = root / "ralph/logs/ralph.lock.json"
    deadline = time.monotonic() + 60
    while not (side.is_file() and progress.is_file()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert side.is_file(), "the run never took the lock"
    yield root, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)


MEMORY_COMMANDS = [
    ("compact", "--apply"),
    ("compact", "--rollback"),
    ("migrate",),
    ("init",),
    ("init", "--force"),
]


@pytest.mark.parametrize("command", MEMORY_COMMANDS, ids=" ".join)
def test_memory_command_refuses_while_a_run_holds_the_lock(busy, command) -> None:
    root, proc = busy
    assert proc.poll() is None, "the run ended before the test"
    prd_before = (root / RD / "prd.json").read_bytes()
    out = ralph(root, *command, timeout=60)
    no_traceback(out)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"pid {proc.pid}" in out.stderr and "Nothing was changed" in out.stderr
    assert f"kill {proc.pid}" in out.stderr and "ralph run" in out.stderr
    assert not (root / RD / "prd.json.bak").exists()
    if "--force" in command:  # the run flips passes itself; --force would reset stories
        now = json.loads((root / RD / "prd.json").read_text())
        assert len(now["userStories"]) == len(json.loads(prd_before)["userStories"])


def test_read_only_commands_still_work_during_a_run(busy) -> None:
    root, proc = busy
    for command in (("migrate", "--dry-run"), ("compact",), ("status",)):
        out = ralph(root, *command, timeout=60)
        no_traceback(out)
        assert out.returncode in (0, 1), (command, out.stderr)
        assert "refused" not in out.stderr


def test_compact_during_a_run_leaves_no_duplicate_and_no_blame(tmp_path: Path) -> None:
    # keep_entries 0: compaction rotates every log entry, so an unlocked apply would move
    # the entries the run's checks then put back and blame on the agent.
    cfg = {"mode": "full", "log": {"keep_entries": 0}}
    root = make_project(tmp_path / "p", 2, config=cfg, sim_args=["--delay", "1"])
    # An indexed log (its index empty): compact rotates the entries of such a log only.
    (root / "scripts/ralph/progress.txt").write_text(new_progress_text("2026-01-01", True))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "progress.txt with an index")
    proc = subprocess.Popen(
        [*RALPH, "run", "--tool", "sim", "2"],
        cwd=root,
        env=env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    side = root / "ralph/logs/ralph.lock.json"
    while not side.is_file() and proc.poll() is None:
        time.sleep(0.1)
    tries = []
    while proc.poll() is None:
        tries.append(ralph(root, "compact", "--apply", timeout=60))
        time.sleep(0.5)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    for t in tries:
        no_traceback(t)
    refused = [t for t in tries if t.returncode == 2]
    assert refused and all(f"pid {proc.pid}" in t.stderr for t in refused)
    # Only a try that started as the run was ending may have applied.
    applied = [t for t in tries if t.returncode != 2]
    assert len(applied) <= 1 and (not applied or applied[0] is tries[-1])
    for rec in iterations(root):
        kinds = {f["kind"] for f in rec["checks"]["findings"]}
        assert not kinds & {"history_lost", "reference_deleted", "reference_wiped"}, kinds
    # Free again: the same command runs (and would have moved both entries).
    applied = applied or [ralph(root, "compact", "--apply")]
    no_traceback(applied[0])
    assert applied[0].returncode == 0 and "rotate: 2 old log entries" in applied[0].stdout
    # Each entry is in exactly one place: progress.txt or the log archive, never both.
    files = [root / RD / "progress.txt", *(root / RD / "archive").rglob("*.md")]
    text = "".join(p.read_text() for p in files if p.is_file())
    for sid in ("US-001", "US-002"):
        assert len(re.findall(rf"^## .* - {sid}$", text, re.M)) == 1, text


# --------------------------------------------------------------------------- 4. the ledger


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project after one real run (one story left), to copy per case."""
    root = make_project(tmp_path_factory.mktemp("ledger") / "p", 2)
    assert ralph(root, "run", "--tool", "sim", "1").returncode == 1
    return root


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.mark.parametrize("keep", [1, 0.5, -2, -1], ids=["1-byte", "half", "no-brace", "no-nl"])
def test_torn_last_line_then_another_run(tmp_path: Path, one_run: Path, keep) -> None:
    root = _copy(one_run, tmp_path / "p")
    path = root / "ralph/logs/ledger.jsonl"
    data = path.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    cut = int(len(last) * keep) if isinstance(keep, float) else keep % (len(last) + 1)
    path.write_bytes(data[: len(data) - len(last) - 1] + last[:cut])
    out = run(root)
    assert out.returncode == 0, out.stderr
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends whole
    records = ledger_mod.read(path)
    assert len(records.skipped) == (0 if keep == -1 else 1)
    second = [r for r in records if r["run_id"] != records[0]["run_id"]]
    assert [r["event"] for r in second][0] == "run_start" and second[-1]["event"] == "run_end"
    rep = ralph(root, "report", str(path), "--out", str(tmp_path / "r"))
    no_traceback(rep)
    assert rep.returncode == 0, rep.stderr
    assert ("skipped 1 damaged line" in rep.stderr) == (keep != -1)
    st = ralph(root, "status")
    no_traceback(st)
    assert st.returncode == 0 and ("1 damaged line(s) skipped" in st.stdout) == (keep != -1)


def test_torn_line_in_the_middle_is_skipped_and_the_next_record_recovered(
    tmp_path: Path, one_run: Path
) -> None:
    root = _copy(one_run, tmp_path / "p")
    path = root / "ralph/logs/ledger.jsonl"
    run(root)
    lines = path.read_text().splitlines(keepends=True)
    starts = [i for i, x in enumerate(lines) if '"event": "run_start"' in x]
    k = starts[1]  # the old way to tear: a half record, then the next run's first line
    torn = lines[k - 1].rstrip("\n")[: len(lines[k - 1]) // 2] + lines[k]
    path.write_text("".join(lines[: k - 1]) + torn + "".join(lines[k + 1 :]))
    records = ledger_mod.read(path)
    assert records.skipped == [k] and len(records) == len(lines) - 1
    assert sum(r["event"] == "run_start" for r in records) == 2
    rep = ralph(root, "report", str(path), "--out", str(tmp_path / "r"))
    no_traceback(rep)
    assert rep.returncode == 0 and f"(line {k})" in rep.stderr


def test_disk_full_never_tears_a_ledger_line(tmp_path: Path, one_run: Path) -> None:
    root = _copy(one_run, tmp_path / "p")
    path = root / "ralph/logs/ledger.jsonl"
    # A long ledger, so only the ledger reaches the file size limit (transcripts stay under).
    path.write_bytes(path.read_bytes() * 12)
    limit = path.stat().st_size + 600  # run_start fits, the iteration record does not

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = subprocess.run(
        [*RALPH, "run", "--tool", "sim", "1"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        preexec_fn=small_disk,
        timeout=120,
    )
    no_traceback(out)
    assert out.returncode == 2 and "could not append a ledger record" in out.stderr
    data = path.read_bytes()
    assert data.endswith(b"\n") and len(data) <= limit
    records = ledger_mod.read(path)
    assert not records.skipped and records[-1]["event"] == "run_start"
    # The next run (disk freed) writes whole lines after it.
    again = run(root)
    assert again.returncode == 0, again.stderr
    assert not ledger_mod.read(path).skipped and ledger(root)[-1]["event"] == "run_end"
