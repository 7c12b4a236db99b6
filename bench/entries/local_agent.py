"""LocalAgent in section 7: the fake OpenAI-compatible model behind the local host's model layer,
and one cheap tool the scripted model calls every round."""

from __future__ import annotations

from typing import Any

from bench.registry import BENCH_MODEL_KEY, InProcessAgent

MODEL_ID = "bench-llm"
TOOL = "bench_echo"


def _start() -> Any:
    from tests.fakes.openai import FakeOpenAI

    srv = FakeOpenAI(api_key=BENCH_MODEL_KEY)
    srv.token_delay = 0.0
    return srv.start()


def _prepare(srv: Any, host: Any) -> None:
    from runners_cli.host_models import LocalTool, OpenAIChatModel

    host.add_model(OpenAIChatModel(MODEL_ID, base_url=srv.base_url, api_key=BENCH_MODEL_KEY, model_name="gpt-bench"))
    host.add_tool(LocalTool(TOOL, "Echoes its arguments", {"type": "object", "properties": {"n": {"type": "integer"}}},
                            lambda params: {"echo": params}))


def _config(srv: Any) -> dict[str, Any]:
    return {"model": {"primary": MODEL_ID, "fallbacks": []}, "enable-all-tools": True, "timeout": 120,
            "date-grounding": False}


ENTRY = InProcessAgent(plugin="local-agent", start=_start, prepare=_prepare, config=_config,
                       stop=lambda srv: srv.stop())
