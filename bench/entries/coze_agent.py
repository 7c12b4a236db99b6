"""CozeAgent benchmark entry: the loopback fake Coze streaming /v3/chat."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "pat_bench_token_000001"
_BOT = "7400000000000000007"


def _start() -> Any:
    from tests.fakes.coze import FakeCoze

    srv = FakeCoze(api_key=_KEY, bot_id=_BOT)
    srv.record_requests = False
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or req.path != "/v3/chat":
        return None  # uploads, cancel calls: not a run
    messages = req.json().get("additional_messages") or [{}]
    return messages[-1].get("content", "")


def _is_token(data: bytes) -> bool:
    return data.startswith(b"event:conversation.message.delta\ndata:") and b'"type": "answer"' in data


def _config(base_url: str) -> dict[str, Any]:
    return {"api-base": base_url, "api-key": _KEY, "bot-id": _BOT}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": base_url + "/v3/chat",
        "headers": {"Authorization": f"Bearer {_KEY}"},
        "json": {
            "bot_id": _BOT,
            "user_id": "bench",
            "stream": True,
            "auto_save_history": True,
            "additional_messages": [{"role": "user", "type": "question", "content": text, "content_type": "text"}],
        },
    }


def _floor_token(obj: Any) -> str | None:
    # the floor parses only each data line; an answer delta is the only Message with content and no created_at
    if isinstance(obj, dict) and obj.get("type") == "answer" and "created_at" not in obj and "chat_id" in obj:
        return obj.get("content") or None
    return None


ENTRY = HttpPlugin(
    plugin="coze-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
