"""Claude-style stream-json output for the simulated agent, with honest token accounting.

The simulated agent speaks Claude Code's `--output-format stream-json` dialect (system init,
assistant messages with text/tool_use blocks, user tool_result lines, a final `result` line)
so the claude adapter's parser reads it unchanged.

Accounting (documented, so A/B figures mean something): input tokens are the tiktoken count
of the prompt plus every file the agent read; output tokens are the count of everything it
wrote (its text blocks and the JSON arguments of its tool calls). A real model re-reads its
context on every turn; the simulation counts each text once. Cost uses a fixed price,
PRICE_IN_PER_M / PRICE_OUT_PER_M dollars per million tokens (Claude Sonnet list prices).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TextIO

from orchestrator import tokens

PRICE_IN_PER_M = 3.0
PRICE_OUT_PER_M = 15.0
DEFAULT_MODEL = "claude-sim"


def cost_usd(
    input_tokens: int,
    output_tokens: int,
    price_in: float = PRICE_IN_PER_M,
    price_out: float = PRICE_OUT_PER_M,
) -> float:
    return round(input_tokens * price_in / 1e6 + output_tokens * price_out / 1e6, 6)


def numbered(text: str) -> str:
    """File text the way Claude's Read tool returns it: `<n>\\t<line>` per line."""
    return "".join(f"{i}\t{line}" for i, line in enumerate(text.splitlines(True), 1))


@dataclass
class Stream:
    """Writes events to `out` and keeps the token tally the `result` line reports."""

    cwd: str
    model: str = DEFAULT_MODEL
    encoding: str = tokens.DEFAULT_ENCODING
    delay: float = 0.0
    price_in: float = PRICE_IN_PER_M
    price_out: float = PRICE_OUT_PER_M
    out: TextIO = field(default_factory=lambda: sys.stdout)
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    input_tokens: int = 0
    output_tokens: int = 0
    turns: int = 0
    started: float = field(default_factory=time.monotonic)
    _tool_seq: int = 0
    _unread: str | None = None

    # ---- low level ---------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.out.flush()

    def pause(self) -> None:
        if self.delay > 0:
            time.sleep(self.delay)

    def count(self, text: str) -> int:
        return tokens.count(text, self.encoding)

    # ---- what the agent reads ----------------------------------------------------------
    def read_prompt(self, prompt: str) -> None:
        """Counted at the first model turn: a request refused up front consumed nothing."""
        self._unread = prompt

    def _take_prompt(self) -> None:
        if self._unread is not None:
            self.input_tokens += self.count(self._unread)
            self._unread = None

    def init(self) -> None:
        self.emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": self.cwd,
                "session_id": self.session_id,
                "tools": ["Bash", "Edit", "Read", "Write"],
                "mcp_servers": [],
                "model": self.model,
                "permissionMode": "bypassPermissions",
                "apiKeySource": "none",
                "simulated": True,
            }
        )

    # ---- assistant turns -----------------------------------------------------------------
    def _assistant(self, block: dict[str, Any], written: str, counted: bool = True) -> None:
        # counted=False: a message before any model work (a refused request), reported with
        # zero usage like the real CLI; it also spares loading the tokenizer.
        if counted:
            self._take_prompt()
        out = self.count(written) if counted else 0
        self.output_tokens += out
        self.turns += 1
        self.emit(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{self.turns}",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [block],
                    "stop_reason": None,
                    "usage": {
                        "input_tokens": self.input_tokens,
                        "output_tokens": out,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                    },
                },
                "parent_tool_use_id": None,
                "session_id": self.session_id,
            }
        )
        self.pause()

    def say(self, text: str, counted: bool = True) -> None:
        self._assistant({"type": "text", "text": text}, text, counted)

    def tool(
        self,
        name: str,
        tool_input: dict[str, Any],
        result: str,
        read_text: str | None = None,
        extra: dict[str, Any] | None = None,
        counted: bool = True,
    ) -> None:
        """One tool call and its result. `read_text` is file text the agent took in."""
        self._tool_seq += 1
        tool_id = f"toolu_sim_{self._tool_seq}"
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
        self._assistant(block, json.dumps(tool_input, ensure_ascii=False), counted)
        if read_text is not None and counted:
            self.input_tokens += self.count(read_text)
        event: dict[str, Any] = {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": result}],
            },
            "parent_tool_use_id": None,
            "session_id": self.session_id,
        }
        if extra:
            event["tool_use_result"] = extra
        self.emit(event)

    def read_file(self, path: str, text: str, counted: bool = True) -> None:
        self.tool(
            "Read",
            {"file_path": path},
            numbered(text),
            read_text=text,
            extra={"type": "text", "file": {"filePath": path, "content": text}},
            counted=counted,
        )

    def write_file(self, path: str, text: str, existed: bool) -> None:
        verb = "updated" if existed else "created"
        self.tool(
            "Write", {"file_path": path, "content": text}, f"File {verb} successfully at: {path}"
        )

    def edit_file(self, path: str, old: str, new: str) -> None:
        self.tool(
            "Edit",
            {"file_path": path, "old_string": old, "new_string": new, "replace_all": False},
            f"The file {path} has been updated successfully.",
        )

    def bash(self, command: str, description: str, output: str = "") -> None:
        self.tool("Bash", {"command": command, "description": description}, output)

    # ---- the end ---------------------------------------------------------------------------
    def result(
        self, text: str, *, is_error: bool = False, api_error_status: int | None = None
    ) -> None:
        cost = cost_usd(self.input_tokens, self.output_tokens, self.price_in, self.price_out)
        usage = {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": self.output_tokens,
        }
        self.emit(
            {
                "type": "result",
                "subtype": "success",
                "is_error": is_error,
                "api_error_status": api_error_status,
                "duration_ms": int((time.monotonic() - self.started) * 1000),
                "num_turns": self.turns,
                "result": text,
                "session_id": self.session_id,
                "total_cost_usd": cost,
                "usage": usage,
                "modelUsage": {
                    self.model: {
                        "inputTokens": self.input_tokens,
                        "outputTokens": self.output_tokens,
                        "cacheReadInputTokens": 0,
                        "cacheCreationInputTokens": 0,
                        "costUSD": cost,
                    }
                },
            }
        )
