"""Small graphs the real ``langgraph dev`` server serves for tests/real_peers/test_langgraph_real.py.

Run inside the cached LangGraph venv, never imported by the test suite itself. No network: the
"model" is a scripted chat model that streams word chunks (AIMessageChunk), reasoning in
``additional_kwargs.reasoning_content`` on the first chunk and ``usage_metadata`` on the last, the
same shapes a real OpenAI-compatible model produces through LangChain.

- ``chat``: answers ``Turn <n>: you said <text>`` (n = human messages on the thread so far).
- ``tools``: the model calls ``lookup`` (split tool-call chunks), a ToolNode runs it, the model
  answers with the tool's result.
- ``ask``: ``interrupt({"question": ...})``, then answers with the resumed value.
- ``boom``: the node raises ValueError.
- ``slow``: streams one word every 0.4 s for 40 words (a host cancel lands mid-answer).
- ``words``: streams 15 numbered words, one every 0.1 s (a stream cut mid-answer, then joined).
- ``appends``: answers like ``chat``, then a second node returns that message again, same id, with
  ``[FORCED STOP] …`` appended, as DeerFlow's LoopDetectionMiddleware does after the model.
- ``configured``: answers with the ``greeting`` it finds in its config's ``configurable``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


class ScriptedModel(BaseChatModel):
    """Streams a scripted answer (or a tool call) word by word."""

    delay: float = 0.02
    words: int = 0  # >0: answer with this many numbered words instead (the slow graph)
    use_tools: bool = False

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _plan(self, messages: list[BaseMessage]) -> tuple[str, list[dict[str, Any]]]:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"The lookup tool says: {last.content}", []
        text = _text(last)
        if self.use_tools:
            return "", [{"name": "lookup", "args": {"city": text.split()[-1]}, "id": "call_lookup_1"}]
        if self.words:
            return " ".join(f"w{i}" for i in range(self.words)), []
        turn = sum(1 for m in messages if isinstance(m, HumanMessage))
        return f"Turn {turn}: you said {text}", []

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[AIMessageChunk]:
        answer, calls = self._plan(messages)
        if calls:
            call = calls[0]
            yield AIMessageChunk(content="", tool_call_chunks=[
                {"name": call["name"], "args": "", "id": call["id"], "index": 0, "type": "tool_call_chunk"}])
            args = json.dumps({"city": call["args"]["city"]})
            for piece in (args[:5], args[5:]):
                yield AIMessageChunk(content="", tool_call_chunks=[
                    {"name": None, "args": piece, "id": None, "index": 0, "type": "tool_call_chunk"}])
        else:
            yield AIMessageChunk(content="", additional_kwargs={"reasoning_content": "Thinking it over."})
            words = answer.split(" ")
            for i, word in enumerate(words):
                yield AIMessageChunk(content=word if i == 0 else " " + word)
        n_in = sum(len(_text(m).split()) for m in messages)
        yield AIMessageChunk(
            content="",
            usage_metadata={"input_tokens": n_in, "output_tokens": 7, "total_tokens": n_in + 7},
            response_metadata={"finish_reason": "tool_calls" if calls else "stop", "model_name": "scripted"},
            chunk_position="last",
        )

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        merged: AIMessageChunk | None = None
        for chunk in self._chunks(messages):
            merged = chunk if merged is None else merged + chunk
        assert merged is not None
        return ChatResult(generations=[ChatGeneration(message=AIMessage(**merged.model_dump(exclude={"type"})))])

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                **kw: Any) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            gen = ChatGenerationChunk(message=chunk)
            if run_manager:
                run_manager.on_llm_new_token(str(chunk.content), chunk=gen)
            yield gen

    async def _astream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                       **kw: Any) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            await asyncio.sleep(self.delay)
            gen = ChatGenerationChunk(message=chunk)
            if run_manager:
                await run_manager.on_llm_new_token(str(chunk.content), chunk=gen)
            yield gen


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city} is sunny, 21 degrees"


def _single(model: ScriptedModel) -> Any:
    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", answer)
    graph.add_edge(START, "model")
    graph.add_edge("model", END)
    return graph.compile()


chat = _single(ScriptedModel(delay=0.1))
slow = _single(ScriptedModel(words=40, delay=0.4))
words = _single(ScriptedModel(words=15, delay=0.1))

FORCED_STOP = "[FORCED STOP] Repeated tool calls exceeded the safety limit."


def _appends() -> Any:
    model = ScriptedModel(delay=0.05)

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def guard(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [last.model_copy(update={"content": f"{last.content}\n\n{FORCED_STOP}"})]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_node("guard", guard)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", "guard")
    graph.add_edge("guard", END)
    return graph.compile()


appends = _appends()


def _configured() -> Any:
    async def greet(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        greeting = (config.get("configurable") or {}).get("greeting")
        return {"messages": [AIMessage(content=f"greeting={greeting}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("greet", greet)
    graph.add_edge(START, "greet")
    graph.add_edge("greet", END)
    return graph.compile()


configured = _configured()


def _tools() -> Any:
    model = ScriptedModel(use_tools=True)
    after = ScriptedModel()

    async def agent(state: MessagesState) -> dict[str, Any]:
        use = after if isinstance(state["messages"][-1], ToolMessage) else model
        return {"messages": [await use.ainvoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile()


tools = _tools()


def _ask() -> Any:
    model = ScriptedModel()

    async def clarify(state: MessagesState) -> dict[str, Any]:
        city = interrupt({"question": "Which city do you mean?"})
        return {"messages": [HumanMessage(content=f"The city is {city}")]}

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("clarify", clarify)
    graph.add_node("answer", answer)
    graph.add_edge(START, "clarify")
    graph.add_edge("clarify", "answer")
    graph.add_edge("answer", END)
    return graph.compile()


ask = _ask()


def _boom() -> Any:
    async def fail(state: MessagesState) -> dict[str, Any]:
        raise ValueError("boom: the graph failed on purpose")

    graph = StateGraph(MessagesState)
    graph.add_node("fail", fail)
    graph.add_edge(START, "fail")
    graph.add_edge("fail", END)
    return graph.compile()


boom = _boom()
