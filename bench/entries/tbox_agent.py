"""TboxAgent benchmark entry: the loopback fake Tbox streaming /api/chat."""

from __future__ import annotations

import json
from typing import Any

from bench.registry import HttpPlugin

_KEY = "pat_bench_tbox_token_0001"
_APP = "202501010000000007"


def _start() -> Any:
    from tests.fakes.tbox import FakeTbox

    srv = FakeTbox(api_key=_KEY, app_id=_APP)
    srv.record_requests = False
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or req.path != "/api/chat":
        return None  # uploads: not a run
    return req.json().get("query", "")


def _is_token(data: bytes) -> bool:
    return b"\nevent:message\ndata:" in data and b'"type":"chunk"' in data


def _config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _KEY, "app-id": _APP}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": base_url + "/api/chat",
        "headers": {"Authorization": _KEY, "source": "AGENT_SDK"},
        "json": {"appId": _APP, "query": text, "userId": "bench", "stream": True},
    }


def _floor_token(obj: Any) -> str | None:
    # the payload of a chunk is itself a JSON string
    if isinstance(obj, dict) and obj.get("type") == "chunk" and isinstance(obj.get("payload"), str):
        return json.loads(obj["payload"]).get("text") or None
    return None


ENTRY = HttpPlugin(
    plugin="tbox-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
