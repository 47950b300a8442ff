"""A scripted Gemini API on loopback, for driving the real Gemini CLI offline.

Point the CLI here with `GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT`, `GEMINI_API_KEY=x`
and a settings.json selecting `gemini-api-key` auth (see `gemini_home`). The CLI POSTs
`/v1beta/models/<model>:streamGenerateContent?alt=sse` for the agent's turns (answered from
the script: `Call` = a function call the CLI runs for real, `Say` = final text, `Quota` =
HTTP 429 RESOURCE_EXHAUSTED) and `:generateContent` for side queries (routing, next-speaker
checks), answered with a plain JSON reply. The turn to play is the number of model turns
already in `contents`, so the server keeps no per-session state.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Call:
    name: str  # e.g. run_shell_command, write_file, read_file
    args: dict[str, Any]


@dataclass
class Say:
    text: str


@dataclass
class Quota:
    """HTTP 429 RESOURCE_EXHAUSTED. `daily`: a per-day quota, which the CLI gives up on at
    once; otherwise it retries with backoff for minutes."""

    message: str = "Quota exceeded for quota metric 'Generate Content API requests per day'"
    retry_delay: str = "37s"
    daily: bool = True


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    turn: int | None = None


@dataclass
class FakeGemini:
    script: list[Call | Say | Quota]
    prompt_tokens: int = 1200
    cached_tokens: int = 200
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.handle(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeGemini:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def main_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.turn is not None]

    # ---- replies ------------------------------------------------------------------------
    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        seen = Seen(h.path, body)
        self.requests.append(seen)
        if ":streamGenerateContent" not in h.path:
            # Side query: routing/next-speaker classifiers expect a JSON object in the text.
            text = json.dumps(
                {
                    "reasoning": "simple",
                    "model_choice": "flash",
                    "next_speaker": "user",
                    "complexity_score": 10,
                }
            )
            self._json(h, 200, self._chunk([{"text": text}], final=True))
            return
        seen.turn = sum(1 for c in body.get("contents", []) if c.get("role") == "model")
        step = self.script[min(seen.turn, len(self.script) - 1)]
        if isinstance(step, Quota):
            details: list[dict[str, Any]] = [
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": step.retry_delay,
                }
            ]
            if step.daily:
                details.append(
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [
                            {"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}
                        ],
                    }
                )
            self._json(
                h,
                429,
                {
                    "error": {
                        "code": 429,
                        "message": step.message,
                        "status": "RESOURCE_EXHAUSTED",
                        "details": details,
                    }
                },
            )
            return
        if isinstance(step, Call):
            parts = [{"functionCall": {"name": step.name, "args": step.args}}]
        else:
            parts = [{"text": step.text}]
        chunk = self._chunk(parts, final=True)
        data = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _chunk(self, parts: list[dict[str, Any]], *, final: bool) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "modelVersion": "gemini-2.5-pro",
        }
        if final:
            chunk["candidates"][0]["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": self.prompt_tokens,
                "candidatesTokenCount": 9,
                "totalTokenCount": self.prompt_tokens + 9,
                "cachedContentTokenCount": self.cached_tokens,
            }
        return chunk

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def gemini_home(home: Path) -> dict[str, str]:
    """A private HOME whose settings select API-key auth; the env for the CLI."""
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
            }
        )
    )
    return {"HOME": str(home), "GEMINI_API_KEY": "x"}
