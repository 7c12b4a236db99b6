"""LangflowAgent benchmark entry: the loopback fake Langflow streaming /api/v1/run/{flow}.

The wire is bare JSON objects separated by blank lines; every object sits on one line, so the
bare floor reads it as NDJSON (blank lines skipped)."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "sk-langflow-bench-key-0001"
_FLOW = "54136e28-10ad-4da5-af34-dfbac388ccbf"


def _start() -> Any:
    from tests.fakes.langflow import FakeLangflow

    srv = FakeLangflow(api_key=_KEY, mode="llm")
    srv.record_requests = False
    srv.flow_id = _FLOW
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.mode = "llm"
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    if req.method != "POST" or not req.path.startswith("/api/v1/run/"):
        return None  # uploads, flow lookups: not a run
    return req.json().get("input_value", "")


def _is_token(data: bytes) -> bool:
    return data.startswith(b'{"event": "token"') and not data.startswith(b'{"event": "token", "data": {"chunk": "",')


def _config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _KEY, "flow-id": _FLOW}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"{base_url}/api/v1/run/{_FLOW}",
        "params": {"stream": "true"},
        "headers": {"x-api-key": _KEY},
        "json": {"input_value": text, "input_type": "chat", "output_type": "chat", "session_id": "bench"},
    }


def _floor_token(obj: Any) -> str | None:
    if obj.get("event") == "token":
        return obj["data"].get("chunk") or None
    return None


ENTRY = HttpPlugin(
    plugin="langflow-agent",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="ndjson",
    floor_token=_floor_token,
)
