"""The smallest LICOS agent project: the runtime's own agent loop around a ChatOpenAI pointed at the
test's fake OpenAI server (``FAKE_OPENAI_BASE_URL``), with one business tool. Legacy requests get
``build_agent_graph``; a managed (``agent_runtime``) request gets ``build_project_agent``, which the
runtime requires there (it adds its built-in file tools)."""

from __future__ import annotations

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from licos_agent_runtime.agent_graph import build_agent_graph
from licos_agent_runtime.project_agent import build_project_agent

SYSTEM_PROMPT = "You are a test agent. Answer briefly; use get_weather for weather questions."


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"{city} is sunny, 21 degrees"


def _model() -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini",
        base_url=os.environ["FAKE_OPENAI_BASE_URL"],
        api_key=os.environ.get("FAKE_OPENAI_API_KEY", "sk-test"),
        streaming=True,
        stream_usage=True,
        max_retries=0,
        timeout=60,
    )


def build_agent(ctx=None):
    if ctx is not None and "agent_components" in ctx.metadata:
        return build_project_agent(_model(), [get_weather], system_prompt=SYSTEM_PROMPT, ctx=ctx)
    return build_agent_graph(_model(), [get_weather], system_prompt=SYSTEM_PROMPT, ctx=ctx)
