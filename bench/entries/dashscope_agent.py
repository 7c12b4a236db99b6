"""DashScopeAgent in the benchmark: the loopback DashScope fake streaming an agent app's answer."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "sk-bench-key"
_APP = "app-bench"


def _start() -> Any:
    from tests.fakes.dashscope import FakeDashScope

    srv = FakeDashScope(api_key=_KEY, app_id=_APP, mode="agent")
    srv.record_requests = False
    srv.record_calls = False
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.mode = "agent"
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or not req.path.endswith("/completion"):
        return None
    return (req.json().get("input") or {}).get("prompt", "")


def _is_token(data: bytes) -> bool:
    return b"event:result" in data and b'"finish_reason":"null"' in data


def _config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _KEY, "app-id": _APP, "app-type": "agent"}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": base_url + f"/apps/{_APP}/completion",
        "headers": {"Authorization": f"Bearer {_KEY}", "X-DashScope-SSE": "enable"},
        "json": {"input": {"prompt": text}, "parameters": {"incremental_output": True}, "debug": {}},
    }


def _floor_token(obj: Any) -> str | None:
    out = obj.get("output") if isinstance(obj, dict) else None
    if not isinstance(out, dict) or out.get("finish_reason") not in (None, "null"):
        return None
    return out.get("text") or None


ENTRY = HttpPlugin(
    plugin="dashscope-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
