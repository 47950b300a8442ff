"""A scripted OpenAI Responses API on loopback, for driving the real `codex` CLI offline.

Codex is pointed here through a custom model provider (`wire_api="responses"`). It POSTs
`/v1/responses` with `"stream": true`; we answer with the SSE sequence response.created,
response.output_item.added, response.output_text.delta (text only), response.output_item.done
and response.completed carrying `usage`.

Turns mirror `fake_anthropic`: `Shell` (a command codex runs for real through its `exec`
tool and sends back as custom_tool_call_output), `Patch` (its apply_patch tool), `Text`
(final message), `Fail` (HTTP error, e.g. 429 usage limit) and `Hang`. Which turn to
play is derived from the request (the number of model outputs already in `input`), so the
server needs no per-session state; the story is read from the prompt.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fake_http
from fake_http import Hang as Hang
from fake_http import Text as Text

MODEL = "gpt-5.5-codex"
# Items the model produced; counting them in `input` tells which turn comes next.
_MODEL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call"}


@dataclass
class Shell:
    """Run a shell command. Codex 0.171 exposes its tools to the model through one freeform
    `exec` tool that runs JavaScript calling `tools.exec_command({cmd})`; we send that."""

    cmd: str
    workdir: str | None = None

    def js(self) -> str:
        args: dict[str, Any] = {"cmd": self.cmd}
        if self.workdir:
            args["workdir"] = self.workdir
        return (
            f"const r = await tools.exec_command({json.dumps(args)});\n"
            'text(r.output); text("exit_code=" + r.exit_code);\n'
        )


@dataclass
class Patch:
    """Edit files through codex's apply_patch tool (`*** Begin Patch` ... `*** End Patch`),
    called from the `exec` tool like the real model does."""

    patch: str

    def js(self) -> str:
        return f"text(await tools.apply_patch({json.dumps(self.patch)}));\n"


@dataclass
class Custom:
    """A raw freeform (custom) tool call: `name` with text `input`."""

    name: str
    input: str


@dataclass
class Call:
    """A raw function call: `name` with JSON `arguments`."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Fail:
    status: int = 429
    message: str = "You've hit your usage limit. Try again in 1 second."
    error_type: str = "usage_limit_reached"
    retry_after: int | None = None
    # Seconds from now when the limit resets; codex turns it into "try again at <time>".
    resets_in: int | None = None


Turn = Shell | Patch | Custom | Call | Text | Fail | Hang
TurnSource = Turn | Callable[["Request"], Turn]
Script = Callable[[str | None, "Request"], list[TurnSource]] | dict[str, list[TurnSource]]


class FailFirst(fake_http.FailFirst):
    """`fake_http.FailFirst` whose default `fail` is a 429 usage-limit `Fail`."""

    default_fail = Fail


@dataclass
class Request(fake_http.Request):
    """A logged Responses API request; its conversation is `items()` (the `input`)."""

    def items(self) -> list[dict[str, Any]]:
        return [i for i in (self.body or {}).get("input") or [] if isinstance(i, dict)]

    def user_texts(self) -> list[str]:
        out: list[str] = []
        for item in self.items():
            if item.get("type", "message") == "message" and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    out.append(content)
                else:
                    out.extend(str(c.get("text", "")) for c in content or [] if isinstance(c, dict))
        return out

    def prompt_text(self) -> str:
        """The user's prompt: codex puts environment context in user messages too, so the
        last user text before any model output is the prompt."""
        texts = self.user_texts()
        return texts[-1] if texts else ""

    def cwd(self) -> str | None:
        """The session's working directory, from codex's <environment_context>."""
        for text in self.user_texts():
            m = re.search(r"<cwd>([^<]+)</cwd>", text)
            if m:
                return m.group(1)
        return None

    def last_output(self) -> str:
        for item in reversed(self.items()):
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out = item.get("output")
                if isinstance(out, list):
                    return "".join(str(o.get("text", "")) for o in out if isinstance(o, dict))
                return out if isinstance(out, str) else json.dumps(out)
        return ""


def story_from_prompt(pattern: str = r"\bUS-\d{3}\b") -> Callable[[Request], str | None]:
    rx = re.compile(pattern)

    def resolve(req: Request) -> str | None:
        for text in req.user_texts():
            m = rx.search(text)
            if m:
                return m.group(0)
        return None

    return resolve


class FakeOpenAI(fake_http.ScriptedServer):
    """The server; `base_url` (ends in /v1) goes into the codex provider's base_url."""

    requests: list[Request]
    base_path = "/v1"

    def __init__(
        self,
        script: Script,
        *,
        resolve_story: Callable[[Request], str | None] | None = None,
        cached_ratio: float = 0.0,
    ) -> None:
        super().__init__(script, resolve_story or story_from_prompt())
        self.cached_ratio = cached_ratio

    def provider_args(self, name: str = "fake") -> list[str]:
        """`-c` flags defining this server as codex's model provider."""
        provider = (
            f'{{name="{name}",base_url="{self.base_url}",env_key="OPENAI_API_KEY",'
            'wire_api="responses"}'
        )
        return ["-c", f"model_provider={name}", "-c", f"model_providers.{name}={provider}"]

    def turn_index(self, req: Request) -> int:
        return sum(1 for i in req.items() if i.get("type") in _MODEL_ITEMS)

    def usage_for(self, req: Request, output: str) -> dict[str, Any]:
        total = max(1, req.size // 4)
        cached = int(total * self.cached_ratio) if (req.turn or 0) > 0 else 0
        out = max(1, len(output) // 4)
        return {
            "input_tokens": total,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total + out,
        }


class _Handler(fake_http.ScriptedHandler):
    api: FakeOpenAI
    request_type = Request

    def _error(self, kind: str, message: str) -> dict[str, Any]:
        return {"error": {"type": kind, "code": kind, "message": message}}

    def get(self, req: Request, path: str) -> None:
        if path.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._not_found(req)

    def post(self, req: Request, path: str) -> None:
        if path.endswith("/responses"):
            self._responses(req)
        else:
            self._not_found(req)

    def _responses(self, req: Request) -> None:
        req.kind = "main"
        turn = self.api.pick_turn(req)
        req.played = type(turn).__name__.lower()
        if isinstance(turn, Fail):
            req.status = turn.status
            extra = {"retry-after": str(turn.retry_after)} if turn.retry_after else {}
            error = self._error(turn.error_type, turn.message)
            if turn.resets_in is not None:
                error["error"]["resets_at"] = int(time.time()) + turn.resets_in
                error["error"]["resets_in_seconds"] = turn.resets_in
            self._json(turn.status, error, extra)
            return
        if isinstance(turn, Hang):
            self._hang(turn.seconds)
            return
        item = _output_item(turn)
        usage = self.api.usage_for(req, json.dumps(item))
        req.usage = usage
        model = (req.body or {}).get("model") or MODEL
        self._sse((data["type"], data) for data in _sse_events(item, usage, model))


FakeOpenAI.handler = _Handler


def _output_item(turn: Turn) -> dict[str, Any]:
    call_id = f"call_{uuid.uuid4().hex[:20]}"
    if isinstance(turn, (Shell, Patch)):
        turn = Custom("exec", turn.js())
    if isinstance(turn, Custom):
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{uuid.uuid4().hex[:20]}",
            "call_id": call_id,
            "name": turn.name,
            "input": turn.input,
            "status": "completed",
        }
    if isinstance(turn, Call):
        return {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:20]}",
            "call_id": call_id,
            "name": turn.name,
            "arguments": json.dumps(turn.arguments),
            "status": "completed",
        }
    assert isinstance(turn, Text)
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
    }


def _sse_events(item: dict[str, Any], usage: dict[str, Any], model: str) -> list[dict[str, Any]]:
    resp_id = f"resp_{uuid.uuid4().hex[:20]}"
    base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": dict(base, status="in_progress", output=[])},
    ]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": dict(item, status="in_progress", content=[]),
            }
        )
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            }
        )
    else:
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": dict(base, status="completed", output=[item], usage=usage),
        }
    )
    return events
