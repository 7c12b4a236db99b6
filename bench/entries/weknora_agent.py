"""WeKnoraAgent benchmark entry: the loopback fake WeKnora streaming /knowledge-chat."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "sk-weknora-bench-000001"
_SESSION = "bench-session"  # exists in the fake from the start (sections that stream without creating one)


def _start() -> Any:
    from tests.fakes.weknora import FakeWeKnora

    srv = FakeWeKnora(api_key=_KEY)
    srv.record_requests = False
    srv.preset_session = _SESSION
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or "-chat/" not in req.path:
        return None  # session creation, stop calls: not a run
    return req.json().get("query", "")


def _is_token(data: bytes) -> bool:
    return data.startswith(b"event:message\ndata:") and b'"response_type":"answer"' in data and b'"done":false' in data


def _config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _KEY, "app-type": "chat"}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"{base_url}/knowledge-chat/{_SESSION}",
        "headers": {"X-API-Key": _KEY},
        "json": {"query": text, "agent_id": "builtin-quick-answer", "channel": "im"},
    }


async def _floor_prepare(client: Any, base_url: str, text: str) -> dict[str, Any]:
    """A new conversation needs a session first (``POST /sessions``), for the floor as for the runner."""
    resp = await client.post(f"{base_url}/sessions", headers={"X-API-Key": _KEY}, json={"title": "bench"})
    resp.raise_for_status()
    req = _floor_request(base_url, text)
    req["url"] = f"{base_url}/knowledge-chat/{resp.json()['data']['id']}"
    return req


def _floor_token(obj: Any) -> str | None:
    if isinstance(obj, dict) and obj.get("response_type") == "answer" and not obj.get("done"):
        return obj.get("content") or None
    return None


ENTRY = HttpPlugin(
    plugin="weknora-agent",
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
