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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
class Text:
    text: str


@dataclass
class Fail:
    status: int = 429
    message: str = "You've hit your usage limit. Try again in 1 second."
    error_type: str = "usage_limit_reached"
    retry_after: int | None = None
    # Seconds from now when the limit resets; codex turns it into "try again at <time>".
    resets_in: int | None = None


@dataclass
class Hang:
    seconds: float = 600.0


Turn = Shell | Patch | Custom | Call | Text | Fail | Hang
TurnSource = Turn | Callable[["Request"], Turn]
Script = Callable[[str | None, "Request"], list[TurnSource]] | dict[str, list[TurnSource]]



class FailFirst:
    """Play `fail` for the first `n` requests that reach this turn, then `then`.

    Keep one instance in the script (not a new one per request): it counts its plays."""

    def __init__(self, n: int, then: TurnSource, fail: Turn | None = None) -> None:
        self.n = n
        self.then = then
        self.fail = fail or Fail()
        self.played = 0
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> Turn:
        with self._lock:
            self.played += 1
            if self.played <= self.n:
                return self.fail
        return self.then(req) if callable(self.then) else self.then

@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    size: int
    body: dict[str, Any] | None
    kind: str = "other"
    story_id: str | None = None
    turn: int | None = None
    status: int = 200
    played: str | None = None
    usage: dict[str, Any] | None = None  # the usage this server reported for the reply
    at: float = field(default_factory=time.time)

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


class FakeOpenAI:
    """The server; `base_url` (ends in /v1) goes into the codex provider's base_url."""

    def __init__(
        self,
        script: Script,
        *,
        resolve_story: Callable[[Request], str | None] | None = None,
        cached_ratio: float = 0.0,
    ) -> None:
        self.script = script
        self.resolve_story = resolve_story or story_from_prompt()
        self.cached_ratio = cached_ratio
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def provider_args(self, name: str = "fake") -> list[str]:
        """`-c` flags defining this server as codex's model provider."""
        provider = (
            f'{{name="{name}",base_url="{self.base_url}",env_key="OPENAI_API_KEY",'
            'wire_api="responses"}'
        )
        return ["-c", f"model_provider={name}", "-c", f"model_providers.{name}={provider}"]

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def main_requests(self, story_id: str | None = None) -> list[Request]:
        with self._lock:
            reqs = [r for r in self.requests if r.kind == "main"]
        return [r for r in reqs if story_id is None or r.story_id == story_id]

    def _log(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def pick_turn(self, req: Request) -> Turn:
        req.story_id = self.resolve_story(req)
        req.turn = sum(1 for i in req.items() if i.get("type") in _MODEL_ITEMS)
        if callable(self.script):
            turns = list(self.script(req.story_id, req))
        else:
            turns = list(self.script.get(req.story_id or "", []))
        if req.turn >= len(turns):
            return Text(f"(script for {req.story_id} exhausted at turn {req.turn})")
        turn = turns[req.turn]
        return turn(req) if callable(turn) else turn

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


def _make_handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            req = self._request(b"")
            server._log(req)
            if self.path.split("?", 1)[0].endswith("/models"):
                self._json(200, {"object": "list", "data": [], "models": []})
            else:
                req.status = 404
                self._json(404, _error("not_found", f"no route {self.path}"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            req = self._request(raw)
            server._log(req)
            if self.path.split("?", 1)[0].endswith("/responses"):
                self._responses(req)
            else:
                req.status = 404
                self._json(404, _error("not_found", f"no route {self.path}"))

        def _request(self, raw: bytes) -> Request:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            return Request(
                method=self.command,
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                size=len(raw),
                body=body if isinstance(body, dict) else None,
            )

        def _responses(self, req: Request) -> None:
            req.kind = "main"
            turn = server.pick_turn(req)
            req.played = type(turn).__name__.lower()
            if isinstance(turn, Fail):
                req.status = turn.status
                extra = {"retry-after": str(turn.retry_after)} if turn.retry_after else {}
                error = _error(turn.error_type, turn.message)
                if turn.resets_in is not None:
                    error["error"]["resets_at"] = int(time.time()) + turn.resets_in
                    error["error"]["resets_in_seconds"] = turn.resets_in
                self._json(turn.status, error, extra)
                return
            if isinstance(turn, Hang):
                server._stop.wait(turn.seconds)
                self.close_connection = True
                return
            item = _output_item(turn)
            usage = server.usage_for(req, json.dumps(item))
            req.usage = usage
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            model = (req.body or {}).get("model") or MODEL
            for data in _sse_events(item, usage, model):
                self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def _json(self, status: int, data: Any, extra: dict[str, str] | None = None) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

    return Handler


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "code": kind, "message": message}}


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
            {"type": "response.output_item.added", "output_index": 0,
             "item": dict(item, status="in_progress", content=[])}
        )
        events.append(
            {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
             "content_index": 0, "delta": text}
        )
    else:
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append(
        {"type": "response.completed",
         "response": dict(base, status="completed", output=[item], usage=usage)}
    )
    return events
