"""The plumbing shared by the scripted API servers (`fake_anthropic`, `fake_openai`).

A `ScriptedServer` listens on a free loopback port in a thread, logs every request and
picks the turn to play from its script; a `ScriptedHandler` answers over HTTP (JSON replies,
SSE streams, hangs released when the server stops). Each API module subclasses both and
adds its own turns, request accessors and wire format.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar


@dataclass
class Text:
    """The model's final answer for this session."""

    text: str


@dataclass
class Hang:
    """Accept the request and never answer (until `seconds` pass or the server stops)."""

    seconds: float = 600.0


class FailFirst:
    """Play `fail` for the first `n` requests that reach this turn, then `then`.

    Keep one instance in the script (not a new one per request): it counts its plays.
    Each API module sets `default_fail` to its own `Fail`."""

    default_fail: ClassVar[type[Any]]

    def __init__(self, n: int, then: Any, fail: Any = None) -> None:
        self.n = n
        self.then = then
        self.fail = fail or self.default_fail()
        self.played = 0
        self._lock = threading.Lock()

    def __call__(self, req: Any) -> Any:
        with self._lock:
            self.played += 1
            if self.played <= self.n:
                return self.fail
        return self.then(req) if callable(self.then) else self.then


@dataclass
class Request:
    """One logged HTTP request and how it was answered."""

    method: str
    path: str
    headers: dict[str, str]
    size: int  # request body bytes
    body: dict[str, Any] | None
    kind: str = "other"  # "main" for a scripted model turn; each API adds its own kinds
    story_id: str | None = None
    turn: int | None = None
    status: int = 200
    played: str | None = None  # a short description of the turn played
    usage: dict[str, Any] | None = None  # the usage this server reported for the reply
    at: float = field(default_factory=time.time)


_Server = TypeVar("_Server", bound="ScriptedServer")


class ScriptedServer:
    """A scripted API server on loopback. Use as a context manager.

    `script` maps a story id to its list of turns, or is a callable `(story_id, request)`
    returning that list; a turn may be a callable `request -> turn` (e.g. `FailFirst`)."""

    handler: ClassVar[type[ScriptedHandler]]
    base_path: ClassVar[str] = ""  # appended to the loopback address in `base_url`

    def __init__(self, script: Any, resolve_story: Callable[[Any], str | None]) -> None:
        self.script = script
        self.resolve_story = resolve_story
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        handler = type("Handler", (self.handler,), {"api": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def __enter__(self: _Server) -> _Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()

    def main_requests(self, story_id: str | None = None) -> list[Any]:
        with self._lock:
            reqs = [r for r in self.requests if r.kind == "main"]
        return [r for r in reqs if story_id is None or r.story_id == story_id]

    def _log(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def turns_for(self, story_id: str | None, req: Any) -> list[Any]:
        if callable(self.script):
            return list(self.script(story_id, req))
        return list(self.script.get(story_id or "", []))

    def turn_index(self, req: Any) -> int:
        """Which turn this request asks for (the model outputs already in the conversation)."""
        raise NotImplementedError

    def pick_turn(self, req: Any) -> Any:
        req.story_id = self.resolve_story(req)
        req.turn = self.turn_index(req)
        turns = self.turns_for(req.story_id, req)
        if req.turn >= len(turns):
            return Text(f"(script for {req.story_id} exhausted at turn {req.turn})")
        turn = turns[req.turn]
        return turn(req) if callable(turn) else turn


class ScriptedHandler(BaseHTTPRequestHandler):
    """Answers HTTP for a `ScriptedServer` (`self.api`): logs each request, then hands
    GETs to `get` and POSTs to `post` with the path stripped of its query."""

    protocol_version = "HTTP/1.1"
    api: Any  # the ScriptedServer, set per server
    request_type: ClassVar[type[Request]] = Request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass  # the request log is `server.requests`; keep pytest output clean

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        req = self._request(b"")
        self.api._log(req)
        self.get(req, self.path.split("?", 1)[0])

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = self._request(raw)
        self.api._log(req)
        self.post(req, self.path.split("?", 1)[0])

    def get(self, req: Any, path: str) -> None:
        raise NotImplementedError

    def post(self, req: Any, path: str) -> None:
        raise NotImplementedError

    def _request(self, raw: bytes) -> Any:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return self.request_type(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            size=len(raw),
            body=body if isinstance(body, dict) else None,
        )

    def _error(self, kind: str, message: str) -> dict[str, Any]:
        """The API's error body."""
        raise NotImplementedError

    def _not_found(self, req: Request, kind: str = "not_found") -> None:
        req.status = 404
        self._json(404, self._error(kind, f"no route {self.path}"))

    def _json_headers(self) -> dict[str, str]:
        """Headers sent with every JSON reply (before any per-reply extras)."""
        return {}

    def _json(self, status: int, data: Any, extra: dict[str, str] | None = None) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in {**self._json_headers(), **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _sse(self, events: Iterable[tuple[str, Any]]) -> None:
        """Stream `(event, data)` pairs as server-sent events, then close the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for event, data in events:
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _hang(self, seconds: float) -> None:
        """Never answer: wait until `seconds` pass or the server stops, then drop the line."""
        self.api._stop.wait(seconds)
        self.close_connection = True
