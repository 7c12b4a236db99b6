"""Benchmark entry for N8nAgent: a streaming AI-Agent workflow on the loopback fake n8n."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "n8n-bench-key"
_HEADER = "X-N8N-Key"


def _start() -> Any:
    from tests.fakes.n8n import FakeN8n

    srv = FakeN8n(mode="streaming")
    srv.record_requests = False
    srv.auth = "header"
    srv.header_name = _HEADER
    srv.api_keys = {_KEY}
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.mode = "streaming"
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _run_key(req: Any) -> str | None:
    if req.method != "POST" or not req.path.startswith("/webhook/"):
        return None
    return req.json().get("chatInput", "")


def _is_token(data: bytes) -> bool:
    return data.startswith(b'{"type":"item"')


def _config(base_url: str) -> dict[str, Any]:
    return {"webhook-url": base_url, "auth-type": "header", "header-name": _HEADER, "header-value": _KEY}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": base_url,
        "headers": {_HEADER: _KEY},
        "json": {"chatInput": text, "sessionId": "bench"},
    }


def _floor_token(obj: Any) -> str | None:
    if isinstance(obj, dict) and obj.get("type") == "item" and isinstance(obj.get("content"), str):
        return obj["content"]
    return None


ENTRY = HttpPlugin(
    plugin="n8n-agent",
    start_server=_start,
    stream=_stream,
    run_key=_run_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="ndjson",
    floor_token=_floor_token,
)
