"""Charts are an extra: `pip install 'ralph-index[charts]'`.

matplotlib (with numpy's friends) is tens of megabytes and half a second to import, which a
pre-commit hook that only runs `ralph check` should never pay. The commands that draw
(`ab`, `demo`, `report`, `savings`) call `require` before they start any work, so a missing
extra is one clear message, never a traceback after an hour of A/B runs.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from types import ModuleType
from typing import Any

from orchestrator import fsutil
from orchestrator.errors import UsageError

EXTRA = "pip install 'ralph-index[charts]'"


def require(command: str) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            f"`ralph {command}` draws its charts with matplotlib, which this install lacks: {EXTRA}"
        )


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the file-only Agg backend (no display on servers and CI)."""
    require("report")
    # Imported here, not at the top: the extra may be absent and is heavy (see above).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    """Lay out, render and close `fig`, then write it atomically to `path`."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    fsutil.atomic_write_bytes(path, buf.getvalue())
    return path
