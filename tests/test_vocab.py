"""The entry vocabulary (memory/vocab.py): the "Files changed" lists real agents write.

Each snippet reproduces the shape of a list seen in real Ralph logs (names made up)."""

from __future__ import annotations

import pytest

from orchestrator.memory.vocab import extract_files


@pytest.mark.parametrize(
    ("block", "files"),
    [
        # A note in parentheses holding a comma ends neither the note nor the list.
        (
            "- Files changed: a/x.ts (new), b/y.ts (added z import, w render), c.html\n",
            ["a/x.ts", "b/y.ts", "c.html"],
        ),
        (
            "- Files changed:\n  - lib/s.py (added `n()`, `pub()` method)\n  - lib/h.py\n",
            ["lib/s.py", "lib/h.py"],
        ),
        (
            "### Files changed\n- a.json, a.lock (deps: -x, +y)\n- b/c.ts\n",
            ["a.json", "a.lock", "b/c.ts"],
        ),
        # A list written as a sentence: the full stop is not part of the last path.
        ("- Files changed: `docs/a.md`, `tools/p.txt`.\n", ["docs/a.md", "tools/p.txt"]),
        ("- Files changed: docs/a.md, tools/p.txt.\n", ["docs/a.md", "tools/p.txt"]),
        # Dot-files are files: the list goes on after them and keeps their leading dot.
        (
            "- Files changed: pkg.json, .prettierrc, .env.example, web/main.css\n",
            ["pkg.json", ".prettierrc", ".env.example", "web/main.css"],
        ),
        (
            "- Files changed:\n  - .cfg/prd.json (done)\n  - .cfg/log.txt (append)\n",
            [".cfg/prd.json", ".cfg/log.txt"],
        ),
        ("- Files changed:\n  - Updated: `.env.sample` (+3 lines)\n", [".env.sample"]),
        # A glob names files too, and the paths after it are not lost.
        (
            "- Files changed: store/q.go (new), store/sql/*.sql (12 new files), cmd/n.go\n",
            ["store/q.go", "store/sql/*.sql", "cmd/n.go"],
        ),
        (
            "- Files changed: core/lib.rs, core/io/*, .notes/n.md\n",
            ["core/lib.rs", "core/io/*", ".notes/n.md"],
        ),
        # "Files changed" with no colon, its list under it.
        (
            "- Files changed\n  - src/g.ts\n  - tasks/prd.json\n- Commit: `x`\n",
            ["src/g.ts", "tasks/prd.json"],
        ),
    ],
)
def test_files_lists_of_real_shapes(block: str, files: list[str]) -> None:
    assert extract_files("## 2026-01-01 - US-001\n" + block) == files


@pytest.mark.parametrize(
    ("block", "files"),
    [
        # Prose after a colonless bullet is not a label.
        ("- Files changed in the refactor were many\n  - src/not.ts\n", []),
        ("- Files changed: none (just PRD update)\n", []),
        ("- Files changed: API service, scheduled/manual jobs\n", []),
        ("- Files changed: see `a.ts`. Also b.\n", ["a.ts"]),
        # In prose a backticked ".then" is a method, not a dot-file.
        ("- Files changed: fixed `.then` chains and `.length` in `api/x.ts`\n", ["api/x.ts"]),
    ],
)
def test_what_is_not_a_files_list(block: str, files: list[str]) -> None:
    assert extract_files("## 2026-01-01 - US-001\n" + block) == files


@pytest.mark.parametrize(
    ("block", "files"),
    [
        # Bullets under a file say what changed in it: "(e.g. x (1).log)" names no file.
        (
            "- **Files changed:**\n  - `srv/export.ts` - New handler:\n"
            '    - Retries a failed batch (e.g., "x (1).log")\n'
            "    - Calls `queue.flush()`, writes `out-DATE.csv`\n"
            "  - `package.json` - Added `zod`\n",
            ["srv/export.ts", "package.json"],
        ),
        # Under an item naming no file, the bullets are the files.
        (
            "- Files changed:\n  - Backend:\n    - srv/a.py\n    - srv/b.py\n  - web/c.ts\n",
            ["srv/a.py", "srv/b.py", "web/c.ts"],
        ),
        ("- Files changed: a.ts\n  - b/c.ts\n", ["a.ts", "b/c.ts"]),
        # A folder does not describe its nested files: they are files too.
        (
            "- Files changed:\n  - src/components/ (new)\n    - Button.tsx\n    - Card.tsx\n",
            ["src/components/", "Button.tsx", "Card.tsx"],
        ),
    ],
)
def test_nested_bullets_of_a_files_list(block: str, files: list[str]) -> None:
    assert extract_files("## 2026-01-01 - US-001\n" + block) == files


@pytest.mark.parametrize(
    ("block", "files"),
    [
        # A file name with spaces, in backticks, with an extension.
        (
            "- Files changed:\n  - `Ops runbook.md`\n  - `docs/Launch plan.md` (new)\n",
            ["Ops runbook.md", "docs/Launch plan.md"],
        ),
        ("- Files changed: `회의 메모.md`, `b.ts`\n", ["회의 메모.md", "b.ts"]),
        # A command in backticks is no file.
        ("- Files changed:\n  - `go test ./...` passes\n", []),
        ("- Files changed:\n  - `npm run build` (ok), `a.ts`\n", ["a.ts"]),
        ("- Files changed:\n  - `node scripts/seed.js` (run once)\n  - b.ts\n", ["b.ts"]),
        ("- Files changed:\n  - `bash run tests.sh`\n", []),
    ],
)
def test_file_names_with_spaces(block: str, files: list[str]) -> None:
    assert extract_files("## 2026-01-01 - US-001\n" + block) == files
