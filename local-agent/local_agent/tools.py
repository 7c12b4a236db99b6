"""LangBot tools for the model: their definitions, running one batch of calls, and what the model
reads back (JSON text, bounded, errors as results)."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from langbot_plugin.api.entities.builtin.resource.tool import LLMTool
from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIException
from langbot_plugin.api.proxies.runner.common import PermissionDeniedError

from .context import operations

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_URL = re.compile(r"(?:https?|s3|gs|az|abfss?|ftps?|sftp|file)://[^\s\"'<>\\)\]}]+", re.IGNORECASE)
_WINDOWS_PATH = re.compile(r"(?<![\w])[A-Za-z]:\\(?:[^\\\s\"'<>|*?]+\\)*[^\\\s\"'<>|*?]+")
_PATH = re.compile(r"(?<![\w/:.\\])(?:~|\.{1,2})?/(?:[\w.@+-]+/)+[\w.@+-]+")


async def _through_call_tool(*_: Any, **__: Any) -> Any:
    """``LLMTool.func`` is required by the SDK but never sent; LocalAgent calls tools through ``call_tool``."""
    raise RuntimeError("LocalAgent calls tools through ctx.api.call_tool")


async def definitions(ctx: Any, log: Any) -> list[LLMTool]:
    """Every tool granted for the run with ``call``, with its parameters (from the grant, or from
    ``get_tool_detail`` when the grant has none and ``detail`` is granted)."""
    out: list[LLMTool] = []
    for tool in ctx.resources.tools:
        ops = operations(tool, "tool")
        if "call" not in ops:
            continue
        description = tool.description or ""
        parameters = tool.parameters
        if not parameters and "detail" in ops:
            try:
                detail = await ctx.api.get_tool_detail(tool.tool_name)
                parameters = detail.get("parameters")
                description = description or str(detail.get("description") or "")
            except Exception as exc:  # noqa: BLE001 - offer the tool without a schema rather than not at all
                log(f"could not read the parameters of tool {tool.tool_name!r} ({type(exc).__name__})")
        params = parameters if isinstance(parameters, dict) and parameters else EMPTY_SCHEMA
        out.append(LLMTool(name=tool.tool_name, human_desc=description, description=description, parameters=params,
                           func=_through_call_tool))
    return out


@dataclass(slots=True)
class Call:
    id: str
    name: str
    arguments: str  # the model's JSON text
    extra: dict[str, Any] | None = None  # provider_specific_fields to round-trip

    def as_tool_call(self) -> dict[str, Any]:
        call: dict[str, Any] = {"id": self.id, "type": "function",
                                "function": {"name": self.name, "arguments": self.arguments or "{}"}}
        if self.extra:
            call["provider_specific_fields"] = self.extra
        return call

    def parsed(self) -> dict[str, Any]:
        """The arguments as a dict; ValueError with a readable reason when they are not."""
        text = (self.arguments or "").strip() or "{}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(value, dict):
            raise ValueError("the arguments must be a JSON object")
        return value


@dataclass(slots=True)
class Outcome:
    call: Call
    result: Any = None
    error: str | None = None

    @property
    def terminates(self) -> bool:
        return self.error is None and isinstance(self.result, dict) and self.result.get("terminate") is True

    def message(self, limit: int) -> dict[str, Any]:
        body = {"error": self.error} if self.error is not None else self.result
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, default=str)
        return {"role": "tool", "tool_call_id": self.call.id, "content": preview(text, limit)}


async def run_one(ctx: Any, call: Call) -> Outcome:
    """One call through ``ctx.api.call_tool`` (which reports it as ``tool.call.*`` results); any
    failure becomes an error the model reads."""
    try:
        params = call.parsed()
    except ValueError as exc:
        return Outcome(call, error=f"{call.name}: {exc}; call it again with a JSON object")
    try:
        return Outcome(call, result=await ctx.api.call_tool(call.name, params))
    except PermissionDeniedError:
        return Outcome(call, error=f"the tool {call.name!r} is not available in this conversation")
    except AgentAPIException as exc:
        return Outcome(call, error=f"{call.name} failed: {str(exc.error.message)[:2000]}")
    except Exception as exc:  # noqa: BLE001 - a tool failure is the model's to handle
        return Outcome(call, error=f"{call.name} failed: {type(exc).__name__}: {str(exc)[:2000]}")


async def run_batch(ctx: Any, calls: list[Call], parallel: bool) -> list[Outcome]:
    """All calls of one round, in the model's order; in parallel they overlap (a cancel of the run
    cancels every pending call)."""
    if not parallel or len(calls) < 2:
        return [await run_one(ctx, c) for c in calls]
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(run_one(ctx, c)) for c in calls]
    return [t.result() for t in tasks]


def references(text: str) -> list[str]:
    """Every URL and file path in ``text``, first occurrence order, verbatim."""
    found = {m.start(): m.group(0).rstrip(".,;:") for m in _URL.finditer(text)}
    masked = _URL.sub(lambda m: " " * len(m.group(0)), text)
    found.update({m.start(): m.group(0).rstrip(".,;:") for m in _WINDOWS_PATH.finditer(masked)})
    masked = _WINDOWS_PATH.sub(lambda m: " " * len(m.group(0)), masked)
    found.update({m.start(): m.group(0).rstrip(".,;:") for m in _PATH.finditer(masked)})
    return list(dict.fromkeys(v for _, v in sorted(found.items())))


def preview(text: str, limit: int) -> str:
    """``text`` when it fits in ``limit`` characters; else its head, a note of what was cut, and
    every path/URL of the full text (the model can fetch or open them)."""
    if len(text) <= limit:
        return text
    refs = references(text)
    head_len = max(limit - sum(len(r) + 1 for r in refs) - 160, limit // 4)
    head = text[:head_len]
    refs = [r for r in refs if r not in head]
    kept: list[str] = []
    room = limit - head_len - 160  # the listing is bounded too: a result of nothing but links stays a preview
    for r in refs:
        if len(r) + 1 > room:
            break
        kept.append(r)
        room -= len(r) + 1
    more = f"\n(and {len(refs) - len(kept)} more)" if len(kept) < len(refs) else ""
    listing = ("\nPaths and URLs in the full result:\n" + "\n".join(kept) + more) if refs else ""
    cut = len(text) - len(head)
    return f"{head}\n[... {cut} of {len(text)} characters cut from this tool result ...]{listing}"


def terminal_text(outcomes: list[Outcome]) -> str:
    """The text a terminating batch carries for the chat (its results' ``message``/``content``)."""
    parts = []
    for o in outcomes:
        if isinstance(o.result, dict):
            value = o.result.get("message") or o.result.get("content")
            if isinstance(value, str) and value.strip():
                parts.append(value.strip())
    return "\n\n".join(parts)
