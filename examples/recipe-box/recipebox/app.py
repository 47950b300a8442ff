"""WSGI application: a tiny router mapping (method, path) to handler functions."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

Handler = Callable[[dict], tuple[str, list[tuple[str, str]], bytes]]


class App:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}

    def route(self, method: str, path: str) -> Callable[[Handler], Handler]:
        def add(fn: Handler) -> Handler:
            self.routes[(method, path)] = fn
            return fn

        return add

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        key = (environ["REQUEST_METHOD"], environ.get("PATH_INFO") or "/")
        handler = self.routes.get(key)
        if handler is None:
            status, headers, body = "404 Not Found", [("Content-Type", "text/plain")], b"not found"
        else:
            status, headers, body = handler(environ)
        start_response(status, headers)
        return [body]


def create_app() -> App:
    app = App()

    @app.route("GET", "/")
    def index(environ: dict) -> tuple[str, list[tuple[str, str]], bytes]:
        body = json.dumps({"name": "recipe-box"}).encode()
        return "200 OK", [("Content-Type", "application/json")], body

    return app
