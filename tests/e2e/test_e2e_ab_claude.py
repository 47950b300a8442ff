"""`ralph ab --tool claude`: both arms through the real Claude Code CLI and the scripted API.

The server logs every request's size, so the claim of the project is measured on the wire:
the full-history arm's prompt grows with progress.txt, the indexed arm's stays flat."""

from __future__ import annotations

import json

import story_project as sp
from e2e_support import claude_env, ralph_argv, run_pty
from fake_anthropic import FakeAnthropic

# An earlier run's log, as real projects have: the full arm sends all of it every time.
OLD = [
    sp.Story(f"US-0{n}", f"Old story {n}", f"old{n}", "return 0", "True", "Old", "old")
    for n in range(90, 96)
]


def _arm(req) -> str:
    cwd = req.cwd() or ""
    return "full" if "/work/full" in cwd else "indexed" if "/work/indexed" in cwd else "?"


def test_ab_full_arm_grows_indexed_arm_stays_flat(tmp_path, cli_home, claude_bin):
    history = "".join("\n" + sp.entry(s) for s in OLD)
    repo = sp.make_project(tmp_path / "calc", "claude", history=history)
    out_dir = tmp_path / "ab"
    with FakeAnthropic(sp.claude_script(repo), resolve_story=sp.claude_resolver) as api:
        code, out = run_pty(
            ralph_argv("ab", "--tool", "claude", "--parallel", "--out", str(out_dir), "5"),
            cwd=repo,
            env=claude_env(cli_home, api.base_url, claude_bin),
            timeout=280,
        )
    assert code == 0, out[-3000:]

    # The request that opens each CLI session carries the assembled prompt.
    first: dict[str, list[tuple[str, int]]] = {"indexed": [], "full": []}
    for reqs in api.sessions().values():
        first[_arm(reqs[0])].append((reqs[0].story_id, reqs[0].size))
    stories = [s.id for s in sp.STORIES]
    assert [s for s, _ in first["indexed"]] == stories
    assert [s for s, _ in first["full"]] == stories
    full = [n for _, n in first["full"]]
    indexed = [n for _, n in first["indexed"]]
    print(f"\nA/B first-request bytes per story: full {full}, indexed {indexed}")

    entry_bytes = len(sp.entry(sp.STORIES[0]).encode())
    # Full history: every story's appended entry is sent again by the next iteration.
    assert all(b - a >= entry_bytes for a, b in zip(full, full[1:], strict=False))
    # Indexed: starts lower (no old log) and grows by far less than the history does.
    assert all(i < f for i, f in zip(indexed, full, strict=True))
    assert indexed[-1] - indexed[0] < (full[-1] - full[0]) / 2

    # Both arms really did the work, each in its own copy; the user's repo is untouched.
    for arm in ("indexed", "full"):
        recs = [
            json.loads(line)
            for line in (out_dir / arm / "ledger.jsonl").read_text().splitlines()
            if '"event": "iteration"' in line
        ]
        assert [(r["story_id"], r["outcome"], r["mode"]) for r in recs] == [
            (s, "passed", arm) for s in stories
        ]
        assert all(r["usage"]["input_tokens"] > 0 and r["cost_usd"] > 0 for r in recs)
        assert all(r["committed"] and r["checks"]["ok"] for r in recs), [
            r["checks"]["findings"] for r in recs
        ]
    assert (
        json.loads((repo / sp.RALPH_DIR / "prd.json").read_text())["userStories"][0]["passes"]
        is False
    )
    assert (out_dir / "ab-report.md").exists() and (out_dir / "ab-report.json").exists()
