"""The scripted API servers themselves, over real loopback HTTP (no CLI): the paths the CLIs
did not take in the other tests (non-streaming, count_tokens, HEAD, unknown routes, a hang
released at shutdown) and the story/session bookkeeping the e2e tests rely on."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import fake_anthropic as fa
import fake_openai as fo
import pytest


def _post(url: str, body: dict, headers: dict | None = None, timeout: float = 10):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    return urllib.request.urlopen(req, timeout=timeout)


def _sse(raw: str) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


def _messages_body(prompt: str, *, stream: bool, assistant_turns: int = 0) -> dict:
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    for n in range(assistant_turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"result {n}"}
                ],
            }
        )
    return {
        "model": "claude-opus-4-8",
        "stream": stream,
        "messages": messages,
        "tools": [{"name": "Read"}],
        "system": [{"type": "text", "text": " - Primary working directory: /tmp/x\n"}],
    }


def test_anthropic_turns_by_story_and_position():
    script = {"US-007": [fa.ToolUse("Read", {"file_path": "/tmp/x/a"}), fa.Text("done")]}
    with fa.FakeAnthropic(script) as api:
        url = api.base_url + "/v1/messages?beta=true"
        first = json.loads(_post(url, _messages_body("Do US-007", stream=False)).read())
        second = (
            _post(
                url,
                _messages_body("Do US-007", stream=True, assistant_turns=1),
                headers={"X-Claude-Code-Session-Id": "s1"},
            )
            .read()
            .decode()
        )
        extra = json.loads(
            _post(url, _messages_body("Do US-007", stream=False, assistant_turns=2)).read()
        )
    assert first["stop_reason"] == "tool_use"
    assert first["content"][0]["input"] == {"file_path": "/tmp/x/a"}
    assert first["usage"]["input_tokens"] > 0
    events = _sse(second)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[2]["delta"]["text"] == "done"
    assert events[4]["delta"]["stop_reason"] == "end_turn"
    assert "exhausted" in extra["content"][0]["text"]
    reqs = api.main_requests()
    assert [(r.story_id, r.turn) for r in reqs] == [("US-007", 0), ("US-007", 1), ("US-007", 2)]
    assert reqs[1].session_id == "s1" and reqs[1].last_tool_result() == "result 0"
    assert reqs[0].cwd() == "/tmp/x" and reqs[1].size > reqs[0].size


def test_anthropic_side_routes_and_failures():
    fail = fa.FailFirst(1, fa.Text("ok"), fa.Fail(retry_after=7))
    with fa.FakeAnthropic({"US-001": [fail]}) as api:
        base = api.base_url
        head = urllib.request.urlopen(urllib.request.Request(base, method="HEAD"), timeout=5)
        count = json.loads(_post(base + "/v1/messages/count_tokens", {"messages": []}).read())
        side = json.loads(_post(base + "/v1/messages", {"messages": [], "stream": False}).read())
        with pytest.raises(urllib.error.HTTPError) as limited:
            _post(base + "/v1/messages", _messages_body("US-001", stream=True))
        ok = _sse(
            _post(base + "/v1/messages", _messages_body("US-001", stream=True)).read().decode()
        )
        with pytest.raises(urllib.error.HTTPError) as missing:
            _post(base + "/v2/nothing", {})
    assert head.status == 200 and count["input_tokens"] >= 1
    assert side["content"][0]["type"] == "text"
    err = limited.value
    assert err.code == 429 and err.headers["retry-after"] == "7"
    assert err.headers["x-should-retry"] == "false"
    assert json.loads(err.read())["error"]["type"] == "rate_limit_error"
    assert ok[2]["delta"]["text"] == "ok"
    assert missing.value.code == 404
    assert [r.kind for r in api.requests] == ["count_tokens", "side", "main", "main", "other"]


def test_a_hang_is_released_when_the_server_stops():
    api = fa.FakeAnthropic({"US-001": [fa.Hang(60)]}).__enter__()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            _post(
                api.base_url + "/v1/messages", _messages_body("US-001", stream=True), timeout=30
            ).read()
        except BaseException as exc:  # noqa: BLE001 - the client sees a dropped connection
            errors.append(exc)

    client = threading.Thread(target=call)
    client.start()
    time.sleep(0.5)
    assert client.is_alive()  # still waiting for an answer
    started = time.monotonic()
    api.close()
    client.join(10)
    assert not client.is_alive() and time.monotonic() - started < 10
    assert errors and api.main_requests()[0].played == "hang"


def test_openai_turns_and_usage_limit():
    script = {
        "US-002": [fo.Shell("ls"), fo.Patch("*** Begin Patch\n*** End Patch\n"), fo.Text("bye")],
        "US-003": [fo.Fail(resets_in=60)],
    }
    user = {
        "type": "message",
        "role": "user",
        "content": [
            {
                "type": "input_text",
                "text": "<environment_context><cwd>/w</cwd></environment_context>",
            }
        ],
    }
    prompt = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "## Your story\nUS-002"}],
    }
    call = {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": "x"}
    output = {
        "type": "custom_tool_call_output",
        "call_id": "c1",
        "output": [{"type": "input_text", "text": "listing"}],
    }
    with fo.FakeOpenAI(script, cached_ratio=0.5) as api:
        url = api.base_url + "/responses"
        first = _sse(_post(url, {"stream": True, "input": [user, prompt]}).read().decode())
        third = _sse(
            _post(url, {"stream": True, "input": [user, prompt, call, output, call, output]})
            .read()
            .decode()
        )
        with pytest.raises(urllib.error.HTTPError) as limited:
            _post(
                url,
                {
                    "input": [
                        {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": "US-003"}],
                        }
                    ]
                },
            )
    assert [e["type"] for e in first] == [
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    item = first[2]["item"]
    assert item["type"] == "custom_tool_call" and item["name"] == "exec"
    assert 'tools.exec_command({"cmd": "ls"})' in item["input"]
    assert [e["type"] for e in third][2] == "response.output_text.delta"
    assert third[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] > 0
    body = json.loads(limited.value.read())["error"]
    assert limited.value.code == 429 and body["type"] == "usage_limit_reached"
    assert body["resets_in_seconds"] == 60
    reqs = api.main_requests()
    assert [(r.story_id, r.turn) for r in reqs] == [("US-002", 0), ("US-002", 2), ("US-003", 0)]
    assert reqs[0].cwd() == "/w" and reqs[1].last_output() == "listing"
