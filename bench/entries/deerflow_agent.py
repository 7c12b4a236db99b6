"""DeerFlowAgent benchmark entry: the loopback fake DeerFlow (nginx root, LF framing, ``end``)
streaming ``/api/langgraph/threads/{id}/runs/stream``.

Each token is one ``messages`` event whose data is ``[AIMessageChunk, metadata]``; the bare floor
streams into a new thread id with ``if_not_exists: "create"`` (one request), where the runner
creates its thread first (``POST /threads`` with LangBot's metadata, then the stream)."""

from __future__ import annotations

import uuid
from typing import Any

from bench.registry import HttpPlugin

_KEY = "df-pat-bench-token-0001"
_STREAM = "/runs/stream"


def _start() -> Any:
    from tests.fakes.deerflow import FakeDeerFlow

    srv = FakeDeerFlow(api_key=_KEY)
    srv.record_requests = False
    srv.heartbeat_interval = 5.0
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or not req.path.endswith(_STREAM):
        return None  # thread creation, uploads, cancel: not a run
    messages = (req.json().get("input") or {}).get("messages") or [{}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else ""


def _is_token(data: bytes) -> bool:
    return data.startswith(b"event: messages\n") and b'"content": ""' not in data[:80]


def _config(base_url: str) -> dict[str, Any]:
    return {"api-base": base_url, "api-key": _KEY}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"{base_url}/api/langgraph/threads/{uuid.uuid4()}{_STREAM}",  # a thread per run: never busy
        "headers": {"Authorization": f"Bearer {_KEY}"},
        "json": {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": text}]},
                 "stream_mode": ["messages-tuple"], "if_not_exists": "create"},
    }


def _floor_token(obj: Any) -> str | None:
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and obj[0].get("type") == "AIMessageChunk":
        return obj[0].get("content") or None
    return None


ENTRY = HttpPlugin(
    plugin="deerflow-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
