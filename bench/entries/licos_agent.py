"""LicosAgent benchmark entry: the loopback fake LICOS service, managed protocol (events-v1), where
the model's tokens stream as ``graph_event`` message chunks (the legacy protocol sends each model
turn whole, so it has no per-token latency to measure)."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_TOKEN = "licos-bench-user-token-0001"


def _start() -> Any:
    from tests.fakes.licos import FakeLicos

    srv = FakeLicos(_TOKEN, managed=True)
    srv.record_requests = False
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or req.path != "/stream_run":
        return None  # cancels, resumes: not a run
    blocks = req.json().get("content", {}).get("query", {}).get("prompt", [])
    return "\n".join(b["content"]["text"] for b in blocks if b.get("type") == "text")


def _is_token(data: bytes) -> bool:
    return b'"mode": "messages"' in data and b'"AIMessageChunk"' in data and b'[{"content": "", ' not in data


def _config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _TOKEN, "protocol": "managed"}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"{base_url}/stream_run",
        "headers": {"Authorization": f"Bearer {_TOKEN}", "X-Licos-Current-User-Id": "bench"},
        "json": {"session_id": "bench", "content": {"query": {"prompt": [{"type": "text", "content": {"text": text}}]}}},
    }


def _floor_token(obj: Any) -> str | None:
    if obj.get("type") == "graph_event" and obj.get("mode") == "messages":
        msg = obj["data"][0]
        if msg.get("type") == "AIMessageChunk":
            return msg.get("content") or None
    return None


ENTRY = HttpPlugin(
    plugin="licos-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
