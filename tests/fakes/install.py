"""Put fake agent CLIs on PATH for tests: `install(bin_dir, "claude")` creates an executable
`bin_dir/claude` (a python script, no shell) that runs fake_agent.py as that CLI.

Usage from a test file (tests/ is not a package):
    sys.path.insert(0, str(Path(__file__).parent / "fakes")); from install import install
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FAKE = Path(__file__).resolve().parent / "fake_agent.py"
FIXTURES_ENV = "RALPH_FIXTURES"


def install(bin_dir: Path, name: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / name
    exe.write_text(
        f"#!{sys.executable}\n"
        "import runpy\n"
        f"runpy.run_path({str(FAKE)!r}, init_globals={{'FAKE_NAME': {name!r}}}, "
        "run_name='__main__')\n"
    )
    exe.chmod(0o755)
    return exe


def fixtures_dir() -> Path | None:
    """The real recorded transcripts: $RALPH_FIXTURES, /work/shared/fixtures, ../shared/fixtures."""
    repo = Path(__file__).resolve().parents[2]
    for c in (
        os.environ.get(FIXTURES_ENV),
        "/work/shared/fixtures",
        repo.parent / "shared" / "fixtures",
    ):
        if c and Path(c).is_dir():
            return Path(c)
    return None
