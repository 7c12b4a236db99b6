"""DeerFlowAgent benchmark entry: the loopback fake DeerFlow (nginx root, LF framing, ``end``)
streaming ``/api/langgraph/threads/{id}/runs/stream``.

Each token is one ``messages`` event whose data is ``[AIMessageChunk, metadata]``. DeerFlow (since
2.0-rc) refuses a run on a thread it does not track (404), so a new conversation needs its thread
created first (``POST /threads``), by the bare floor as by the runner: two requests each."""

from __future__ import annotations

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


def _floor_request(base_url: str, text: str, thread_id: str = "") -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"{base_url}/api/langgraph/threads/{thread_id}{_STREAM}",
        "headers": {"Authorization": f"Bearer {_KEY}"},
        "json": {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": text}]},
                 "stream_mode": ["messages-tuple"]},
    }


async def _floor_prepare(client: Any, base_url: str, text: str) -> dict[str, Any]:
    """A new conversation's thread (one per run: never busy), created as DeerFlow requires."""
    resp = await client.post(f"{base_url}/api/langgraph/threads", headers={"Authorization": f"Bearer {_KEY}"},
                             json={})
    resp.raise_for_status()
    return _floor_request(base_url, text, resp.json()["thread_id"])


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
    floor_prepare=_floor_prepare,
)
