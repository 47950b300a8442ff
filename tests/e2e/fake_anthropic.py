"""A scripted Anthropic Messages API on loopback, for driving the real `claude` CLI offline.

The real Claude Code CLI is pointed at this server with ANTHROPIC_BASE_URL. Each `claude -p`
session is told apart by its `X-Claude-Code-Session-Id` header; its story is read from the
request text (the prompt names the story), so one server drives a whole multi-story run.

A script maps a story id to a list of turns. A turn is a `ToolUse` (the CLI runs the tool for
real and sends the result back), a `Text` (the final answer), a `Fail` (HTTP error such as
429 with retry-after) or a `Hang` (accept the request and never answer: the idle-timeout
path). Which turn to play is derived from the request itself (the number of assistant
messages already in the conversation), so the server is stateless per request and survives
the CLI's own retries.

Every request is logged (`server.requests`) with its body size, so tests can assert how the
prompt grows (full history) or stays flat (indexed memory).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fake_http
from fake_http import Hang as Hang
from fake_http import Text as Text

MODEL = "claude-opus-4-8"


@dataclass
class ToolUse:
    """The model calls a tool (Read, Write, Edit, Bash, ...) with `input`."""

    name: str
    input: dict[str, Any]
    text: str | None = None  # optional text block before the tool call


@dataclass
class Fail:
    """Answer with an HTTP error instead of a message (429 rate limit by default)."""

    status: int = 429
    message: str = "Number of request tokens has exceeded your per-minute rate limit"
    retry_after: int | None = 1
    error_type: str = "rate_limit_error"
    # The SDK inside the CLI retries 429s on its own unless told not to; the loop's own
    # wait-and-retry is what we test, so by default the CLI gives up at once.
    should_retry: bool = False


Turn = ToolUse | Text | Fail | Hang
TurnSource = Turn | Callable[["Request"], Turn]
Script = Callable[[str | None, "Request"], list[TurnSource]] | dict[str, list[TurnSource]]


class FailFirst(fake_http.FailFirst):
    """`fake_http.FailFirst` whose default `fail` is a 429 rate-limit `Fail`."""

    default_fail = Fail


@dataclass
class Request(fake_http.Request):
    """One logged HTTP request and how it was answered.

    `kind` is "main" | "side" | "count_tokens" | "other"."""

    session_id: str | None = None  # the X-Claude-Code-Session-Id header

    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    def first_user_text(self) -> str:
        for msg in self.messages():
            if msg.get("role") == "user":
                return _content_text(msg.get("content"))
        return ""

    def cwd(self) -> str | None:
        """The session's working directory, as the CLI states it in its system prompt."""
        system = (self.body or {}).get("system")
        text = system if isinstance(system, str) else _content_text(system)
        m = re.search(r"Primary working directory: (\S+)", text)
        return m.group(1) if m else None

    def last_tool_result(self) -> str:
        """The text of the newest tool_result the CLI sent back (what the tool printed)."""
        for msg in reversed(self.messages()):
            content = msg.get("content")
            if msg.get("role") != "user" or not isinstance(content, list):
                continue
            for block in reversed(content):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return _content_text(block.get("content"))
        return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(_content_text(block.get("content")))
    return "\n".join(parts)


def story_from_prompt(pattern: str = r"\bUS-\d{3}\b") -> Callable[[Request], str | None]:
    """Resolve the story as the first id matching `pattern` in the session's first user text."""
    rx = re.compile(pattern)

    def resolve(req: Request) -> str | None:
        m = rx.search(req.first_user_text())
        return m.group(0) if m else None

    return resolve


class FakeAnthropic(fake_http.ScriptedServer):
    """The server. Use as a context manager; `base_url` goes into ANTHROPIC_BASE_URL."""

    requests: list[Request]

    def __init__(
        self,
        script: Script,
        *,
        resolve_story: Callable[[Request], str | None] | None = None,
        cache_read_ratio: float = 0.0,
        model: str = MODEL,
    ) -> None:
        super().__init__(script, resolve_story or story_from_prompt())
        self.cache_read_ratio = cache_read_ratio
        self.model = model

    # -- what tests read -------------------------------------------------------------
    def sessions(self) -> dict[str, list[Request]]:
        """Main-model requests grouped by CLI session, in arrival order."""
        out: dict[str, list[Request]] = {}
        for r in self.main_requests():
            out.setdefault(r.session_id or "?", []).append(r)
        return out

    def first_request_sizes(self) -> list[tuple[str | None, int]]:
        """(story, body bytes) of each session's first request: the prompt as sent."""
        return [(reqs[0].story_id, reqs[0].size) for reqs in self.sessions().values()]

    # -- playing the script ----------------------------------------------------------
    def turn_index(self, req: Request) -> int:
        return sum(1 for m in req.messages() if m.get("role") == "assistant")

    def usage_for(self, req: Request, output_text: str) -> dict[str, int]:
        # ~4 bytes a token: close enough for a stand-in model, and it grows with the prompt.
        total = max(1, req.size // 4)
        cached = int(total * self.cache_read_ratio) if (req.turn or 0) > 0 else 0
        return {
            "input_tokens": total - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": max(1, len(output_text) // 4),
        }


class _Handler(fake_http.ScriptedHandler):
    api: FakeAnthropic
    request_type = Request

    def _error(self, kind: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def get(self, req: Request, path: str) -> None:
        self._json(200, {"data": [], "has_more": False})

    def post(self, req: Request, path: str) -> None:
        if path.endswith("/count_tokens"):
            req.kind = "count_tokens"
            self._json(200, {"input_tokens": max(1, req.size // 4)})
        elif path.endswith("/v1/messages"):
            self._messages(req)
        else:
            self._not_found(req, "not_found_error")

    def _request(self, raw: bytes) -> Request:
        req: Request = super()._request(raw)
        req.session_id = req.headers.get("x-claude-code-session-id")
        return req

    def _json_headers(self) -> dict[str, str]:
        return {"request-id": f"req_{uuid.uuid4().hex[:16]}"}

    def _messages(self, req: Request) -> None:
        body = req.body or {}
        if not body.get("tools"):
            # A side query (e.g. a small-model helper call): answer plainly.
            req.kind = "side"
            self._reply(req, [], "ok", stream=bool(body.get("stream")))
            return
        req.kind = "main"
        turn = self.api.pick_turn(req)
        req.played = _describe(turn)
        if isinstance(turn, Fail):
            req.status = turn.status
            extra = {"x-should-retry": "true" if turn.should_retry else "false"}
            if turn.retry_after is not None:
                extra["retry-after"] = str(turn.retry_after)
            self._json(turn.status, self._error(turn.error_type, turn.message), extra)
        elif isinstance(turn, Hang):
            self._hang(turn.seconds)
        elif isinstance(turn, ToolUse):
            blocks: list[dict[str, Any]] = []
            if turn.text:
                blocks.append({"type": "text", "text": turn.text})
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": turn.name,
                    "input": turn.input,
                }
            )
            self._reply(req, blocks, "tool_use", stream=bool(body.get("stream")))
        else:
            blocks = [{"type": "text", "text": turn.text}]
            self._reply(req, blocks, "end_turn", stream=bool(body.get("stream")))

    def _reply(
        self, req: Request, blocks: list[dict[str, Any]], stop: str, *, stream: bool
    ) -> None:
        if not blocks:
            blocks = [{"type": "text", "text": stop}]
            stop = "end_turn"
        usage = self.api.usage_for(req, json.dumps(blocks))
        req.usage = usage
        message = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": (req.body or {}).get("model") or self.api.model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            self._json(200, message)
            return
        self._sse(_sse_events(message))


FakeAnthropic.handler = _Handler


def _describe(turn: Turn) -> str:
    if isinstance(turn, ToolUse):
        return f"tool_use:{turn.name}"
    if isinstance(turn, Fail):
        return f"fail:{turn.status}"
    if isinstance(turn, Hang):
        return "hang"
    return "text"


def _sse_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Messages streaming sequence for a complete message."""
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": dict(block, input={}),
                    },
                )
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
