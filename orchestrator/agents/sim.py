"""The simulated agent (`--tool sim`): a SIMULATION for demos, the README and tests.

It spawns `python -m orchestrator.sim.agent` exactly like a real agent (argv, prompt on
stdin, project root as cwd, through the runner's pty). The simulated agent prints Claude
Code's stream-json, so this adapter reuses the claude adapter's live display and parser.
Its usage figures are tiktoken counts of what it read and wrote, priced at a fixed
$3/M input and $15/M output tokens (see orchestrator/sim/stream.py).

ralph.yaml:

    agents:
      sim:
        args: ["--delay", "0.3"]            # any flag of `python -m orchestrator.sim.agent --help`
        env: {RALPH_SIM_FAULT: "limit-event", RALPH_SIM_FAULT_TIMES: "1"}
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from orchestrator.agents.claude import ClaudeAgent

# The folder that holds the `orchestrator` package: on PYTHONPATH, the simulated agent can be
# imported from any project folder even when this checkout is not installed.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class SimAgent(ClaudeAgent):
    name = "sim"
    binary = "python"
    default_prompt_via = "stdin"

    def command(self) -> list[str]:
        return list(self.settings.command or [sys.executable, "-m", "orchestrator.sim.agent"])

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command()
        if self.model:
            argv += ["--model", self.model]
        if self.prompt_via in ("file", "argument"):
            # The simulation reads a file either way; an argv string would be capped at 128 KiB.
            argv += ["--prompt-file", str(prompt_file)]
        return argv + self.settings.args

    def env(self) -> dict[str, str]:
        path = os.environ.get("PYTHONPATH", "")
        env = {"PYTHONPATH": os.pathsep.join(p for p in (_PACKAGE_PARENT, path) if p)}
        env.update(self.settings.env)
        return env

    def check_available(self, prompt_file: Path | None = None) -> str:
        exe = self.command()[0]
        if os.path.isabs(exe) and os.access(exe, os.X_OK):
            return exe
        return super().check_available(prompt_file)


def create(settings: Any = None) -> SimAgent:
    return SimAgent(settings)
